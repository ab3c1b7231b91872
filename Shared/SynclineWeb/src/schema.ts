import { blobRefOf, type BlobValue } from "./blobs.js";
import type { JSONValue } from "./json.js";

/**
 * A record's shape, checked when a typed collection writes (never when it reads: records
 * other devices wrote may be of an older or newer shape). `field.optional` marks a field
 * that may be missing, which a patch may remove with null.
 */
export interface Schema<T> {
  /** Throws `SchemaError` when `value` is not a `T`; `path` names it (`data.minutes`). */
  check(value: unknown, path: string): void;
  readonly optional: boolean;
  /** Never set: carries `T` for `Infer`. */
  readonly type?: T;
}

/** The type a schema describes: `type Recipe = Infer<typeof recipeSchema>`. */
export type Infer<S> = S extends Schema<infer T> ? T : never;

/** A write whose data does not have its collection's shape: nothing was stored. */
export class SchemaError extends Error {
  constructor(readonly path: string, problem: string) {
    super(`${path} ${problem}`);
    this.name = "SchemaError";
  }
}

type Shape = Record<string, Schema<any>>;
type OptionalKeys<S extends Shape> = { [K in keyof S]: S[K]["optional"] extends true ? K : never }[keyof S];
type Flat<T> = { [K in keyof T]: T[K] };
/** The object type of a shape: optional fields may be missing. */
export type ObjectOf<S extends Shape> = Flat<{ [K in Exclude<keyof S, OptionalKeys<S>>]: Infer<S[K]> } & { [K in OptionalKeys<S>]?: Infer<S[K]> }>;

function make<T>(check: (value: unknown, path: string) => void): Schema<T> & { optional: false } {
  return { check, optional: false };
}

function expect(test: boolean, path: string, problem: string): void {
  if (!test) throw new SchemaError(path, problem);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** The schema of an object with these fields; any other field is refused. */
function object<S extends Shape>(shape: S): Schema<ObjectOf<S>> & { optional: false; shape: S } {
  return {
    shape, optional: false,
    check(value, path) {
      expect(isObject(value), path, "must be an object");
      const fields = value as Record<string, unknown>;
      for (const key of Object.keys(fields)) expect(key in shape, `${path}.${key}`, "is not a field of this shape");
      for (const [key, field] of Object.entries(shape)) {
        if (fields[key] === undefined && field.optional) continue;
        field.check(fields[key], `${path}.${key}`);
      }
    },
  };
}

/** The small schema language of typed collections: `schema.object({title: schema.string(), minutes: schema.optional(schema.integer())})`. */
export const schema = {
  string: () => make<string>((value, path) => expect(typeof value === "string", path, "must be a string")),
  number: () => make<number>((value, path) => expect(typeof value === "number" && Number.isFinite(value), path, "must be a finite number")),
  integer: () => make<number>((value, path) => expect(Number.isSafeInteger(value), path, "must be a whole number")),
  boolean: () => make<boolean>((value, path) => expect(typeof value === "boolean", path, "must be true or false")),
  /** One of these values: `schema.literal("low", "high")`. */
  literal: <V extends string | number | boolean>(...values: V[]) =>
    make<V>((value, path) => expect(values.includes(value as V), path, `must be one of ${values.map((v) => JSON.stringify(v)).join(", ")}`)),
  array: <T>(item: Schema<T>) => make<T[]>((value, path) => {
    expect(Array.isArray(value), path, "must be an array");
    (value as unknown[]).forEach((element, index) => item.check(element, `${path}[${index}]`));
  }),
  object,
  /** A file reference, as `blobValue(await client.attach(file))` makes it. */
  file: () => make<BlobValue>((value, path) => expect(blobRefOf(value as JSONValue) !== null, path, "must be a file reference: blobValue(await client.attach(file))")),
  /** Any JSON value (the write's own checks still hold). */
  json: () => make<JSONValue>(() => {}),
  /** The value, or null. */
  nullable: <T>(inner: Schema<T>) => make<T | null>((value, path) => { if (value !== null) inner.check(value, path); }),
  /** A field that may be missing (and that a patch may remove with null). */
  optional: <T>(inner: Schema<T>): Schema<T> & { optional: true } => ({ check: inner.check, optional: true }),
};
