import { Backoff } from "./backoff.js";
import { blobRefOf, isContentType, sha256Hex, type BlobRef } from "./blobs.js";
import type { JSONObject, JSONValue } from "./json.js";
import type { Op, OpType } from "./op.js";
import { checkQuery, type PlainQuery, type QueryOptions, type Uninferred, type Where } from "./query.js";
import { Collection } from "./collection.js";
import type { SyncEventMap, SyncEventName, SyncEvents } from "./events.js";
import type { Schema } from "./schema.js";
import { HeldRules } from "./heldrules.js";
import { checkOp, InvalidOpError } from "./validation.js";
import type { EngineHost, SyncEngine, SyncState } from "./engine.js";
import type { Invitation, Member, Role, Space } from "./spaces.js";
import { Observers, type ObservedQuery } from "./observers.js";
import { shown, type LocalRecord } from "./records.js";
import { SignedOutError } from "./database.js";
import { LocalStore, SpaceGoneError, type Changed, type OutboxEntry, type ShownRecord } from "./store.js";
import { SignIn, type AuthState } from "./signin.js";
import { Tabs, type TabMessage, type TabNews } from "./tabs.js";

export type { LocalRecord } from "./records.js";

export interface ClientOptions {
  gatewayURL: string;
  /**
   * Supplies a bearer token; `refresh` is true after the server answered 401. The client
   * keeps the token until 30 s before it expires (a JWT's `exp`; an opaque token until a
   * 401), so the provider is asked once per token, not once per request.
   */
  tokenProvider: (refresh: boolean) => Promise<string>;
  /** The IndexedDB database of this client (one per space). */
  databaseName: string;
  /** The shared space this client syncs (absent: the user's personal space). */
  spaceID?: string;
  /** The fanout, for the live stream (absent: no stream; pull by polling only). */
  fanoutURL?: string;
  /** Pull this often, in seconds, while no stream is live (absent: 30; null: never poll). */
  pollInterval?: number | null;
  /** The fanout's heartbeat interval (`STREAM_HEARTBEAT`), in seconds: a stream silent for twice this is reconnected (absent: 30). */
  heartbeatInterval?: number;
  deviceName?: string;
  /**
   * Indexes for the queries the app runs often (in every collection): a field, or fields in
   * order — `["category", "minutes"]` serves `where: {category: {eq}}` ordered by `minutes`
   * with a limit, reading no more than the limit.
   */
  indexes?: (string | string[])[];
  /** The most bytes of downloaded (and uploaded) files kept in IndexedDB (absent: 256 MiB); files waiting to be uploaded stay whatever their size. */
  blobCacheBytes?: number;
  /**
   * How long, in seconds, a write waits for others before the push that carries it leaves
   * (absent: 0.05): a burst of writes goes in one push. A full batch goes at once.
   */
  pushDelay?: number;
}

/** A query: `observe(query, callback)`. */
export interface Query<T = JSONObject> extends QueryOptions<T> {
  collection: string;
}

export interface SyncStatus {
  pendingOps: number;
  oldestPendingAge: number | null;
  lastSyncAt: number | null;
  lastError: string | null;
  /**
   * The trace id (32 hex digits) the last push went out with, in its `traceparent`: what the
   * operator looks for in the server's logs (`trace.id`) and traces. Every retry of the same
   * batch keeps it.
   */
  lastPushTraceID: string | null;
  setAsideOps: number;
  live: boolean;
  leader: boolean;
  /**
   * Whether the server takes this device's token: `unknown` until it answers, `refused`
   * once it refused a fresh one (the `unauthorized` event tells why: sign the user in
   * again), `accepted` otherwise. Offline is not refused: `lastError` says the server
   * cannot be reached.
   */
  auth: AuthState;
  /** Files of this device waiting to be uploaded, and their bytes. */
  pendingUploads: number;
  pendingUploadBytes: number;
}

