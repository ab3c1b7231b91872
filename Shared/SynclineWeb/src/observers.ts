// The observed queries of one client: which records' changes concern which query, and
// each query's result brought up to date after the writes that asked for it — off their
// path, once per burst, from the changed rows alone when they tell it. No IndexedDB here:
// the result is read through `read`, so Node tests it with a list (test/observers.test.mjs).
import { canonicalJSON, type JSONObject } from "./json.js";
import { matches, recordOrder, type PlainQuery } from "./query.js";
import { shown, type LocalRecord } from "./records.js";
import type { Changed } from "./store.js";

/** A query of one collection, as it is observed. */
export type ObservedQuery = PlainQuery & { collection: string };

/** An observed query, and the result it was last called back with. */
interface Observer {
  query: ObservedQuery;
  callback: (records: LocalRecord[]) => void;
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

export class Observers {
  readonly #observers = new Set<Observer>();

  /** `read`: the query's result as the store holds it now. */
  constructor(readonly read: (query: ObservedQuery) => Promise<LocalRecord[]>) {}

  /** Calls back with the result at once and whenever it changes; returns the unsubscribe function. */
  add(query: ObservedQuery, callback: (records: LocalRecord[]) => void): () => void {
    const observer: Observer = { query, callback, last: null, ids: new Set(), records: null, changes: null, reading: false, again: false };
    this.#observers.add(observer);
    void this.#deliver(observer);
    return () => this.#observers.delete(observer);
  }

  /**
   * Wakes the observers a change can concern: its record is in their result, or shows now
   * and passes their filter (or what shows now is not known here).
   */
  changed(changes: Changed[]): void {
    for (const observer of this.#observers) {
      let woken = false;
      for (const change of changes) {
        if (change.collection !== observer.query.collection) continue;
        // While an update is under way its result is not known yet: every change of the
        // collection counts; so does a record already changed since (its row may go again).
        const relevant = observer.reading || observer.records === null || observer.ids.has(change.id) || change.row === undefined
          || observer.changes?.has(change.id) === true || (change.row !== null && matches(change.row.id, change.row.data, observer.query.where));
        if (!relevant) continue;
        woken = true;
        if (change.row === undefined) observer.changes = null;
        observer.changes?.set(change.id, change);
      }
      if (woken) void this.#deliver(observer);
    }
  }

  /** Every observer reads its result again: what shows changed for records not named. */
  rereadAll(): void {
    for (const observer of this.#observers) {
      observer.changes = null;
      void this.#deliver(observer);
    }
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
        const update = changes && observer.records ? updated(observer.query, observer.records, changes) : null;
        if (update && !update.changed) continue;
        const records = update?.records ?? await this.read(observer.query);
        if (!this.#observers.has(observer)) return;
        observer.records = records;
        observer.ids = new Set(records.map((record) => record.id));
        if (update) {
          observer.last = null;  // known to differ; a later read compares with nothing
        } else {
          const text = canonicalJSON(records as unknown as JSONObject[]);
          if (text === observer.last) continue;
          observer.last = text;
        }
        observer.callback(records);
      } while (observer.again);
    } finally {
      observer.reading = false;
    }
  }
}

/**
 * The query's result after `changes`, from its previous result and the changed rows (and
 * whether it differs), or null when those cannot tell it: with an offset, or when a
 * limited result lost rows and rows beyond its end (never read) might move up. Only the
 * changed records are compared and placed (by binary search): a write costs the same
 * whether the result holds ten records or twenty thousand.
 */
export function updated(query: ObservedQuery, previous: LocalRecord[], changes: Map<string, Changed>): { records: LocalRecord[]; changed: boolean } | null {
  if (query.offset) return null;
  const order = recordOrder(query);
  const replaced = new Map<string, LocalRecord | null>();
  for (const change of changes.values()) {
    if (change.collection !== query.collection) continue;
    replaced.set(change.id, change.row && matches(change.row.id, change.row.data, query.where) ? shown(change.row) : null);
  }
  const before = new Map<string, LocalRecord>();
  const records = previous.filter((record) => {
    if (!replaced.has(record.id)) return true;
    before.set(record.id, record);
    return false;
  });
  for (const record of replaced.values()) {
    if (record) records.splice(insertionIndex(records, record, order), 0, record);
  }
  if (query.limit !== undefined) {
    const last = previous[previous.length - 1];
    if (previous.length >= query.limit && records.filter((record) => order(record, last) <= 0).length < query.limit) return null;
    records.length = Math.min(records.length, query.limit);
  }
  const kept = query.limit === undefined ? null : new Set(records.map((record) => record.id));
  const changed = [...replaced].some(([id, record]) => {
    const old = before.get(id);
    const now = record && (kept === null || kept.has(id)) ? record : undefined;
    return old === undefined || now === undefined ? old !== now : canonicalJSON(old as unknown as JSONObject) !== canonicalJSON(now as unknown as JSONObject);
  });
  return { records: changed ? records : previous, changed };
}

/** Where `record` goes in `sorted` (by `order`, which is total: ties end on the id). */
function insertionIndex(sorted: LocalRecord[], record: LocalRecord, order: (a: LocalRecord, b: LocalRecord) => number): number {
  let low = 0, high = sorted.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (order(sorted[middle], record) < 0) low = middle + 1;
    else high = middle;
  }
  return low;
}
