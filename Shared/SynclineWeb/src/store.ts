import { referencedBlobs, type BlobRef } from "./blobs.js";
import { Database, indexName, indexProperty, keyedFields, withKeys } from "./database.js";
import { datesInUTC } from "./dates.js";
import { ClockState } from "./hlc.js";
import { request } from "./idb.js";
import type { JSONObject } from "./json.js";
import { localMerge } from "./merge.js";
import type { Op, RecordView } from "./op.js";
import { oldestUnconfirmed, outboxCounts, OutboxWriter, unconfirmed, type OutboxEntry } from "./outbox.js";
import { matches, ordered, sortKey, type PlainQuery, type SortKey } from "./query.js";

export type { OpState, OutboxEntry } from "./outbox.js";

/**
 * A file this device holds: its own, waiting to be uploaded (`pending`) or uploaded
 * (`stored`), refused by the server (`refused`), or downloaded (`stored`), with when it was
 * last used (the cache drops the least recently used first).
 */
export interface LocalBlob extends BlobRef {
  state: "pending" | "stored" | "refused";
  blob: Blob;
  upload_url: string | null;
  reason: string | null;
  last_used: number;
}

/** A record as the app sees it. */
export interface ShownRecord {
  collection: string;
  id: string;
  data: JSONObject;
  version: number;
  pending: boolean;
  set_aside_reason: string | null;
  visibility: "private" | "unlisted" | "public";
  public_id: string | null;
  can_fork: boolean;
  forked_from: string | null;
  /** The sort keys of the declared indexed fields (see `indexProperty`). */
  ix?: Record<string, SortKey>;
}

/**
 * A row of the `records` store: what shows (the fields of `ShownRecord` and `shownIn`, set
 * only when something shows, so that only shown rows are in the `collection` and declared
 * indexes), and the server's record as pulled with the generation of the pull (absent when
 * the server never had it). One row per record: a pull writes each record once.
 */
export interface RecordRow extends Partial<ShownRecord> {
  collection: string;
  id: string;
  shownIn?: string;
  server?: RecordView;
  generation?: number;
}

/** The server's record as pulled, and the generation of the pull that brought it. */
export interface ServerCopy {
  view: RecordView;
  generation: number;
}

/** The space is gone (deleted, or this user was removed): its local data went with it. */
export class SpaceGoneError extends Error {
  constructor() {
    super("the space is gone: deleted, or you are no longer a member");
    this.name = "SpaceGoneError";
  }
}

export interface Batch {
  batch_id: string;
  key: string;
  body: string;
  op_ids: string[];
  job_id: string | null;
}

export interface Key {
  collection: string;
  id: string;
}

/** A record that changed, and what shows for it now (null: nothing; undefined: not known here). */
export interface Changed extends Key {
  row?: ShownRecord | null;
}

export const all = ["meta", "records", "outbox", "batches", "blobs"];

/**
 * The device's IndexedDB database: the records (each row holds the server's record as
 * pulled and, when something shows, the record as the app sees it), the outbox, push batches (each stored with its key and exact body before it
 * is sent), the cursor, the device identity and the clock. Every step is one transaction,
 * so a tab closed or a browser killed at any instant loses and doubles nothing (the
 * outbox's states: `outbox.ts`).
 */
export class LocalStore {
  readonly #database: Database;
  /** Every field some declared index covers: each shown record carries their sort keys. */
  readonly #keyed: string[];

  private constructor(database: Database) {
    this.#database = database;
    this.#keyed = keyedFields(database.indexed);
  }

  /**
   * Opens (or creates) the database with an index for each of `indexed` (record fields): an
   * index no longer declared is dropped, a new one is filled from the records already
   * there. Changing the indexes is a version upgrade; other tabs close their connection
   * when one starts (and open it again on their next step), so it never waits on them.
   */
  static async open(name: string, indexed: string[][] = []): Promise<LocalStore> {
    return new LocalStore(await Database.open(name, indexed));
  }

  /** Called when the database had to be created anew while in use: deleted or evicted from outside. */
  set onReset(handler: () => void) {
    this.#database.onReset = handler;
  }

