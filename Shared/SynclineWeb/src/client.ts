import { Backoff, retryAfterSeconds } from "./backoff.js";
import { blobRefOf, isContentType, sha256Hex, type BlobRef } from "./blobs.js";
import { halved, maxOpsPerPush, maxPushBytes, traceparent } from "./batching.js";
import type { JSONObject } from "./json.js";
import type { Op, OpType, RecordView } from "./op.js";
import { canonicalJSON } from "./json.js";
import { checkQuery, matches, recordOrder, type PlainQuery, type QueryOptions, type Uninferred, type Where } from "./query.js";
import { Collection } from "./collection.js";
import type { SyncEventMap, SyncEventName, SyncEvents } from "./events.js";
import type { Schema } from "./schema.js";
import { checkOp } from "./validation.js";
import { LocalStore, type Changed, type LocalBlob, type OutboxEntry, type ShownRecord } from "./store.js";

/** Files up to this size are uploaded in one `PUT`; larger ones with tus, in pieces, resumed after a reload. */
const resumableUploadThreshold = 4 * 1024 * 1024;
const uploadPieceBytes = 4 * 1024 * 1024;

export interface ClientOptions {
  gatewayURL: string;
  /** Supplies a bearer token; `refresh` is true after the server answered 401. */
  tokenProvider: (refresh: boolean) => Promise<string>;
  /** The IndexedDB database of this client (one per space). */
  databaseName: string;
  /** The shared space this client syncs (absent: the user's personal space). */
  spaceID?: string;
  /** The fanout, for the live stream (absent: no stream; pull by polling only). */
  fanoutURL?: string;
  /** Pull this often, in seconds, while no stream is live (absent: 30; null: never poll). */
  pollInterval?: number | null;
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

/** A record as the app sees it. */
export interface LocalRecord<T = JSONObject> {
  collection: string;
  id: string;
  data: T;
  version: number;
  hasPendingEdits: boolean;
  /** Why the server refused an edit of it, while that edit waits in `setAside()`. */
  setAsideReason: string | null;
  visibility: "private" | "unlisted" | "public";
  publicID: string | null;
  canFork: boolean;
  forkedFrom: string | null;
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

/** An observed query, and the result it was last called back with. */
interface Observer {
  query: PlainQuery & { collection: string };
  callback: (records: LocalRecord<any>[]) => void;
  /** The result last called back with (its canonical JSON), and the result now, with its ids. */
  last: string | null;
  records: LocalRecord[] | null;
  ids: Set<string>;
  /** The records changed since the result was read, with what shows for each now (null: read it all again). */
  changes: Map<string, Changed> | null;
  /** Whether a read of the result is under way, and whether another is wanted after it. */
  reading: boolean;
  again: boolean;
}

/** The space is gone (deleted, or this user was removed): its local data went with it. */
export class SpaceGoneError extends Error {
  constructor() {
    super("the space is gone: deleted, or you are no longer a member");
    this.name = "SpaceGoneError";
  }
}

/** A space the user belongs to. */
export interface Space {
  spaceID: string;
  name: string;
  role: "owner" | "editor" | "viewer";
  personal: boolean;
}

/** How long, in seconds, a job may run with a live stream before it is asked for anyway (an outcome the stream lost). */
const liveJobWait = 10;

/** A failure worth retrying after a pause (network, 429, 5xx, auth). */
class Retry extends Error {
  constructor(message: string, readonly after?: number) {
    super(message);
  }
}

interface Answer {
  status: number;
  json: any;
  detail: string;
  retryAfter?: number;
  headers: Headers;
}

function shown<T>(row: ShownRecord): LocalRecord<T> {
  return {
    collection: row.collection, id: row.id, data: row.data as unknown as T, version: row.version, hasPendingEdits: row.pending,
    setAsideReason: row.set_aside_reason, visibility: row.visibility, publicID: row.public_id, canFork: row.can_fork, forkedFrom: row.forked_from,
  };
}

/** The op a problem is about: its `op_index` member (the detail is for people, never parsed). */
function problemOpIndex(problem: any): number | null {
  return Number.isInteger(problem?.op_index) ? problem.op_index : null;
}

/**
 * The browser side of Syncline: a durable IndexedDB store and outbox, optimistic local
 * writes by the server's merge rules, and a sync loop that pushes, follows jobs and pulls.
 */
export class SyncClient {
  /** What happens to this device's edits and data, as `CustomEvent`s (`SyncEventMap` names each and its `detail`); `on` is the shorter way. */
  readonly events: SyncEvents = new EventTarget() as SyncEvents;
  #lastSyncAt: number | null = null;
  #lastError: string | null = null;
  #lastPushTraceID: string | null = null;
  #pullWanted = true;
  /**
   * The furthest the server has shown this space to be (a succeeded job's checkpoint, a
   * poke's cursor): pulls ask for at least it (`min_cursor`), so a server reading from a
   * replica that lags still shows this device its own writes.
   */
  #reachedCursor = 0;
  #maxBytes = maxPushBytes;
  #running = false;
  #wake: (() => void) | null = null;
  /** Before this time (ms) nothing is sent: the server asked to wait (`Retry-After`), and writes do not cut it short. */
  #notBefore = 0;
  /** A write came while the loop waited: the next pass waits `pushDelay` first, for others. */
  #writesWaiting = false;
  #loop: Promise<void> | null = null;
  #passing: Promise<boolean> | null = null;
  #observers = new Set<Observer>();
  /** Whether this tab holds the database's lock and so runs the sync loop for every tab. */
  #leader = false;
  #abandonLock: AbortController | null = null;
  /** The other tabs of this database: changes, events and sync requests travel here. */
  readonly #channel: BroadcastChannel;
  readonly #lockName: string;
  #syncRequests = new Map<string, { resolve: () => void; reject: (error: Error) => void }>();
  /** The live stream (the leader's only), whether it is up, and the space its hello named. */
  #stream: EventSource | null = null;
  #live = false;
  #streamSpace: string | null = null;
  #streamBackoff = new Backoff();
  #streamRetry: ReturnType<typeof setTimeout> | null = null;
  /** Outcomes of this device's jobs heard on the stream, until the jobs are settled (the stream may tell before the push's 202 is stored). */
  #heardJobs = new Map<string, { status: string; checkpoint: string | null; troubled: boolean }>();
  /** Jobs are asked for once more: no stream has been live since they were sent, or one was (re)opened and may have missed an outcome. */
  #askJobs = true;