export interface SetAsideOp {
  opID: string;
  collection: string;
  id: string;
  type: OpType;
  reason: string;
}

/** What `load` makes, loaded on the first call; a load that fails is tried again on the next. */
function onFirstUse<T>(load: () => Promise<T>): () => Promise<T> {
  let loaded: Promise<T> | null = null;
  return () => loaded ??= load().catch((error) => {
    loaded = null;
    throw error;
  });
}

/**
 * The browser side of Syncline: a durable IndexedDB store and outbox, optimistic local
 * writes by the server's merge rules, and a sync loop (the sync engine, `engine.ts`, loaded
 * when syncing starts) that pushes, follows jobs and pulls.
 */
export class SyncClient {
  /** What happens to this device's edits and data, as `CustomEvent`s (`SyncEventMap` names each and its `detail`); `on` is the shorter way. */
  readonly events: SyncEvents = new EventTarget() as SyncEvents;
  /** What `status()` shows beside the counts, kept with the sync engine. */
  readonly #state: SyncState = { lastSyncAt: null, lastError: null, lastPushTraceID: null, live: false, pullWanted: true, writesWaiting: false };
  /** The sync engine, once loaded (`createClient` starts loading it): it talks to the server. */
  #engine: SyncEngine | null = null;
  #running = false;
  /** Signed out with `wipe`: the database is gone and the client refuses to be used. */
  #wiped = false;
  #loop: Promise<void> | null = null;
  readonly #observers: Observers;
  /** The tabs of this database: which leads, and what they tell each other. */
  readonly #tabs: Tabs;
  /** The device's identity, kept in memory too, so a database deleted from outside gets it back. */
  readonly #identity: { device?: string; node?: string } = {};
  readonly #store: LocalStore;
  /** The app's token, kept until it expires, and whether the server takes it. */
  readonly #signIn: SignIn;