  get indexed(): string[][] {
    return this.#database.indexed;
  }

  /** One transaction (of this store or its sync steps); a connection the browser closed under it is opened again, once. */
  async run<T>(stores: string[], mode: IDBTransactionMode, body: (tx: IDBTransaction) => Promise<T>): Promise<T> {
    // A write to the outbox updates its counts, in `meta`, in the same transaction.
    const scope = mode === "readwrite" && stores.includes("outbox") && !stores.includes("meta") ? [...stores, "meta"] : stores;
    return this.#database.run(scope, mode, async (tx) => {
      const value = await body(tx);
      await OutboxWriter.settle(tx);
      return value;
    });
  }

  close(): void {
    this.#database.close();
  }

  /** Deletes the device's database; every later step fails with `SignedOutError`. */
  wipe(): Promise<void> {
    return this.#database.wipe();
  }

  // MARK: - Meta

  async meta<T>(key: string): Promise<T | undefined> {
    return this.run(["meta"], "readonly", (tx) => request(tx.objectStore("meta").get(key)));
  }

  async setMeta(key: string, value: unknown): Promise<void> {
    await this.run(["meta"], "readwrite", (tx) => request(tx.objectStore("meta").put(value, key)));
  }

  static async clock(tx: IDBTransaction): Promise<ClockState> {
    const saved = (await request(tx.objectStore("meta").get("clock"))) as { ms: number; counter: number } | undefined;
    return new ClockState(saved?.ms ?? 0, saved?.counter ?? 0);
  }

  /** Stores the clock (in `tx`: its commit is the write's success). */
  static saveClock(tx: IDBTransaction, clock: ClockState): void {
    tx.objectStore("meta").put({ ms: clock.milliseconds, counter: clock.counter }, "clock");
  }

  // MARK: - Local writes

  /**
   * Stamps the op with the device's clock, stores it in the outbox and shows it: one
   * transaction, the whole of a local write. A space that is gone takes no more writes
   * (`SpaceGoneError`, nothing stored). The clock's node is the database's, chosen on the
   * first write (`node`: the one this device had, when its database was deleted under it).
   */
  async enqueue(op: Op, node: string | undefined, now: number): Promise<{ op: Op; row: ShownRecord | null; node: string }> {
    return this.run(all, "readwrite", async (tx) => {
      const meta = tx.objectStore("meta");
      const [gone, kept, clock, known] = await Promise.all([
        request(meta.get("gone")), request(meta.get("node")) as Promise<string | undefined>, LocalStore.clock(tx), LocalStore.recordState(tx, op),
      ]);
      if (gone) throw new SpaceGoneError();
      const ownNode = kept ?? node ?? crypto.randomUUID();
      if (!kept) meta.put(ownNode, "node");
      const stamped: Op = { ...op, hlc: clock.next(now, ownNode) };
      LocalStore.saveClock(tx, clock);
      const entry: OutboxEntry = {
        op_id: stamped.op_id, collection: stamped.collection, id: stamped.id, op: stamped,
        state: "pending", batch_id: null, job_id: null, checkpoint: null, reason: null, created_at: now,
      };
      const blobs = referencedBlobs(stamped.data);
      if (blobs.length > 0) entry.blobs = blobs;
      OutboxWriter.of(tx).add(entry);
      return { op: stamped, row: this.show(tx, op, known.server, [...known.entries, entry]), node: ownNode };
    });
  }

  /**
   * Writes in a transaction are issued without awaiting each: IndexedDB runs a
   * transaction's requests in order, a failed one aborts the whole transaction, and the
   * transaction's commit is what `run` resolves on. Only reads are awaited.
   */

  /** Recomputes what the device shows for a record, stores it and returns it (null: nothing shows). */
  async refresh(tx: IDBTransaction, key: Key): Promise<ShownRecord | null> {
    const known = await LocalStore.recordState(tx, key);
    return this.show(tx, key, known.server, known.entries);
  }

  /** The server's record and the record's outbox entries. */
  private static async recordState(tx: IDBTransaction, key: Key): Promise<{ server: ServerCopy | null; entries: OutboxEntry[] }> {
    const [row, entries] = await Promise.all([
      request(tx.objectStore("records").get([key.collection, key.id])) as Promise<RecordRow | undefined>,
      request(tx.objectStore("outbox").index("record").getAll([key.collection, key.id])) as Promise<OutboxEntry[]>,
    ]);
    return { server: row?.server ? { view: row.server, generation: row.generation ?? 0 } : null, entries };
  }

  /**
   * What shows for a record, given the server's record and its outbox entries; its row is
   * written in `tx` (null: nothing shows; the row then keeps the server's record alone).
   */
  show(tx: IDBTransaction, key: Key, copy: ServerCopy | null, unsorted: OutboxEntry[]): ShownRecord | null {
    const entries = [...unsorted].sort((a, b) => (a.seq ?? Infinity) - (b.seq ?? Infinity));
    const records = tx.objectStore("records");
    const server = copy?.view ?? null;
    // An increment, add or remove counts twice if applied again on a server's record that
    // holds it: it does from the version it took, or else the job's checkpoint.
    const held = (entry: OutboxEntry) => entry.op.field !== undefined && entry.state === "confirmed"
      && (server?.version ?? 0) >= (entry.applied_version ?? entry.checkpoint ?? 0);
    const state = localMerge(entries.filter((entry) => !held(entry)).map((entry) => entry.op), server);
    const kept = copy ? { server: copy.view, generation: copy.generation } : {};
    if (!state || !state.hasData) {
      const hidden: RecordRow = { collection: key.collection, id: key.id, ...kept };
      if (copy) records.put(hidden);
      else records.delete([key.collection, key.id]);
      return null;
    }
    const pending = entries.some((entry) => unconfirmed.includes(entry.state));
    const aside = entries.find((entry) => entry.state === "set_aside");
    const visibility = state.publicVisibility;
    const shown = withKeys({
      collection: key.collection, id: key.id, data: datesInUTC(state.visibleData ?? {}), version: server?.version ?? 0, pending,
      set_aside_reason: pending || !aside ? null : aside.reason ?? "refused", visibility, public_id: state.shownPublicID,
      can_fork: visibility !== "private" && state.visibility?.canFork === true, forked_from: state.fork?.publicID ?? null,
    }, this.#keyed);
    const row: RecordRow = { ...shown, shownIn: key.collection, ...kept };
    records.put(row);
    return shown;
  }

  /** Refreshes the records of `entries`, each once, their reads issued together; returns what shows for each now. */
  async refreshOps(tx: IDBTransaction, entries: OutboxEntry[]): Promise<Changed[]> {
    const records = new Map(entries.map((entry) => [JSON.stringify([entry.collection, entry.id]), { collection: entry.collection, id: entry.id }]));
    return Promise.all([...records.values()].map(async (key) => ({ ...key, row: await this.refresh(tx, key) })));
  }

  // MARK: - Reads

  async record(collection: string, id: string): Promise<ShownRecord | undefined> {
    return this.run(["records"], "readonly", async (tx) => LocalStore.shownOnly(await request(tx.objectStore("records").get([collection, id]))));
  }

  /** The collection's records, by id. */
  async records(collection: string): Promise<ShownRecord[]> {
    return this.run(["records"], "readonly", async (tx) => {
      const rows = await LocalStore.collectionRows(tx.objectStore("records"), collection);
      return rows.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    });
  }

  /**
   * The records of `collection` the query selects, in its order. A condition on a declared
   * index (`eq`, `in`, or a range, on its field) narrows the rows read to that index's
   * range; the rest is filtered and ordered in memory by the same rules.
   */
  async query(collection: string, options: PlainQuery): Promise<ShownRecord[]> {
    const rows = await this.run(["records"], "readonly", async (tx) => {
      const records = tx.objectStore("records");
      const id = options.where?.id?.eq;
      if (typeof id === "string") {
        const row = LocalStore.shownOnly(await request(records.get([collection, id])));
        return row ? [row] : [];
      }
      // An index whose first field is equal to one value and whose second is the query's
      // first order: walk it in order and stop once the limit (and its ties) is reached.
      const first = options.orderBy?.[0];
      if (first !== undefined && options.limit !== undefined) {
        const descending = first.startsWith("-"), by = first.replace(/^-/, "");
        for (const fields of this.indexed) {
          const condition = options.where?.[fields[0]];
          if (fields.length < 2 || fields[1] !== by || condition?.eq === undefined) continue;
          const range = IDBKeyRange.bound([collection, sortKey(condition.eq)], [collection, sortKey(condition.eq), [3]]);
          return this.#walk(records.index(indexName(fields)), range, descending ? "prev" : "next", by, options);
        }
      }
      // Else an index whose first field has an `eq`, `in` or range condition: read its range.
      for (const [field, condition] of Object.entries(options.where ?? {})) {
        const fields = this.indexed.find((candidate) => candidate[0] === field);
        if (!fields) continue;
        const index = records.index(indexName(fields));
        if (condition.eq !== undefined || condition.in !== undefined) {
          const values = condition.eq !== undefined ? [condition.eq] : condition.in!;
          // Values with one sort key (1 and true, or a value listed twice) are read once.
          const found = new Map<string, ShownRecord>();
          for (const key of new Set(values.map((value) => JSON.stringify(sortKey(value))))) {
            const range = IDBKeyRange.bound([collection, JSON.parse(key)], [collection, JSON.parse(key), [3]]);
            for (const row of (await request(index.getAll(range))) as ShownRecord[]) found.set(row.id, row);
          }
          return [...found.values()];
        }
        const low = condition.gt ?? condition.gte, high = condition.lt ?? condition.lte;
        if ((low !== undefined && low !== null) || (high !== undefined && high !== null)) {
          // Keys of a longer index extend [collection, value]: `[3]` sorts after every sort key.
          const lower = low === undefined || low === null ? [collection, [1, -Infinity]]
            : condition.gt !== undefined ? [collection, sortKey(low), [3]] : [collection, sortKey(low)];
          const upper = high === undefined || high === null ? [collection, [3]]
            : condition.lt !== undefined ? [collection, sortKey(high)] : [collection, sortKey(high), [3]];
          return (await request(index.getAll(IDBKeyRange.bound(lower, upper, false, true)))) as ShownRecord[];
        }
      }
      return LocalStore.collectionRows(records, collection);
    });
    return ordered(rows.filter((row) => matches(row.id, row.data, options.where)), options);
  }

  /**
   * The rows of `range` in index order that pass the filter, up to the query's offset and
   * limit plus every row tied with the last one on `by` (the caller's sort puts ties in id
   * order).
   */
  #walk(index: IDBIndex, range: IDBKeyRange, direction: IDBCursorDirection, by: string, options: PlainQuery): Promise<ShownRecord[]> {
    const wanted = (options.offset ?? 0) + (options.limit ?? Infinity);
    const found: ShownRecord[] = [];
    let boundary: string | null = null;
    return new Promise((resolve, reject) => {
      const cursor = index.openCursor(range, direction);
      cursor.onerror = () => reject(cursor.error);
      cursor.onsuccess = () => {
        const current = cursor.result;
        if (!current) return resolve(found);
        const row = current.value as ShownRecord;
        const key = JSON.stringify(row.ix?.[indexProperty(by)]);
        if (boundary !== null && key !== boundary) return resolve(found);
        if (matches(row.id, row.data, options.where)) {
          found.push(row);
          if (found.length >= wanted && boundary === null) boundary = key;
        }
        current.continue();
      };
    });
  }

  /** The rows of `collection` where something shows, by id. */
  private static async collectionRows(records: IDBObjectStore, collection: string): Promise<ShownRecord[]> {
    // Keys are [collection, id] with a string id; an array sorts after every string.
    const rows = (await request(records.getAll(IDBKeyRange.bound([collection], [collection, []])))) as RecordRow[];
    return rows.filter((row): row is ShownRecord & RecordRow => row.shownIn !== undefined);
  }

  /** A row read by its key, if something shows for it (else it keeps only the server's record). */
  private static shownOnly(row: RecordRow | undefined): ShownRecord | undefined {
    return row?.shownIn === undefined ? undefined : (row as ShownRecord);
  }

  /** What waits, from the kept counts and the first entry of each state: never a read of the whole outbox. */
  async status(): Promise<{ pending: number; oldest: number | null; setAside: number }> {
    return this.run(["outbox", "meta"], "readonly", async (tx) => {
      const [counts, oldest] = await Promise.all([outboxCounts(tx), oldestUnconfirmed(tx)]);
      return { pending: unconfirmed.reduce((sum, state) => sum + counts[state], 0), oldest, setAside: counts.set_aside };
    });
  }

  async setAside(): Promise<OutboxEntry[]> {
    return this.run(["outbox"], "readonly", async (tx) =>
      ((await request(tx.objectStore("outbox").index("state").getAll("set_aside"))) as OutboxEntry[]).sort((a, b) => (a.seq ?? 0) - (b.seq ?? 0)));
  }

  /** Puts a set-aside op back in the queue (`retry`), or drops it; returns its record, or null when no such op is set aside. */
  async resolveSetAside(opID: string, retry: boolean): Promise<Key | null> {
    return this.run(all, "readwrite", async (tx) => {
      const entry = (await request(tx.objectStore("outbox").index("op_id").get(opID))) as OutboxEntry | undefined;
      if (!entry || entry.state !== "set_aside") return null;
      const outbox = OutboxWriter.of(tx);
      if (retry) outbox.put(entry, { ...entry, state: "pending", reason: null, batch_id: null, job_id: null });
      else outbox.delete(entry);
      await this.refresh(tx, entry);
      return { collection: entry.collection, id: entry.id };
    });
  }

  // MARK: - Files

  /** Keeps a file of this device's own: it waits to be uploaded, unless it is known to be on the server. */
  async addOwnBlob(ref: BlobRef, blob: Blob, now: number): Promise<void> {
    await this.run(["blobs"], "readwrite", async (tx) => {
      const files = tx.objectStore("blobs");
      const known = (await request(files.get(ref.sha256))) as LocalBlob | undefined;
      const state = known?.state === "stored" ? "stored" : "pending";
      const file: LocalBlob = { ...ref, state, blob, upload_url: known?.upload_url ?? null, reason: null, last_used: now };
      files.put(file);
    });
  }

  async localBlob(sha256: string): Promise<LocalBlob | undefined> {
    return this.run(["blobs"], "readonly", (tx) => request(tx.objectStore("blobs").get(sha256)) as Promise<LocalBlob | undefined>);
  }

  async touchBlob(sha256: string, now: number): Promise<void> {
    await this.updateBlob(sha256, (file) => ({ ...file, last_used: now }));
  }

  async updateBlob(sha256: string, change: (file: LocalBlob) => LocalBlob): Promise<void> {
    await this.run(["blobs"], "readwrite", async (tx) => {
      const files = tx.objectStore("blobs");
      const file = (await request(files.get(sha256))) as LocalBlob | undefined;
      if (file) files.put(change(file));
    });
  }

  /** Whether files wait to be uploaded, or were refused (their ops are to be set aside). */
  async hasFilesToSettle(): Promise<boolean> {
    return this.run(["blobs"], "readonly", async (tx) => {
      const state = tx.objectStore("blobs").index("state");
      const [pending, refused] = await Promise.all([request(state.count("pending")), request(state.count("refused"))]);
      return pending + refused > 0;
    });
  }

  /** Files waiting to be uploaded, least recently used first. */
  async pendingBlobs(): Promise<LocalBlob[]> {
    return this.run(["blobs"], "readonly", async (tx) =>
      ((await request(tx.objectStore("blobs").index("state").getAll("pending"))) as LocalBlob[]).sort((a, b) => a.last_used - b.last_used));
  }

  async pendingUploadTotals(): Promise<{ count: number; bytes: number }> {
    const pending = await this.pendingBlobs();
    return { count: pending.length, bytes: pending.reduce((sum, file) => sum + file.size, 0) };
  }
}