  /** The device's identity, kept in memory too, so a database deleted from outside gets it back. */
  #identity: { device?: string; node?: string } = {};

  readonly #store: LocalStore;

  private constructor(readonly options: ClientOptions, store: LocalStore) {
    this.#store = store;
    store.onReset = () => void this.#storageReset();
    this.#lockName = `syncline:${options.databaseName}`;
    this.#channel = new BroadcastChannel(this.#lockName);
    this.#channel.onmessage = (message: MessageEvent) => void this.#heard(message.data);
  }

  /** A message of another tab of this database. */
  async #heard(message: any): Promise<void> {
    switch (message?.type) {
      case "changed":
        this.#deliverChanged(message.keys as Changed[]);
        this.#wakeUp();
        return;
      case "changedAll":
        this.#rereadAll();
        return;
      case "event":
        this.events.dispatchEvent(new CustomEvent(message.name, { detail: message.detail }));
        return;
      case "sync":
        if (!this.#leader) return;
        try {
          await this.sync(message.timeout);
          this.#channel.postMessage({ type: "synced", id: message.id });
        } catch (error) {
          this.#channel.postMessage({ type: "synced", id: message.id, error: error instanceof Error ? error.message : String(error) });
        }
        return;
      case "synced": {
        const waiting = this.#syncRequests.get(message.id);
        this.#syncRequests.delete(message.id);
        if (message.error) waiting?.reject(new Error(message.error));
        else waiting?.resolve();
        return;
      }
    }
  }

  /**
   * The database was deleted or evicted while in use: it starts over with this device's
   * identity and a full pull. Edits not yet sent went with it; the app hears `storageReset`.
   */
  async #storageReset(): Promise<void> {
    if (this.#identity.node) await this.#store.setMeta("node", this.#identity.node);
    if (this.#identity.device) await this.#store.setMeta("device_id", this.#identity.device);
    this.#pullWanted = true;
    this.#lastError = "the browser deleted this device's database; starting over with a full pull";
    this.#emit("storageReset", { databaseName: this.options.databaseName });
    this.#changedAll();
    this.#wakeUp();
  }

  /** The space answered 404: its local data goes, the app hears which edits were lost, syncing ends. */
  async #spaceGone(): Promise<never> {
    const lost = await this.#store.forgetSpace();
    if (lost.length > 0) this.#emit("editsLost", { spaceID: this.options.spaceID, opIDs: lost });
    this.#emit("spaceGone", { spaceID: this.options.spaceID });
    this.#changedAll();
    throw new SpaceGoneError();
  }

  // MARK: - Spaces (online)

  /** A JSON answer of status `expected`; any other status throws with the server's detail. */
  async #call(method: string, path: string, expected: number, body?: unknown): Promise<any> {
    const answer = await this.#send(method, path, body === undefined ? undefined : JSON.stringify(body));
    if (answer.status !== expected) throw new Error(`server answered ${answer.status}: ${answer.detail}`);
    return answer.json;
  }

  private static space(view: any): Space {
    return { spaceID: view.space_id, name: view.name, role: view.role, personal: view.personal };
  }

