// @syncline/web/react: React bindings. Each hook subscribes while its component is mounted
// and stops when it unmounts (mid-sync too); nothing is called back after that.
import { useEffect, useState } from "react";
import type { LocalRecord, SyncClient, SyncStatus } from "./client.js";
import type { Collection } from "./collection.js";
import type { QueryOptions } from "./query.js";

export interface QueryResult<T> {
  /** The records, as of the last change (empty while loading). */
  records: LocalRecord<T>[];
  /** True until the first result arrives. */
  loading: boolean;
  /** A query that is not one (`QueryError`), or a store that failed. */
  error: Error | null;
}

export interface RecordResult<T> {
  /** The record, or null when it does not exist (or while loading). */
  record: LocalRecord<T> | null;
  loading: boolean;
  error: Error | null;
}

/**
 * The records `options` select from `collection`, kept current: the component renders
 * again when the result changes, never for a change that leaves it as it was. `options`
 * may be written inline: it is compared by value.
 */
export function useQuery<T extends object>(collection: Collection<T>, options: QueryOptions<T> = {}): QueryResult<T> {
  const key = JSON.stringify(options);
  const [result, setResult] = useState<QueryResult<T>>({ records: [], loading: true, error: null });
  useObserved(collection, key, (whileMounted) => collection.observe(JSON.parse(key) as QueryOptions<T>, whileMounted((records) => setResult({ records, loading: false, error: null }))),
    (error) => setResult({ records: [], loading: false, error }));
  return result;
}

/** One record of `collection`, kept current (null: none, or deleted). */
export function useRecord<T extends object>(collection: Collection<T>, id: string): RecordResult<T> {
  const [result, setResult] = useState<RecordResult<T>>({ record: null, loading: true, error: null });
  useObserved(collection, id, (whileMounted) => collection.observeRecord(id, whileMounted((record) => setResult({ record, loading: false, error: null }))),
    (error) => setResult({ record: null, loading: false, error }));
  return result;
}

/**
 * Runs `observe` while the component is mounted with the same collection and `key`, and
 * stops it when it unmounts or they change: a callback wrapped in `whileMounted` reaches
 * the component no more after that. An `observe` that throws (a query that is not one)
 * goes to `failed`.
 */
function useObserved<T extends object>(
  collection: Collection<T>, key: string,
  observe: (whileMounted: <A>(callback: (value: A) => void) => (value: A) => void) => () => void, failed: (error: Error) => void,
): void {
  useEffect(() => {
    let mounted = true;
    let stop = () => {};
    try {
      stop = observe((callback) => (value) => {
        if (mounted) callback(value);
      });
    } catch (error) {
      failed(error as Error);
    }
    return () => {
      mounted = false;
      stop();
    };
  }, [collection.client, collection.name, key]);
}

/**
 * The client's sync status (null until first read), read every `interval` seconds and
 * whenever edits are pulled, set aside or lost.
 */
export function useSyncStatus(client: SyncClient, interval = 1): SyncStatus | null {
  const [status, setStatus] = useState<SyncStatus | null>(null);
  useEffect(() => {
    let mounted = true;
    const read = () => void client.status().then((next) => {
      if (mounted) setStatus(next);
    }, () => {});
    read();
    const timer = setInterval(read, interval * 1000);
    const stops = (["pulled", "setAside", "jobDead", "storageFull", "storageReset", "unauthorized"] as const).map((name) => client.on(name, read));
    return () => {
      mounted = false;
      clearInterval(timer);
      for (const stop of stops) stop();
    };
  }, [client, interval]);
  return status;
}