  private constructor(readonly options: ClientOptions, store: LocalStore) {
    this.#store = store;
    this.#signIn = new SignIn(options.tokenProvider, (reason, detail) => {
      this.#state.lastError = `the server refused the sign-in (${reason}): ${detail}`;
      this.#emit("unauthorized", { reason, detail });
    });
    this.#observers = new Observers(async (query) => (await store.query(query.collection, query)).map((row) => shown(row)));
    store.onReset = () => void this.#storageReset();
    this.#tabs = new Tabs(`syncline:${options.databaseName}`, {
      heard: (message) => this.#heard(message),
      lead: () => this.#lead(),
      sync: async (timeout) => (await this.#engineReady()).sync(timeout),
    });
  }

  /** Tells the other tabs of this database. */
  #tell(message: TabMessage): void {
    this.#tabs.tell(message);
  }

  /** News from another tab of this database. */
  #heard(message: TabNews): void {
    switch (message.type) {
      case "changed":
        this.#observers.changed(message.keys);
        this.#wakeUp();
        return;
      case "changedAll":
        this.#observers.rereadAll();
        return;
      case "rulesChanged":
        this.#rulesHeld = null;
        return;
      case "event":
        if (message.name === "unauthorized") this.#signIn.heardRefused();
        this.events.dispatchEvent(new CustomEvent(message.name, { detail: message.detail }));
        return;
      case "live":
        // The leader's stream serves every tab: a follower is as live as it is.
        if (!this.#tabs.leader) this.#state.live = message.live;
        return;
      case "liveAsk":
        if (this.#tabs.leader) this.#tell({ type: "live", live: this.#state.live });
        return;
      case "signedOut":
        void this.#signedOut(message.wiped);
        return;
    }
  }

  /**
   * The database was deleted or evicted while in use: it starts over with this device's
   * identity and a full pull. Edits not yet sent went with it; the app hears `storageReset`.
   */
  async #storageReset(): Promise<void> {
    if (this.#identity.node) await this.#store.setMeta("node", this.#identity.node);
    if (this.#identity.device) await this.#store.setMeta("device_id", this.#identity.device);
    this.#state.pullWanted = true;
    this.#state.lastError = "the browser deleted this device's database; starting over with a full pull";
    this.#emit("storageReset", { databaseName: this.options.databaseName });
    this.#changedAll();
    this.#wakeUp();
  }

  // MARK: - Spaces (online: loaded on first use)

  readonly #spaces = onFirstUse(async () => new (await import("./spaces.js")).Spaces(this.options.gatewayURL, this.#signIn));

  /** The user's spaces, the personal one first. */
  async spaces(): Promise<Space[]> {
    return (await this.#spaces()).list();
  }

  /** A new shared space, owned by this user. */
  async createSpace(name: string): Promise<Space> {
    return (await this.#spaces()).create(name);
  }

  /** A single-use invitation code to `spaceID` with `role` (owners only), valid `expiresIn` seconds. */
  async invite(spaceID: string, role: Role, expiresIn?: number): Promise<Invitation> {
    return (await this.#spaces()).invite(spaceID, role, expiresIn);
  }

  async acceptInvitation(code: string): Promise<{ spaceID: string; role: Role }> {
    return (await this.#spaces()).accept(code);
  }

  async members(spaceID: string): Promise<Member[]> {
    return (await this.#spaces()).members(spaceID);
  }

  async setRole(role: Role, userID: string, spaceID: string): Promise<void> {
    return (await this.#spaces()).setRole(role, userID, spaceID);
  }

  /** Removes a member (this user's own id: leave the space). */
  async removeMember(userID: string, spaceID: string): Promise<void> {
    return (await this.#spaces()).removeMember(userID, spaceID);
  }

  async deleteSpace(spaceID: string): Promise<void> {
    return (await this.#spaces()).delete(spaceID);
  }

  /**
   * The client of another space (null: the personal one) with the same server, sign-in and
   * device id — one browser is one device in every space — and its own database. It opens
   * offline too: the device id is copied when this client has one, else asked of this
   * client when the new one first syncs.
   */
  async clientFor(spaceID: string | null, databaseName: string): Promise<SyncClient> {
    const options: ClientOptions = { ...this.options, databaseName };
    if (spaceID) options.spaceID = spaceID;
    else delete options.spaceID;
    const client = await SyncClient.create(options);
    const device = this.#identity.device ?? await this.#store.meta<string>("device_id");
    if (device && !(await client.#store.meta<string>("device_id"))) await client.#store.setMeta("device_id", device);
    client.#sharedDevice = async () => (await this.#engineReady()).registeredDevice();
    return client;
  }

  /** Where the device id comes from when this client has none (`clientFor`: the client it was made from). */
  #sharedDevice: (() => Promise<string>) | undefined;

  /** Calls `listener` with each `name` event's detail; returns a function that stops it. */
  on<K extends SyncEventName>(name: K, listener: (detail: SyncEventMap[K]) => void): () => void {
    const handler = (event: CustomEvent<SyncEventMap[K]>) => listener(event.detail);
    this.events.addEventListener(name, handler);
    return () => this.events.removeEventListener(name, handler);
  }

  /** Tells this tab's listeners and every other tab's. */
  #emit<K extends SyncEventName>(name: K, detail: SyncEventMap[K]): void {
    this.events.dispatchEvent(new CustomEvent(name, { detail }));
    this.#tell({ type: "event", name, detail });
  }

  static async create(options: ClientOptions): Promise<SyncClient> {
    // Asks the browser not to evict this site's data under storage pressure (it may say no).
    void globalThis.navigator?.storage?.persist?.().catch(() => false);
    const indexes = (options.indexes ?? []).map((index) => (typeof index === "string" ? [index] : index));
    const client = new SyncClient(options, await LocalStore.open(options.databaseName, indexes));
    // The sync engine loads beside the app's first reads, not before them (a failure is tried again when syncing starts).
    client.#engineReady().catch(() => {});
    return client;
  }

  // MARK: - Writes

  upsert(collection: string, id: string, data: JSONObject, options: { ifVersion?: number } = {}): Promise<string> {
    return this.#write({ type: "upsert", collection, id, data, if_version: options.ifVersion });
  }

  patch(collection: string, id: string, fields: JSONObject, options: { ifVersion?: number } = {}): Promise<string> {
    return this.#write({ type: "patch", collection, id, data: fields, if_version: options.ifVersion });
  }

  delete(collection: string, id: string, options: { ifVersion?: number } = {}): Promise<string> {
    return this.#write({ type: "delete", collection, id, if_version: options.ifVersion });
  }

  publish(collection: string, id: string, publicID: string, options: { canFork?: boolean; listed?: boolean } = {}): Promise<string> {
    return this.#write({ type: "publish", collection, id, public_id: publicID, can_fork: options.canFork ?? true, listed: options.listed ?? true });
  }

  unpublish(collection: string, id: string): Promise<string> {
    return this.#write({ type: "unpublish", collection, id });
  }

  fork(collection: string, id: string, publicID: string): Promise<string> {
    return this.#write({ type: "fork", collection, id, public_id: publicID });
  }

  /**
   * Adds `by` to the counter in `field` (0 when absent). Increments from every device add
   * up, each once however often it is sent; a whole write of the field newer than an
   * increment overrules it. Shown at once.
   */
  increment(collection: string, id: string, field: string, by: number, options: { ifVersion?: number } = {}): Promise<string> {
    return this.#write({ type: "increment", collection, id, field, by, if_version: options.ifVersion });
  }

  /** Adds `values` to the set held in the array `field`: an add wins over a remove no newer than it. Shown at once. */
  add(collection: string, id: string, field: string, values: JSONValue[], options: { ifVersion?: number } = {}): Promise<string> {
    return this.#write({ type: "add", collection, id, field, values, if_version: options.ifVersion });
  }

  /** Takes `values` out of the set held in the array `field` (an add newer than this keeps its element). Shown at once. */
  remove(collection: string, id: string, field: string, values: JSONValue[], options: { ifVersion?: number } = {}): Promise<string> {
    return this.#write({ type: "remove", collection, id, field, values, if_version: options.ifVersion });
  }

  /**
   * Asks the app's backend (the collection's hook) to run `name` with `args` on the record.
   * `guess` is shown at once, as a patch would be, and replaced by what the backend
   * answers once the job's changes are pulled; a refusal comes as a `rejected` event
   * (`hook:<reason>`), and the guess goes with the op.
   */
  call(collection: string, id: string, name: string, args: JSONValue = null, options: { guess?: JSONObject } = {}): Promise<string> {
    return this.#write({ type: "call", collection, id, name, args, ...(options.guess ? { guess: options.guess } : {}) });
  }

  /**
   * Durable in the outbox and shown when this resolves; resolves with the op id. A write the
   * server would refuse rejects at once with `InvalidOpError`, nothing stored. When the
   * browser refuses the space (quota), the write rejects, and `status().lastError` and a
   * `storageFull` event say so: never a silent loss.
   */
  async #write(fields: Omit<Op, "op_id">): Promise<string> {
    const op: Op = { op_id: crypto.randomUUID(), ...fields };
    if (op.if_version === undefined) delete op.if_version;
    checkOp(op);
    const refusal = (await this.#rules()).screen(op);
    if (refusal) {
      throw new InvalidOpError(`${refusal.detail} (rule ${refusal.rule})`, refusal.pointer.split("/")[1] ?? "data", null, refusal.rule);
    }
    let stored: { op: Op; row: ShownRecord | null; node: string };
    try {
      stored = await this.#store.enqueue(op, this.#identity.node, Date.now());
      this.#identity.node = stored.node;
    } catch (error) {
      if ((error as DOMException)?.name === "QuotaExceededError") {
        this.#state.lastError = "the browser's storage for this site is full: the edit was not saved";
        this.#emit("storageFull", { opID: op.op_id });
      }
      throw error;
    }
    this.#changed([{ collection: stored.op.collection, id: stored.op.id, row: stored.row }]);
    this.#state.writesWaiting = true;
    this.#wakeUp();
    return stored.op.op_id;
  }

  /**
   * The app's rules as this device last fetched them (kept in the database, so they hold
   * offline), with its role in the space: read once, again after the engine fetched a new
   * version.
   */
  #rulesHeld: Promise<HeldRules> | null = null;
  #rules(): Promise<HeldRules> {
    return this.#rulesHeld ??= HeldRules.read(this.#store, this.options.spaceID);
  }

  // MARK: - Reads

  /**
   * One collection, typed: `collection<Recipe>("recipes")` (types only) or
   * `collection("recipes", recipeSchema)` (every write checked against the schema too).
   */
  collection<T extends object = JSONObject>(name: string, schema?: Schema<T>): Collection<T> {
    return new Collection<T>(this, name, schema);
  }

  async record<T = JSONObject>(collection: string, id: string): Promise<LocalRecord<T> | null> {
    const row = await this.#store.record(collection, id);
    return row ? shown<T>(row) : null;
  }

  /** The collection's records as this device shows them, by id (deleted ones are not). */
  async records<T = JSONObject>(collection: string): Promise<LocalRecord<T>[]> {
    return (await this.#store.records(collection)).map((row) => shown<T>(row));
  }

  /** The records of `collection` the query selects: `where` conditions (all must hold), `orderBy`, `limit`, `offset`. */
  /** A query that is not one (an unknown operator, a limit of -1) throws `QueryError`. */
  async query<T = JSONObject>(collection: string, options: QueryOptions<Uninferred<T>> = {}): Promise<LocalRecord<T>[]> {
    checkQuery(options);
    return (await this.#store.query(collection, options as PlainQuery)).map((row) => shown<T>(row));
  }

  /** How many records of `collection` meet `where`. */
  async count<T = JSONObject>(collection: string, options: { where?: Where<Uninferred<T>> } = {}): Promise<number> {
    checkQuery(options);
    return (await this.#store.query(collection, { where: options.where as PlainQuery["where"] })).length;
  }

  /**
   * Calls back at once and whenever the result changes: `observe(collection, callback)`,
   * `observe(collection, id, callback)` or `observe(query, callback)`. A change that leaves
   * the result as it was calls nothing. Returns an unsubscribe function.
   */
  observe<T = JSONObject>(target: string | Query<Uninferred<T>>, idOrCallback: string | ((records: LocalRecord<T>[]) => void), maybeCallback?: (records: LocalRecord<T>[]) => void): () => void {
    if (typeof target !== "string") checkQuery(target);
    const query: ObservedQuery = typeof target === "string"
      ? { collection: target, ...(typeof idOrCallback === "string" ? { where: { id: { eq: idOrCallback } } } : {}) }
      : target as ObservedQuery;
    const callback = typeof idOrCallback === "string" ? maybeCallback! : idOrCallback;
    return this.#observers.add(query, callback as (records: LocalRecord[]) => void);
  }

  /** Records changed: this tab's observers of them read again, and so do other tabs' (whose leader also wakes). */
  #changed(changes: Changed[]): void {
    this.#observers.changed(changes);
    // Small sets travel with what shows now; a large pull's keys alone.
    const rows = changes.length <= 200;
    this.#tell({ type: "changed", keys: changes.map((change) => ({ collection: change.collection, id: change.id, ...(rows && change.row !== undefined ? { row: change.row } : {}) })) });
  }

  /** The sync state of records changed, wherever they are: every observer reads again. */
  #changedAll(): void {
    this.#observers.rereadAll();
    this.#tell({ type: "changedAll" });
  }

  async status(): Promise<SyncStatus> {
    const [counts, uploads] = await Promise.all([this.#store.status(), this.#store.pendingUploadTotals()]);
    return {
      pendingOps: counts.pending, oldestPendingAge: counts.oldest === null ? null : (Date.now() - counts.oldest) / 1000,
      lastSyncAt: this.#state.lastSyncAt, lastError: this.#state.lastError, lastPushTraceID: this.#state.lastPushTraceID, setAsideOps: counts.setAside,
      live: this.#state.live, leader: this.#tabs.leader, auth: this.#signIn.state,
      pendingUploads: uploads.count, pendingUploadBytes: uploads.bytes,
    };
  }

  // MARK: - Files

  /**
   * Keeps `file` in IndexedDB as a file of this device's and queues its upload; put
   * `blobValue(ref)` anywhere in a record's data. Works offline; the ops that reference it
   * are pushed only after it is uploaded.
   */
  async attach(file: Blob, contentType: string = file.type || "application/octet-stream"): Promise<BlobRef> {
    if (await this.#store.meta<boolean>("gone")) throw new SpaceGoneError();
    if (!isContentType(contentType)) throw new Error(`content type ${contentType} is not a media type such as image/jpeg`);
    const ref: BlobRef = { sha256: await sha256Hex(await file.arrayBuffer()), size: file.size, content_type: contentType };
    await this.#store.addOwnBlob(ref, file, Date.now());
    this.#wakeUp();
    return ref;
  }

  /**
   * The file as a `Blob` (for `URL.createObjectURL`): at once when this browser holds it,
   * else downloaded now, checked against its hash, and kept in a cache bounded by
   * `blobCacheBytes` (least recently used out first).
   */
  async blob(ref: BlobRef | { $blob: BlobRef }): Promise<Blob> {
    const file = "$blob" in ref ? blobRefOf(ref as never) : ref;
    if (!file) throw new Error("not a file reference");
    const known = await this.#store.localBlob(file.sha256);
    if (known) {
      await this.#store.touchBlob(file.sha256, Date.now());
      return known.blob;
    }
    return (await this.#engineReady()).transfers.download(file, this.options.blobCacheBytes ?? 256 * 1024 * 1024);
  }

  async setAside(): Promise<SetAsideOp[]> {
    return (await this.#store.setAside()).map((entry: OutboxEntry) => ({
      opID: entry.op_id, collection: entry.collection, id: entry.id, type: entry.op.type, reason: entry.reason ?? "",
    }));
  }

  /** Sends a set-aside op again. */
  async retry(opID: string): Promise<void> {
    const key = await this.#store.resolveSetAside(opID, true);
    if (!key) throw new Error(`no op ${opID} is set aside`);
    this.#changed([key]);
    this.#wakeUp();
  }

  /** Gives up on a set-aside op; the record shows the server's state again. */
  async drop(opID: string): Promise<void> {
    const key = await this.#store.resolveSetAside(opID, false);
    if (!key) throw new Error(`no op ${opID} is set aside`);
    this.#changed([key]);
  }

  // MARK: - Lifecycle

  /**
   * Syncs in the background until `stop()`. Of all the tabs of this database, the one that
   * holds its Web Lock runs the loop; the others wait for the lock, so when the leader's tab
   * closes, another takes over at once.
   */
  start(): void {
    if (this.#wiped) throw new SignedOutError();
    if (this.#running) return;
    this.#running = true;
    this.#loop = this.#tabs.follow();
    this.#tell({ type: "liveAsk" });
    globalThis.addEventListener?.("online", this.#online);
  }

  /** The browser's `online` event: the leader's stream reconnects at once. */
  readonly #online = (): void => this.#engine?.networkBack();

  /** Leads until `stop()`: loads the sync engine (waiting out a failure to load it, offline) and runs its loop. */
  async #lead(): Promise<void> {
    const stopped = this.#tabs.abandoned;
    const backoff = new Backoff();
    while (this.#running) {
      try {
        await this.#engineReady();
        break;
      } catch (error) {
        this.#state.lastError = `cannot load the sync engine: ${error instanceof Error ? error.message : String(error)}`;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, backoff.next() * 1000);
          stopped?.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
        });
      }
    }
    if (!this.#running) return;
    await this.#engine!.run();
    this.#running = false;  // stopped, or the space is gone
  }

  /** The sync engine, loaded on first use: it holds everything that talks to the server. */
  readonly #engineReady = onFirstUse(async () => {
    const host: EngineHost = {
      store: this.#store, state: this.#state, identity: this.#identity,
      gatewayURL: this.options.gatewayURL, signIn: this.#signIn, spaceID: this.options.spaceID,
      fanoutURL: this.options.fanoutURL, pollInterval: this.options.pollInterval, pushDelay: this.options.pushDelay, deviceName: this.options.deviceName,
      heartbeatInterval: this.options.heartbeatInterval, liveChanged: (live) => this.#tell({ type: "live", live }),
      running: () => this.#running, leader: () => this.#tabs.leader, sharedDevice: () => this.#sharedDevice?.() ?? null,
      emit: (name, detail) => this.#emit(name, detail), changed: (changes) => this.#changed(changes), changedAll: () => this.#changedAll(),
      rulesChanged: () => { this.#rulesHeld = null; this.#tell({ type: "rulesChanged" }); },
    };
    return this.#engine = new (await import("./engine.js")).SyncEngine(host);
  });

  async stop(): Promise<void> {
    this.#running = false;
    globalThis.removeEventListener?.("online", this.#online);
    this.#tabs.abandon();
    this.#wakeUp(true);
    await this.#loop;
    this.#loop = null;
  }

  /**
   * Signs this device out, in every tab of this database: syncing stops and the token kept
   * is forgotten (`start()` after the next sign-in resumes). With `wipe` (a shared
   * computer), the device's data goes too — records, the outbox, files and the device's
   * identity: the database is deleted, and this client and the other tabs' can no longer be
   * used (`SignedOutError`); the next sign-in creates a new client, a new device. Every
   * tab hears `signedOut`. Resolves with how many edits the server had not confirmed: with
   * `wipe` they are lost (`await client.sync()` first sends them).
   */
  async signOut(options: { wipe?: boolean } = {}): Promise<{ unsentOps: number }> {
    const unsentOps = (await this.status()).pendingOps;
    const wiped = options.wipe === true;
    this.#tell({ type: "signedOut", wiped });
    await this.#signedOut(wiped);
    return { unsentOps };
  }

  /** This tab's part of signing out (the tab that signed out, or another told of it). */
  async #signedOut(wiped: boolean): Promise<void> {
    await this.stop();
    this.#signIn.forget();
    if (wiped) {
      this.#wiped = true;
      this.#tabs.close();
      await this.#store.wipe();
    }
    this.events.dispatchEvent(new CustomEvent("signedOut", { detail: { wiped } }));
  }

  /** Closes the database and the channel (after `stop()`). */
  close(): void {
    this.#tabs.close();
    this.#store.close();
  }

  /**
   * Pushes everything, waits for the jobs (up to `timeout` seconds) and pulls to the end,
   * now — in this tab when it leads or no tab does, else by asking the leader.
   */
  async sync(timeout = 30): Promise<void> {
    return this.#tabs.sync(timeout);
  }

  /** Asks the sync engine, when it runs here, for another pass (`now`: even within the server's `Retry-After`: stopping). */
  #wakeUp(now = false): void {
    this.#engine?.wakeUp(now);
  }
}

/** A client of one space, its data in the IndexedDB database `databaseName`. */
export function createClient(options: ClientOptions): Promise<SyncClient> {
  return SyncClient.create(options);
}