  /** The user's spaces, the personal one first. */
  async spaces(): Promise<Space[]> {
    return ((await this.#call("GET", "/v1/spaces", 200)).items as any[]).map(SyncClient.space);
  }

  /** A new shared space, owned by this user. */
  async createSpace(name: string): Promise<Space> {
    return SyncClient.space(await this.#call("POST", "/v1/spaces", 201, { name }));
  }

  /** A single-use invitation code to `spaceID` with `role` (owners only), valid `expiresIn` seconds. */
  async invite(spaceID: string, role: "owner" | "editor" | "viewer", expiresIn?: number): Promise<{ invitationID: string; code: string; role: string; expiresAt: string }> {
    const view = await this.#call("POST", `/v1/spaces/${encodeURIComponent(spaceID)}/invitations`, 201, expiresIn === undefined ? { role } : { role, expires_in: expiresIn });
    return { invitationID: view.invitation_id, code: view.code, role: view.role, expiresAt: view.expires_at };
  }

  async acceptInvitation(code: string): Promise<{ spaceID: string; role: string }> {
    const joined = await this.#call("POST", `/v1/invitations/${encodeURIComponent(code)}/accept`, 200);
    return { spaceID: joined.space_id, role: joined.role };
  }

  async members(spaceID: string): Promise<{ userID: string; role: string; joinedAt: string }[]> {
    return ((await this.#call("GET", `/v1/spaces/${encodeURIComponent(spaceID)}/members`, 200)).items as any[])
      .map((member) => ({ userID: member.user_id, role: member.role, joinedAt: member.joined_at }));
  }

  async setRole(role: "owner" | "editor" | "viewer", userID: string, spaceID: string): Promise<void> {
    await this.#call("PATCH", `/v1/spaces/${encodeURIComponent(spaceID)}/members/${encodeURIComponent(userID)}`, 200, { role });
  }

  /** Removes a member (this user's own id: leave the space). */
  async removeMember(userID: string, spaceID: string): Promise<void> {
    await this.#call("DELETE", `/v1/spaces/${encodeURIComponent(spaceID)}/members/${encodeURIComponent(userID)}`, 204);
  }

  async deleteSpace(spaceID: string): Promise<void> {
    await this.#call("DELETE", `/v1/spaces/${encodeURIComponent(spaceID)}`, 204);
  }

  /**
   * The client of another space (null: the personal one) with the same server, sign-in and
   * device id — one browser is one device in every space — and its own database.
   */
  async clientFor(spaceID: string | null, databaseName: string): Promise<SyncClient> {
    const options: ClientOptions = { ...this.options, databaseName };
    if (spaceID) options.spaceID = spaceID;
    else delete options.spaceID;
    const client = await SyncClient.create(options);
    const device = await this.#registeredDevice();
    if (!(await client.#store.meta<string>("device_id"))) await client.#store.setMeta("device_id", device);
    return client;
  }

  /** Tells this tab's listeners and every other tab's. */
  /** Calls `listener` with each `name` event's detail; returns a function that stops it. */
  on<K extends SyncEventName>(name: K, listener: (detail: SyncEventMap[K]) => void): () => void {
    const handler = (event: CustomEvent<SyncEventMap[K]>) => listener(event.detail);
    this.events.addEventListener(name, handler);
    return () => this.events.removeEventListener(name, handler);
  }

  #emit<K extends SyncEventName>(name: K, detail: SyncEventMap[K]): void {
    this.events.dispatchEvent(new CustomEvent(name, { detail }));
    this.#channel.postMessage({ type: "event", name, detail });
  }

  static async create(options: ClientOptions): Promise<SyncClient> {
    // Asks the browser not to evict this site's data under storage pressure (it may say no).
    void globalThis.navigator?.storage?.persist?.().catch(() => false);
    const indexes = (options.indexes ?? []).map((index) => (typeof index === "string" ? [index] : index));
    return new SyncClient(options, await LocalStore.open(options.databaseName, indexes));
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
   * Durable in the outbox and shown when this resolves; resolves with the op id. A write the
   * server would refuse rejects at once with `InvalidOpError`, nothing stored. When the
   * browser refuses the space (quota), the write rejects, and `status().lastError` and a
   * `storageFull` event say so: never a silent loss.
   */
  async #write(fields: Omit<Op, "op_id">): Promise<string> {
    const op: Op = { op_id: crypto.randomUUID(), ...fields };
    if (op.if_version === undefined) delete op.if_version;
    checkOp(op);
    if (await this.#store.meta<boolean>("gone")) throw new SpaceGoneError();  // a space that is gone takes no more writes
    let stored: { op: Op; row: ShownRecord | null };
    try {
      stored = await this.#store.enqueue(op, await this.#node(), Date.now());
    } catch (error) {
      if ((error as DOMException)?.name === "QuotaExceededError") {
        this.#lastError = "the browser's storage for this site is full: the edit was not saved";
        this.#emit("storageFull", { opID: op.op_id });
      }
      throw error;
    }
    this.#changed([{ collection: stored.op.collection, id: stored.op.id, row: stored.row }]);
    this.#writesWaiting = true;
    this.#wakeUp();
    return stored.op.op_id;
  }

  /** The HLC node of this device's ops: chosen locally on first use, so writes work before the server was ever reached. */
  async #node(): Promise<string> {
    let node = await this.#store.meta<string>("node");
    if (!node) {
      node = this.#identity.node ?? crypto.randomUUID();
      await this.#store.setMeta("node", node);
    }
    this.#identity.node = node;
    return node;
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
    const query: Observer["query"] = typeof target === "string"
      ? { collection: target, ...(typeof idOrCallback === "string" ? { where: { id: { eq: idOrCallback } } } : {}) }
      : target as Observer["query"];
    const callback = typeof idOrCallback === "string" ? maybeCallback! : idOrCallback;
    const observer: Observer = { query, callback, last: null, ids: new Set(), records: null, changes: null, reading: false, again: false };
    this.#observers.add(observer);
    void this.#deliver(observer);
    return () => this.#observers.delete(observer);
  }

  /**
   * Brings the observer's result up to date after the write that asked for it (never on
   * its path), once per burst of changes: a change during an update makes one more after
   * it. When every change carries what shows now, the result is updated from those rows
   * alone (`updated`); otherwise it is read again.
   */
  async #deliver(observer: Observer): Promise<void> {
    if (observer.reading) {
      observer.again = true;
      return;
    }
    observer.reading = true;
    try {
      do {
        observer.again = false;
        await new Promise((resolve) => setTimeout(resolve, 0));
        const changes = observer.changes;
        observer.changes = new Map();
        const records = (changes && observer.records && SyncClient.updated(observer.query, observer.records, changes))
          ?? (await this.#store.query(observer.query.collection, observer.query)).map((row) => shown(row));
        if (!this.#observers.has(observer)) return;
        observer.records = records;
        observer.ids = new Set(records.map((record) => record.id));
        const text = canonicalJSON(records as unknown as JSONObject[]);
        if (text === observer.last) continue;
        observer.last = text;
        observer.callback(records);
      } while (observer.again);
    } finally {
      observer.reading = false;
    }
  }

  /**
   * The query's result after `changes`, from its previous result and the changed rows, or
   * null when those cannot tell it: with an offset, or when a limited result lost rows and
   * rows beyond its end (never read) might move up.
   */
  private static updated(query: Observer["query"], previous: LocalRecord[], changes: Map<string, Changed>): LocalRecord[] | null {
    if (query.offset) return null;
    const order = recordOrder(query);
    const rows = new Map(previous.map((record) => [record.id, record]));
    for (const change of changes.values()) {
      if (change.collection !== query.collection) continue;
      rows.delete(change.id);
      if (change.row && matches(change.row.id, change.row.data, query.where)) rows.set(change.id, shown(change.row));
    }
    const sorted = [...rows.values()].sort(order);
    if (query.limit === undefined) return sorted;
    const last = previous[previous.length - 1];
    if (previous.length >= query.limit && sorted.filter((record) => order(record, last) <= 0).length < query.limit) return null;
    return sorted.slice(0, query.limit);
  }

  /** Records changed: this tab's observers of them read again, and so do other tabs' (whose leader also wakes). */
  #changed(changes: Changed[]): void {
    this.#deliverChanged(changes);
    // Small sets travel with what shows now; a large pull's keys alone.
    const rows = changes.length <= 200;
    this.#channel.postMessage({ type: "changed", keys: changes.map((change) => ({ collection: change.collection, id: change.id, ...(rows && change.row !== undefined ? { row: change.row } : {}) })) });
  }

  /**
   * Wakes the observers a change can concern: its record is in their result, or shows now
   * and passes their filter (or what shows now is not known here).
   */
  #deliverChanged(changes: Changed[]): void {
    for (const observer of this.#observers) {
      // While an update is under way its result is not known yet: every change of the collection counts.
      const relevant = changes.filter((change) => change.collection === observer.query.collection && (
        observer.reading || observer.records === null || observer.ids.has(change.id) || change.row === undefined
        || (change.row !== null && matches(change.row.id, change.row.data, observer.query.where))));
      if (relevant.length === 0) continue;
      for (const change of relevant) {
        if (change.row === undefined) observer.changes = null;
        observer.changes?.set(change.id, change);
      }
      void this.#deliver(observer);
    }
  }

  /** Every observer reads its result again: what shows changed for records not named. */
  #rereadAll(): void {
    for (const observer of this.#observers) {
      observer.changes = null;
      void this.#deliver(observer);
    }
  }

  /** The sync state of records changed, wherever they are: every observer reads again. */
  #changedAll(): void {
    this.#rereadAll();
    this.#channel.postMessage({ type: "changedAll" });
  }

  async status(): Promise<SyncStatus> {
    const [counts, uploads] = await Promise.all([this.#store.status(), this.#store.pendingUploadTotals()]);
    return {
      pendingOps: counts.pending, oldestPendingAge: counts.oldest === null ? null : (Date.now() - counts.oldest) / 1000,
      lastSyncAt: this.#lastSyncAt, lastError: this.#lastError, lastPushTraceID: this.#lastPushTraceID, setAsideOps: counts.setAside, live: this.#live, leader: this.#leader,
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
    const space = this.options.spaceID ? `?space_id=${encodeURIComponent(this.options.spaceID)}` : "";
    let response = await this.#fetchWithToken("GET", `/v1/blobs/${file.sha256}${space}`);
    // Too many downloads of this user's at once (a page of pictures): wait as told, ask again.
    for (let waited = 0; response.status === 429 && waited < 60; ) {
      const pause = Math.min(Number(response.headers.get("Retry-After")) || 1, 60 - waited);
      await new Promise((resolve) => setTimeout(resolve, pause * 1000));
      waited += pause;
      response = await this.#fetchWithToken("GET", `/v1/blobs/${file.sha256}${space}`);
    }
    if (response.status !== 200) throw new Error(`download answered ${response.status}: ${(await response.text()).slice(0, 300)}`);
    const bytes = await response.arrayBuffer();
    if ((await sha256Hex(bytes)) !== file.sha256) throw new Error("the file downloaded does not match its hash");
    const blob = new Blob([bytes], { type: file.content_type });
    await this.#store.addDownloadedBlob(file, blob, Date.now());
    await this.#store.evictBlobs(this.options.blobCacheBytes ?? 256 * 1024 * 1024);
    return blob;
  }

  /**
   * Uploads every file waiting, oldest first: `PUT` up to 4 MiB, tus in 4 MiB pieces above
   * (resumed from the kept upload URL). A file the server refuses sets aside the ops that
   * reference it; one failing for now holds back only the ops from its first referencing op
   * on. Returns the first such failure.
   */
  async #uploadPending(): Promise<string | null> {
    for (const aside of await this.#store.blobsRefused(null, "")) this.#emit("setAside", aside);
    let failure: string | null = null;
    for (const file of await this.#store.pendingBlobs()) {
      try {
        const answer = file.size > resumableUploadThreshold ? await this.#uploadResumably(file) : await this.#uploadWhole(file);
        if (answer.status === 200 || answer.status === 201 || answer.status === 204) {
          await this.#store.blobUploaded(file.sha256);
          this.#emit("uploaded", { sha256: file.sha256 });
        } else if (answer.status === 413 || answer.status === 422) {
          const aside = await this.#store.blobsRefused(file.sha256, answer.detail);
          this.#emit("uploadRefused", { sha256: file.sha256, reason: answer.detail });
          for (const op of aside) this.#emit("setAside", op);
          this.#changedAll();
        } else {
          failure ??= `upload answered ${answer.status}: ${answer.detail}`;
        }
      } catch (error) {
        failure ??= error instanceof Error ? error.message : String(error);
      }
    }
    return failure;
  }

  #spaceQuery(): string {
    return this.options.spaceID ? `?space_id=${encodeURIComponent(this.options.spaceID)}` : "";
  }

  async #uploadWhole(file: LocalBlob): Promise<Answer> {
    this.#emit("uploadProgress", { sha256: file.sha256, sent: 0, total: file.size });
    const answer = await this.#send("PUT", `/v1/blobs/${file.sha256}${this.#spaceQuery()}`, file.blob, { "Content-Type": file.content_type });
    if (answer.status === 200 || answer.status === 201) this.#emit("uploadProgress", { sha256: file.sha256, sent: file.size, total: file.size });
    return answer;
  }

  async #uploadResumably(file: LocalBlob): Promise<Answer> {
    const tus = { "Tus-Resumable": "1.0.0" };
    let location = file.upload_url;
    let offset = 0;
    if (location) {
      const head = await this.#send("HEAD", location, undefined, tus);
      const at = Number(head.headers.get("Upload-Offset"));
      if (head.status === 200 && Number.isInteger(at)) offset = at;
      else location = null;
    }
    if (!location) {
      const b64 = (text: string) => btoa(text);
      let metadata = `sha256 ${b64(file.sha256)},content_type ${b64(file.content_type)}`;
      if (this.options.spaceID) metadata += `,space_id ${b64(this.options.spaceID)}`;
      const created = await this.#send("POST", "/v1/uploads", undefined, { ...tus, "Upload-Length": String(file.size), "Upload-Metadata": metadata });
      const url = created.headers.get("Location");
      if (created.status !== 201 || !url) return created;
      location = url;
      await this.#store.setUploadURL(file.sha256, url);
    }
    let last: Answer = { status: 204, json: null, detail: "", headers: new Headers() };
    while (offset < file.size) {
      this.#emit("uploadProgress", { sha256: file.sha256, sent: offset, total: file.size });
      last = await this.#send("PATCH", location, file.blob.slice(offset, offset + uploadPieceBytes), {
        ...tus, "Upload-Offset": String(offset), "Content-Type": "application/offset+octet-stream",
      });
      const at = Number(last.headers.get("Upload-Offset"));
      if (last.status !== 204 || !Number.isInteger(at)) {
        if (last.status === 404 || last.status === 409) await this.#store.setUploadURL(file.sha256, null);
        return last;
      }
      offset = at;
    }
    this.#emit("uploadProgress", { sha256: file.sha256, sent: file.size, total: file.size });
    return last;
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
    if (this.#running) return;
    this.#running = true;
    const abandon = new AbortController();
    this.#abandonLock = abandon;
    this.#loop = navigator.locks
      .request(this.#lockName, { signal: abandon.signal }, () => this.#lead())
      .catch(() => { /* stopped before this tab led */ });
  }

  async #lead(): Promise<void> {
    this.#leader = true;
    try {
      await this.#runLoop();
    } finally {
      this.#leader = false;
      this.#closeStream();
    }
  }

  // MARK: - Live stream

  /**
   * Opens the fanout's Server-Sent Events stream (the leader only): a `hello` or `poke` of
   * this client's space whose cursor is past the device's asks for a pull, a `job` message
   * for a job poll. A failed stream is closed and opened again with backoff and a fresh
   * token; while it is down, the loop pulls every `pollInterval`.
   */
  async #openStream(device: string): Promise<void> {
    if (!this.options.fanoutURL || this.#stream || this.#streamRetry || !this.#leader || !this.#running) return;
    let token: string;
    try {
      token = await this.options.tokenProvider(false);
    } catch (error) {
      // An app opened offline, or a provider that fails: reported like any failure, and
      // tried again with backoff, as a dropped stream is.
      this.#lastError = `cannot open the live stream: ${error instanceof Error ? error.message : String(error)}`;
      this.#retryStream(device);
      return;
    }
    if (this.#stream || this.#streamRetry || !this.#leader || !this.#running) return;  // opened, or stopped, meanwhile
    const space = this.options.spaceID ? `&space_id=${encodeURIComponent(this.options.spaceID)}` : "";
    const source = new EventSource(`${this.options.fanoutURL}/v1/stream?device_id=${encodeURIComponent(device)}&access_token=${encodeURIComponent(token)}${space}`);
    this.#stream = source;
    source.onmessage = (event: MessageEvent) => {
      if (!this.#live) {
        this.#live = true;
        this.#streamBackoff.reset();
      }
      try { void this.#streamMessage(JSON.parse(event.data)); } catch { /* not JSON: ignored */ }
    };
    source.onerror = () => {
      this.#closeStream();
      this.#pullWanted = true;  // pokes may have been missed while it was down
      this.#wakeUp();
      this.#retryStream(device);
    };
  }

  /** Opens the stream again after the backoff's next wait, while this client still syncs. */
  #retryStream(device: string): void {
    if (!this.#running || !this.#leader || this.#streamRetry) return;
    this.#streamRetry = setTimeout(() => {
      this.#streamRetry = null;
      void this.#openStream(device);
    }, this.#streamBackoff.next() * 1000);
  }

  #closeStream(): void {
    this.#stream?.close();
    this.#stream = null;
    this.#live = false;
    if (this.#streamRetry) clearTimeout(this.#streamRetry);
    this.#streamRetry = null;
  }

  async #streamMessage(message: { type?: string; cursor?: string; space_id?: string }): Promise<void> {
    if (message.type === "hello") {
      this.#streamSpace = message.space_id ?? null;
      this.#askJobs = true;  // outcomes told while no stream listened are asked for once
    }
    if (message.type === "hello" || message.type === "poke") {
      if (message.space_id && this.#streamSpace && message.space_id !== this.#streamSpace) return;  // another space's
      const cursor = await this.#store.meta<string>("cursor");
      if (message.cursor !== undefined) this.#reachedCursor = Math.max(this.#reachedCursor, Number(message.cursor) || 0);
      if (message.cursor !== undefined && (cursor === undefined || Number(message.cursor) > Number(cursor))) {
        this.#pullWanted = true;
        this.#wakeUp();
      }
    } else if (message.type === "job") {
      const job = message as { job_id?: unknown; status?: unknown; checkpoint?: unknown; troubled?: unknown };
      if (typeof job.job_id === "string" && typeof job.status === "string") {
        if (this.#heardJobs.size >= 10_000) this.#heardJobs.clear();  // outcomes of jobs this device no longer follows
        this.#heardJobs.set(job.job_id, {
          status: job.status, checkpoint: typeof job.checkpoint === "string" ? job.checkpoint : null, troubled: job.troubled !== false,
        });
      }
      this.#wakeUp();
    }
  }

  async stop(): Promise<void> {
    this.#running = false;
    this.#abandonLock?.abort();
    this.#abandonLock = null;
    this.#wakeUp(true);
    await this.#loop;
    this.#loop = null;
  }

  /** Closes the database and the channel (after `stop()`). */
  close(): void {
    this.#channel.close();
    this.#store.close();
  }

  /**
   * Pushes everything, waits for the jobs (up to `timeout` seconds) and pulls to the end,
   * now — in this tab when it leads or no tab does, else by asking the leader.
   */
  async sync(timeout = 30): Promise<void> {
    if (this.#leader) return this.#syncHere(timeout);
    const ran = await navigator.locks.request(this.#lockName, { ifAvailable: true }, async (lock) => {
      if (!lock) return false;
      await this.#syncHere(timeout);
      return true;
    });
    if (ran) return;
    const id = crypto.randomUUID();
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#syncRequests.delete(id);
        reject(new Error(`the syncing tab did not answer within ${timeout} s`));
      }, timeout * 1000 + 1000);
      this.#syncRequests.set(id, { resolve: () => { clearTimeout(timer); resolve(); }, reject: (error) => { clearTimeout(timer); reject(error); } });
      this.#channel.postMessage({ type: "sync", id, timeout });
    });
  }

  /**
   * Passes until nothing is left to send, follow or pull. A server that asks to wait
   * (`Retry-After`: 429, 503) is waited out within the timeout, never cut short; any other
   * failure ends the sync with its reason.
   */
  async #syncHere(timeout: number): Promise<void> {
    const deadline = Date.now() + timeout * 1000;
    let askJobsAt = Date.now() + liveJobWait * 1000;
    this.#pullWanted = true;
    for (;;) {
      if (Date.now() > askJobsAt) {  // an outcome the stream lost
        this.#askJobs = true;
        askJobsAt = Date.now() + liveJobWait * 1000;
      }
      const asked = this.#notBefore - Date.now();
      if (asked > 0) {
        if (Date.now() + asked > deadline) throw new Error(`the server asked to wait ${Math.ceil(asked / 1000)} s, beyond the sync's ${timeout} s: ${this.#lastError}`);
        await new Promise((resolve) => setTimeout(resolve, asked));
      }
      let jobsInFlight: boolean;
      try {
        jobsInFlight = await this.#exclusivePass();
      } catch (error) {
        if (error instanceof Retry && error.after !== undefined) continue;
        throw error instanceof Retry ? new Error(error.message) : error;
      }
      if (!jobsInFlight && !this.#pullWanted) return;
      if (Date.now() > deadline) throw new Error(`jobs still running after ${timeout} s`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /**
   * Asks the loop for another pass: now when it waits, else as soon as its pass ends (never
   * lost). While the server's `Retry-After` runs, the pass waits for it to end (unless
   * `now`: stopping).
   */
  #wakeUp(now = false): void {
    if (this.#wake && (now || Date.now() >= this.#notBefore)) this.#wake();
    else this.#wakeRequested = true;
  }

  /** A pass about to push what writes just queued waits a moment for more, unless a batch is full already. */
  async #gatherWrites(): Promise<void> {
    if (!this.#writesWaiting) return;
    this.#writesWaiting = false;
    const delay = this.options.pushDelay ?? 0.05;
    if (delay <= 0 || (await this.#store.status()).pending >= maxOpsPerPush) return;
    await new Promise((resolve) => setTimeout(resolve, delay * 1000));
  }

  #wakeRequested = false;

  async #runLoop(): Promise<void> {
    const backoff = new Backoff();
    const jobPolls = new Backoff(0.05, 1);
    while (this.#running) {
      let wait: number | null = null;
      let failed = false;
      try {
        await this.#gatherWrites();
        const jobsInFlight = await this.#exclusivePass();
        backoff.reset();
        if (jobsInFlight && this.#live) wait = liveJobWait;  // the stream tells each outcome; asked for after this as a safety net
        else if (jobsInFlight) wait = jobPolls.next(undefined, 1);
        else {
          jobPolls.reset();
          const poll = this.options.pollInterval === undefined ? 30 : this.options.pollInterval;
          if (poll !== null && !this.#live) wait = poll;
        }
      } catch (error) {
        if (error instanceof SpaceGoneError) {
          this.#running = false;
          this.#closeStream();
          return;
        }
        failed = true;
        wait = backoff.next(error instanceof Retry ? error.after : undefined);
      }
      if (!this.#running) return;
      const woken = this.#wakeRequested;
      this.#wakeRequested = false;
      if (woken && !failed) continue;  // something happened during a good pass: another pass at once
      const timedOut = await new Promise<boolean>((resolve) => {
        const timer = wait === null ? null : setTimeout(() => resolve(true), wait * 1000);
        this.#wake = () => {
          if (timer !== null) clearTimeout(timer);
          resolve(false);
        };
      });
      this.#wake = null;
      if (timedOut && !this.#live) this.#pullWanted = true;
      if (timedOut) this.#askJobs = true;
    }
  }

  /** One pass at a time, whoever asks (the loop or `sync()`). */
  async #exclusivePass(): Promise<boolean> {
    while (this.#passing) await this.#passing.catch(() => false);
    this.#passing = this.#pass();
    try {
      const result = await this.#passing;
      this.#lastSyncAt = Date.now();
      this.#lastError = null;
      return result;
    } catch (error) {
      this.#lastError = error instanceof Error ? error.message : String(error);
      if (error instanceof Retry && error.after !== undefined) this.#notBefore = Math.max(this.#notBefore, Date.now() + error.after * 1000);
      throw error;
    } finally {
      this.#passing = null;
    }
  }

  async #pass(): Promise<boolean> {
    if (await this.#store.meta<boolean>("gone")) throw new SpaceGoneError();
    const device = await this.#registeredDevice();
    if (this.#leader) void this.#openStream(device);
    const uploadFailure = await this.#uploadPending();
    // While the server's Retry-After runs, nothing is pushed, whoever asks for the pass.
    const asked = this.#notBefore - Date.now();
    if (asked <= 0) await this.#pushAll(device);
    const jobsInFlight = await this.#followJobs();
    if (this.#pullWanted) await this.#pullAll();
    // The ops waiting for a file that could not be sent wait for the next pass.
    if (uploadFailure) throw new Retry(uploadFailure);
    if (asked > 0) throw new Retry(this.#lastError ?? "the server asked to wait", asked / 1000);
    return jobsInFlight;
  }

  // MARK: - HTTP

  /** A request with the bearer token (asked again once after a 401); a JSON body unless `Content-Type` says otherwise. */
  async #fetchWithToken(method: string, path: string, body?: string | Blob, headers: Record<string, string> = {}): Promise<Response> {
    let refresh = false;
    for (;;) {
      const token = await this.options.tokenProvider(refresh);
      let response: Response;
      try {
        response = await fetch(this.options.gatewayURL + path, {
          method, body, headers: { ...(typeof body === "string" ? { "Content-Type": "application/json" } : {}), ...headers, Authorization: `Bearer ${token}` },
        });
      } catch (error) {
        throw new Retry(`cannot reach the server: ${error instanceof Error ? error.message : String(error)}`);
      }
      if (response.status === 401 && !refresh) {
        refresh = true;
        continue;
      }
      return response;
    }
  }

  async #send(method: string, path: string, body?: string | Blob, headers: Record<string, string> = {}): Promise<Answer> {
    const response = await this.#fetchWithToken(method, path, body, headers);
    const text = await response.text();
    let json: any = null;
    try { json = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
    return {
      status: response.status, json, detail: json?.detail ?? text.slice(0, 500), retryAfter: retryAfterSeconds(response.headers.get("Retry-After")),
      headers: response.headers,
    };
  }

  async #registeredDevice(): Promise<string> {
    const known = await this.#store.meta<string>("device_id");
    if (known) {
      this.#identity.device = known;
      return known;
    }
    const answer = await this.#send("POST", "/v1/devices", JSON.stringify({ name: this.options.deviceName ?? "browser", platform: "web" }));
    if (answer.status !== 201 || typeof answer.json?.device_id !== "string") throw new Retry(`device registration answered ${answer.status}: ${answer.detail}`, answer.retryAfter);
    await this.#store.setMeta("device_id", answer.json.device_id);
    this.#identity.device = answer.json.device_id;
    return answer.json.device_id;
  }

  /** Sends batches until the outbox holds none, setting aside what the server refuses. */
  async #pushAll(device: string): Promise<void> {
    for (;;) {
      const batch = await this.#store.nextBatch(device, maxOpsPerPush, this.#maxBytes, this.options.spaceID);
      if (!batch) return;
      const trace = traceparent(batch.key);
      this.#lastPushTraceID = trace.traceID;
      const answer = await this.#send("POST", "/v1/sync/push", batch.body, { "Idempotency-Key": batch.key, traceparent: trace.header });
      if (answer.status === 202 && typeof answer.json?.job_id === "string") {
        await this.#store.batchAccepted(batch, answer.json.job_id);
      } else if (answer.status === 400 || answer.status === 422 || (answer.status === 403 && this.options.spaceID)) {
        await this.#refused(batch, answer.status === 403 ? null : problemOpIndex(answer.json), answer.detail);
      } else if (answer.status === 409 && answer.json?.code === "blob_missing") {
        // The server lacks a file an op references: sent again when this browser holds it, else the op is set aside.
        const sha = typeof answer.json?.sha256 === "string" ? answer.json.sha256 : null;
        if (sha && await this.#store.blobMissing(sha)) {
          await this.#store.batchDissolved(batch);
          const failure = await this.#uploadPending();
          if (failure) throw new Retry(failure);
        } else {
          await this.#refused(batch, problemOpIndex(answer.json), answer.detail);
        }
      } else if (answer.status === 404 && this.options.spaceID) {
        // The space may be gone: the pull tells (a 404 there drops it).
        await this.#pullAll();
        throw new Retry(`push answered 404: ${answer.detail}`);
      } else if (answer.status === 413 && batch.op_ids.length > 1) {
        this.#maxBytes = halved(this.#maxBytes);
        await this.#store.batchDissolved(batch);
      } else if (answer.status === 413) {
        await this.#refused(batch, 0, answer.detail);
      } else {
        throw new Retry(`push answered ${answer.status}: ${answer.detail}`, answer.retryAfter);
      }
    }
  }

  async #refused(batch: Parameters<LocalStore["batchRefused"]>[0], index: number | null, reason: string): Promise<void> {
    const aside = await this.#store.batchRefused(batch, index, reason);
    for (const opID of aside) this.#emit("setAside", { opID, reason });
    this.#changedAll();
  }

  /**
   * Settles every job whose outcome is known; returns whether any is still running. While
   * the stream is live it tells each job's outcome, and a job is asked for only when the
   * outcome was troubled (its results say which ops were refused) or may have been missed
   * (no stream was live since the job was sent). A shared space's jobs are asked for with
   * their space, so the server reads that space alone.
   */
  async #followJobs(): Promise<boolean> {
    let running = false;
    const scope = this.options.spaceID ? `?space_id=${encodeURIComponent(this.options.spaceID)}` : "";
    const ask = this.#askJobs || !this.#live;
    for (const jobID of await this.#store.sentJobs()) {
      const heard = this.#heardJobs.get(jobID);
      if (heard?.status === "succeeded" && !heard.troubled) {
        this.#heardJobs.delete(jobID);
        await this.#jobSucceeded(jobID, Number(heard.checkpoint ?? 0), []);
        continue;
      }
      if (!heard && !ask) {
        running = true;
        continue;
      }
      this.#heardJobs.delete(jobID);
      const answer = await this.#send("GET", `/v1/sync/jobs/${jobID}${scope}`);
      if (answer.status === 404) {
        await this.#store.jobForgotten(jobID);
        continue;
      }
      if (answer.status !== 200) throw new Retry(`job status answered ${answer.status}`, answer.retryAfter);
      const job = answer.json;
      if (job.status === "succeeded") {
        await this.#jobSucceeded(jobID, Number(job.checkpoint ?? 0), job.results ?? []);
      } else if (job.status === "dead" || job.status === "discarded") {
        const opIDs = await this.#store.jobDead(jobID, `job ${job.status}: ${job.last_error ?? "no error recorded"}`);
        this.#emit("jobDead", { jobID, opIDs });
        this.#changedAll();
      } else {
        running = true;
      }
    }
    if (ask && this.#live) this.#askJobs = false;
    return running;
  }

  /** A job of this device's succeeded: its refused ops are reported, the others wait for the pull that shows them. */
  async #jobSucceeded(jobID: string, checkpoint: number, results: Parameters<LocalStore["jobSucceeded"]>[2]): Promise<void> {
    this.#reachedCursor = Math.max(this.#reachedCursor, checkpoint);
    const gone = await this.#store.jobSucceeded(jobID, checkpoint, results);
    for (const result of gone) {
      const name = result.status === "conflict" ? "conflict" : "rejected";
      this.#emit(name, { opID: result.op_id, reason: result.reason, current: result.current as RecordView | undefined });
    }
    this.#pullWanted = true;
    this.#changedAll();
  }

  /** Pulls until `has_more` is false; a 410 starts a resync that keeps unpushed ops. */
  async #pullAll(): Promise<void> {
    this.#pullWanted = false;
    for (;;) {
      const cursor = await this.#store.meta<string>("cursor");
      const space = this.options.spaceID ? `&space_id=${encodeURIComponent(this.options.spaceID)}` : "";
      const reached = this.#reachedCursor > 0 ? `&min_cursor=${this.#reachedCursor}` : "";
      const answer = await this.#send("GET", `/v1/sync/pull?limit=1000${space}${cursor ? `&since=${cursor}` : ""}${reached}`);
      if (answer.status === 410) {
        await this.#store.beginResync();
        this.#emit("resync", undefined);
        continue;
      }
      if (answer.status === 404 && this.options.spaceID) await this.#spaceGone();
      if (answer.status !== 200) {
        this.#pullWanted = true;
        throw new Retry(`pull answered ${answer.status}: ${answer.detail}`, answer.retryAfter);
      }
      const page = answer.json as { changes: RecordView[]; cursor: string; has_more: boolean };
      this.#changed(await this.#store.applyPage(page.changes, page.cursor, page.has_more));
      if (!page.has_more) {
        this.#emit("pulled", { cursor: page.cursor });
        return;
      }
    }
  }
}

/** A client of one space, its data in the IndexedDB database `databaseName`. */
export function createClient(options: ClientOptions): Promise<SyncClient> {
  return SyncClient.create(options);
}
