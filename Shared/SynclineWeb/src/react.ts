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
  useEffect(() => {
    let mounted = true;
    let stop = () => {};
    try {
      stop = collection.observe(JSON.parse(key) as QueryOptions<T>, (records) => {
        if (mounted) setResult({ records, loading: false, error: null });
      });
    } catch (error) {
      setResult({ records: [], loading: false, error: error as Error });
    }
    return () => {
      mounted = false;
      stop();
    };
  }, [collection.client, collection.name, key]);
  return result;
}

/** One record of `collection`, kept current (null: none, or deleted). */
export function useRecord<T extends object>(collection: Collection<T>, id: string): RecordResult<T> {
  const [result, setResult] = useState<RecordResult<T>>({ record: null, loading: true, error: null });
  useEffect(() => {
    let mounted = true;
    let stop = () => {};
    try {
      stop = collection.observeRecord(id, (record) => {
        if (mounted) setResult({ record, loading: false, error: null });
      });
    } catch (error) {
      setResult({ record: null, loading: false, error: error as Error });
    }
    return () => {
      mounted = false;
      stop();
    };
  }, [collection.client, collection.name, id]);
  return result;
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
    const stops = (["pulled", "setAside", "jobDead", "storageFull", "storageReset"] as const).map((name) => client.on(name, read));
    return () => {
      mounted = false;
      clearInterval(timer);
      for (const stop of stops) stop();
    };
  }, [client, interval]);
  return status;
}
