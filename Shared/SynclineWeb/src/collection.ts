import type { JSONObject, JSONValue } from "./json.js";
import type { QueryOptions, Where } from "./query.js";
import { SchemaError, type Schema } from "./schema.js";
import type { LocalRecord, SyncClient } from "./client.js";

/** A patch of records of `T`: some fields, and null to remove a field that may be missing. */
export type Patch<T> = { [K in keyof T]?: undefined extends T[K] ? T[K] | null : T[K] };

/** `T`'s fields holding numbers (counters). */
export type NumberField<T> = { [K in keyof T]-?: NonNullable<T[K]> extends number ? K : never }[keyof T] & string;
/** `T`'s fields holding arrays (sets), and an element of one. */
export type ArrayField<T> = { [K in keyof T]-?: NonNullable<T[K]> extends readonly unknown[] ? K : never }[keyof T] & string;
export type Element<T, K extends keyof T> = NonNullable<T[K]> extends readonly (infer E)[] ? E : never;

/**
 * One collection, typed: `client.collection<Recipe>("recipes")`, or with a schema that
 * checks every write at run time, `client.collection("recipes", recipeSchema)`. Writes
 * take a `T`, reads give `LocalRecord<T>`, and queries name only `T`'s fields with
 * conditions on values of their type.
 */
export class Collection<T extends object = JSONObject> {
  constructor(readonly client: SyncClient, readonly name: string, readonly schema?: Schema<T>) {}

  /** Writes the whole record (fields it lacks are removed). Resolves with the op id. */
  upsert(id: string, data: T, options: { ifVersion?: number } = {}): Promise<string> {
    this.schema?.check(data, "data");
    return this.client.upsert(this.name, id, data as unknown as JSONObject, options);
  }

  /** Sets the fields given; null removes an optional one. Resolves with the op id. */
  patch(id: string, fields: Patch<T>, options: { ifVersion?: number } = {}): Promise<string> {
    const shape = (this.schema as { shape?: Record<string, Schema<unknown>> } | undefined)?.shape;
    if (shape) {
      for (const [key, value] of Object.entries(fields)) {
        const field = shape[key];
        if (!field) throw new SchemaError(`data.${key}`, "is not a field of this shape");
        if (value === null && field.optional) continue;
        field.check(value, `data.${key}`);
      }
    }
    return this.client.patch(this.name, id, fields as unknown as JSONObject, options);
  }

  delete(id: string, options: { ifVersion?: number } = {}): Promise<string> {
    return this.client.delete(this.name, id, options);
  }

  /** Adds `by` to a number field: increments from every device add up (see `SyncClient.increment`). */
  increment(id: string, field: NumberField<T>, by: number, options: { ifVersion?: number } = {}): Promise<string> {
    return this.client.increment(this.name, id, field, by, options);
  }

  /** Adds elements to an array field held as a set (see `SyncClient.add`). */
  add<K extends ArrayField<T>>(id: string, field: K, values: Element<T, K>[], options: { ifVersion?: number } = {}): Promise<string> {
    return this.client.add(this.name, id, field, values as unknown as JSONValue[], options);
  }

  /** Takes elements out of an array field held as a set (see `SyncClient.remove`). */
  remove<K extends ArrayField<T>>(id: string, field: K, values: Element<T, K>[], options: { ifVersion?: number } = {}): Promise<string> {
    return this.client.remove(this.name, id, field, values as unknown as JSONValue[], options);
  }

  publish(id: string, publicID: string, options: { canFork?: boolean; listed?: boolean } = {}): Promise<string> {
    return this.client.publish(this.name, id, publicID, options);
  }

  unpublish(id: string): Promise<string> {
    return this.client.unpublish(this.name, id);
  }

  fork(id: string, publicID: string): Promise<string> {
    return this.client.fork(this.name, id, publicID);
  }

  get(id: string): Promise<LocalRecord<T> | null> {
    return this.client.record<T>(this.name, id);
  }

  all(): Promise<LocalRecord<T>[]> {
    return this.client.records<T>(this.name);
  }

  query(options: QueryOptions<T> = {}): Promise<LocalRecord<T>[]> {
    return this.client.query<T>(this.name, options);
  }

  count(options: { where?: Where<T> } = {}): Promise<number> {
    return this.client.count<T>(this.name, options);
  }

  /** Calls back at once and whenever the query's result changes; returns an unsubscribe function. */
  observe(options: QueryOptions<T>, callback: (records: LocalRecord<T>[]) => void): () => void {
    return this.client.observe<T>({ ...options, collection: this.name }, callback);
  }

  /** Calls back at once and whenever the record changes (null: it does not exist or was deleted). */
  observeRecord(id: string, callback: (record: LocalRecord<T> | null) => void): () => void {
    return this.client.observe<T>({ collection: this.name, where: { id: { eq: id } } as Where<T> }, (records) => callback(records[0] ?? null));
  }
}
