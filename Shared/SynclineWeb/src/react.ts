// @syncline/web/react: React bindings. Each hook subscribes while its component is mounted
// and stops when it unmounts (mid-sync too); nothing is called back after that.
import { createContext, createElement, useContext, useEffect, useMemo, useState, useSyncExternalStore, type ReactElement, type ReactNode } from "react";
import type { LocalRecord, SyncClient, SyncStatus } from "./client.js";
import type { Collection } from "./collection.js";
import type { JSONObject } from "./json.js";
import type { QueryOptions } from "./query.js";
import type { Schema } from "./schema.js";

const ClientContext = createContext<SyncClient | null>(null);

/** Makes `client` the one that `useClient` and `useCollection` give the components below. */
export function SynclineProvider({ client, children }: { client: SyncClient; children?: ReactNode }): ReactElement {
  return createElement(ClientContext.Provider, { value: client }, children);
}

/** The client of the nearest `SynclineProvider` (without one, an error that says so). */
export function useClient(): SyncClient {
  const client = useContext(ClientContext);
  if (!client) throw new Error("useClient needs a <SynclineProvider client={…}> above this component");
  return client;
}

/** A collection of the provider's client, typed (with `schema`, writes are checked against it); the same object while the name and schema are. */
export function useCollection<T extends object = JSONObject>(name: string, schema?: Schema<T>): Collection<T> {
  const client = useClient();
  return useMemo(() => client.collection<T>(name, schema), [client, name, schema]);
}

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

/**
 * The records `options` select from `collection`, for a component under `<Suspense>`: it
 * suspends until the first result is read (no loading state to handle), then renders
 * again whenever the result changes. A query that is not one throws its `QueryError` to
 * the nearest error boundary. Components asking the same query of the same collection
 * share one observed result, kept 10 s after the last of them unmounts (so a remount, or
 * a render that suspended, finds it).
 */
export function useSuspenseQuery<T extends object>(collection: Collection<T>, options: QueryOptions<T> = {}): LocalRecord<T>[] {
  const result = sharedResult(collection, JSON.stringify(options));
  const records = useSyncExternalStore(result.subscribe, result.current);
  if (result.error) throw result.error;
  if (records === null) throw result.ready;
  return records;
}

/** How long an observed result nobody subscribes to is kept (ms). */
const keptIdle = 10_000;

/** One observed query's result, shared by the components that ask for it. */
class SharedResult<T extends object> {
  records: LocalRecord<T>[] | null = null;
  error: Error | null = null;
  /** Resolves with the first result (or error): what a suspended render waits for. */
  readonly ready: Promise<void>;
  readonly #listeners = new Set<() => void>();
  readonly #stop: () => void;
  #idle: ReturnType<typeof setTimeout> | null = null;

  constructor(collection: Collection<T>, options: QueryOptions<T>, readonly dropped: () => void) {
    let first = () => {};
    this.ready = new Promise<void>((resolve) => { first = resolve; });
    let stop = () => {};
    try {
      stop = collection.observe(options, (records) => {
        this.records = records;
        first();
        for (const listener of this.#listeners) listener();
      });
    } catch (error) {
      this.error = error as Error;
      first();
    }
    this.#stop = stop;
    this.#dropWhenIdle();
  }

  readonly subscribe = (listener: () => void): (() => void) => {
    this.#listeners.add(listener);
    if (this.#idle) clearTimeout(this.#idle);
    this.#idle = null;
    return () => {
      this.#listeners.delete(listener);
      if (this.#listeners.size === 0) this.#dropWhenIdle();
    };
  };

  readonly current = (): LocalRecord<T>[] | null => this.records;

  #dropWhenIdle(): void {
    if (this.#idle) clearTimeout(this.#idle);
    this.#idle = setTimeout(() => {
      this.#stop();
      this.dropped();
    }, keptIdle);
  }
}

const sharedResults = new WeakMap<SyncClient, Map<string, SharedResult<object>>>();

/** The shared result of `options` (JSON) over `collection`, observed on first use. */
function sharedResult<T extends object>(collection: Collection<T>, options: string): SharedResult<T> {
  let results = sharedResults.get(collection.client);
  if (!results) sharedResults.set(collection.client, (results = new Map()));
  const key = `${collection.name}\u0000${options}`;
  let result = results.get(key) as SharedResult<T> | undefined;
  if (!result) {
    const made = new SharedResult<T>(collection, JSON.parse(options) as QueryOptions<T>, () => results!.delete(key));
    results.set(key, made as unknown as SharedResult<object>);
    result = made;
  }
  return result;
}
