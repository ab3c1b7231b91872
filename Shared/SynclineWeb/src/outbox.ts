import { request } from "./idb.js";
import type { Op } from "./op.js";

/**
 * The outbox states are those of the Swift client: `pending` ops wait for a batch,
 * `batched` ones are in a batch not yet answered with 202, `sent` ones are in a job,
 * `confirmed` ones are applied and leave once a pull reaches their checkpoint, `set_aside`
 * ones were refused and wait for the app.
 */
export type OpState = "pending" | "batched" | "sent" | "confirmed" | "set_aside";
export const unconfirmed: OpState[] = ["pending", "batched", "sent"];
const states: OpState[] = ["pending", "batched", "sent", "confirmed", "set_aside"];

export interface OutboxEntry {
  seq?: number;
  op_id: string;
  collection: string;
  id: string;
  op: Op;
  state: OpState;
  batch_id?: string | null;
  job_id?: string | null;
  checkpoint?: number | null;
  /** A confirmed op: the version it took (0: none, it was superseded or a duplicate); absent when the outcome came without results. */
  applied_version?: number | null;
  reason?: string | null;
  created_at: number;
  /** The files the op references: it waits for them to be uploaded. */
  blobs?: string[];
}

export type OutboxCounts = Record<OpState, number>;

/** Where the counts live in the `meta` store. */
const countsKey = "outbox_counts";

/**
 * Every write to the outbox within one transaction, through one writer that keeps how many
 * entries each state holds, in `meta`, in the same transaction: the client's status reads
 * those counts instead of the entries (the outbox may hold tens of thousands).
 */
export class OutboxWriter {
  readonly #deltas = new Map<OpState, number>();
  #cleared = false;

  readonly #tx: IDBTransaction;

  private constructor(tx: IDBTransaction) {
    this.#tx = tx;
  }

  private static readonly writers = new WeakMap<IDBTransaction, OutboxWriter>();

  /** The transaction's writer (the transaction must include `outbox` and `meta`). */
  static of(tx: IDBTransaction): OutboxWriter {
    let writer = OutboxWriter.writers.get(tx);
    if (!writer) OutboxWriter.writers.set(tx, (writer = new OutboxWriter(tx)));
    return writer;
  }

  /** Writes the counts that the transaction's outbox writes changed; nothing when there were none. */
  static async settle(tx: IDBTransaction): Promise<void> {
    const writer = OutboxWriter.writers.get(tx);
    if (writer) await writer.#settle();
  }

  get #store(): IDBObjectStore {
    return this.#tx.objectStore("outbox");
  }

  #bump(state: OpState, by: number): void {
    this.#deltas.set(state, (this.#deltas.get(state) ?? 0) + by);
  }

  add(entry: OutboxEntry): void {
    this.#store.add(entry);
    this.#bump(entry.state, 1);
  }

  /** Replaces `before`, as read in this transaction, with `after` (the same `seq`). */
  put(before: OutboxEntry, after: OutboxEntry): void {
    this.#store.put(after);
    if (before.state !== after.state) {
      this.#bump(before.state, -1);
      this.#bump(after.state, 1);
    }
  }

  delete(entry: OutboxEntry): void {
    this.#store.delete(entry.seq!);
    this.#bump(entry.state, -1);
  }

  clear(): void {
    this.#store.clear();
    this.#deltas.clear();
    this.#cleared = true;
  }

  async #settle(): Promise<void> {
    if (!this.#cleared && this.#deltas.size === 0) return;
    const meta = this.#tx.objectStore("meta");
    const saved = this.#cleared ? zeroCounts() : ((await request(meta.get(countsKey))) as OutboxCounts | undefined);
    // A store from before the counts were kept is counted once, with this transaction's writes.
    const counts = saved ?? (await countEntries(this.#tx));
    if (saved) for (const [state, by] of this.#deltas) counts[state] += by;
    meta.put(counts, countsKey);
  }
}

function zeroCounts(): OutboxCounts {
  return Object.fromEntries(states.map((state) => [state, 0])) as OutboxCounts;
}

async function countEntries(tx: IDBTransaction): Promise<OutboxCounts> {
  const index = tx.objectStore("outbox").index("state");
  const counts = zeroCounts();
  await Promise.all(states.map(async (state) => { counts[state] = await request(index.count(state)); }));
  return counts;
}

/** How many entries each state holds: the kept counts (counted once for a store from before them). */
export async function outboxCounts(tx: IDBTransaction): Promise<OutboxCounts> {
  return ((await request(tx.objectStore("meta").get(countsKey))) as OutboxCounts | undefined) ?? countEntries(tx);
}

/** When the oldest op not yet confirmed was written: the first entry of each such state (the index keeps them in `seq` order). */
export async function oldestUnconfirmed(tx: IDBTransaction): Promise<number | null> {
  const index = tx.objectStore("outbox").index("state");
  const firsts = await Promise.all(unconfirmed.map(async (state) => {
    const cursor = await request(index.openCursor(state));
    return cursor ? (cursor.value as OutboxEntry).created_at : null;
  }));
  const found = firsts.filter((at): at is number => at !== null);
  return found.length === 0 ? null : Math.min(...found);
}
