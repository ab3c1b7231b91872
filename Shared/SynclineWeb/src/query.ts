import { utcDateTime } from "./dates.js";
import { canonicalJSON, isPlainObject, type JSONObject, type JSONValue } from "./json.js";

/**
 * Local queries, with the rules of the Swift client (SQLite's): null or missing before
 * numbers (booleans are 1 and 0), numbers before strings, strings in order; a condition on
 * a missing or null field is false, except `isNull`. Strings compare by UTF-16 code units
 * (the same order as the Swift client's UTF-8 bytes except for characters beyond U+FFFF).
 */
export interface Condition<V = JSONValue> {
  eq?: V | null;
  gt?: V;
  gte?: V;
  lt?: V;
  lte?: V;
  in?: (V | null)[];
  /** A substring of a string field whatever the case of either, or an element of an array field. */
  contains?: V extends readonly (infer Element)[] ? Element : V extends string ? string : never;
  /** The start of a string field, whatever the case of either. */
  startsWith?: V extends string ? string : never;
  /** true: the field is null or missing; false: it holds a value. */
  isNull?: boolean;
}

type Depth = [never, 0, 1, 2, 3];

/** The fields of `T` a query can name: its own, and `"a.b"` into an object field (four levels). */
type PathsOf<T, D extends number = 4> = [D] extends [never] ? never : T extends object
  ? { [K in keyof T & string]: K | (NonNullable<T[K]> extends readonly unknown[] ? never
    : NonNullable<T[K]> extends object ? `${K}.${PathsOf<NonNullable<T[K]>, Depth[D]>}` : never) }[keyof T & string]
  : never;

/** A field a query over records of `T` can name: `id` (the record's), or a field of its data. */
export type FieldPath<T> = "id" | PathsOf<T>;

/** The value at `path` in records of `T`. */
export type ValueAt<T, P extends string> = P extends "id" ? string
  : P extends keyof T ? NonNullable<T[P]>
  : P extends `${infer Head}.${infer Rest}` ? Head extends keyof T ? ValueAt<NonNullable<T[Head]>, Rest> : never
  : never;

/** Field conditions, all of which a record must meet; `"a.b"` reaches into an object. */
export type Where<T = JSONObject> = { [P in FieldPath<T>]?: Condition<ValueAt<T, P>> };

/** `T`, not inferred from where it is used: a query's record type comes from the call's type argument (or is JSONObject). */
export type Uninferred<T> = [T][T extends unknown ? 0 : never];

/** A field to order by; `"-minutes"` orders descending. */
export type OrderBy<T = JSONObject> = FieldPath<T> | `-${FieldPath<T>}`;

export interface QueryOptions<T = JSONObject> {
  where?: Where<T>;
  /** Fields to order by (`"-minutes"`: descending); ties go by id. */
  orderBy?: OrderBy<T>[];
  limit?: number;
  offset?: number;
}

/** A query as the store runs it, once checked: fields by name. */
export interface PlainQuery {
  where?: Record<string, Condition>;
  orderBy?: string[];
  limit?: number;
  offset?: number;
}

/** A query the rules cannot run: an unknown operator or option, or a value of the wrong kind. */
export class QueryError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "QueryError";
  }
}

const operators = ["eq", "gt", "gte", "lt", "lte", "in", "contains", "startsWith", "isNull"];
const options = ["collection", "where", "orderBy", "limit", "offset"];

function isJSON(value: unknown): boolean {
  if (value === null || typeof value === "string" || typeof value === "boolean") return true;
  if (typeof value === "number") return Number.isFinite(value);
  if (Array.isArray(value)) return value.every(isJSON);
  return isPlainObject(value) && Object.values(value).every(isJSON);
}

/** Throws `QueryError` for a query that is not one: what TypeScript refuses in a typed collection, refused at run time too. */
export function checkQuery(query: unknown): void {
  if (query === undefined) return;
  if (!isPlainObject(query)) throw new QueryError("a query is an object: {where, orderBy, limit, offset}");
  for (const key of Object.keys(query)) {
    if (!options.includes(key)) throw new QueryError(`unknown query option "${key}" (${options.slice(1).join(", ")})`);
  }
  const { where, orderBy, limit, offset } = query;
  if (where !== undefined) {
    if (!isPlainObject(where)) throw new QueryError("where is an object of field conditions: {minutes: {lt: 30}}");
    for (const [field, condition] of Object.entries(where)) {
      if (field === "" || field.split(".").includes("")) throw new QueryError(`where: "${field}" is not a field`);
      if (!isPlainObject(condition)) throw new QueryError(`where.${field} is a condition object such as {eq: value}`);
      for (const [operator, value] of Object.entries(condition)) {
        if (!operators.includes(operator)) throw new QueryError(`where.${field}: unknown operator "${operator}" (${operators.join(", ")})`);
        if (operator === "isNull" ? typeof value !== "boolean" : operator === "in" ? !Array.isArray(value) || !isJSON(value) : value === undefined || !isJSON(value)) {
          const kind = operator === "isNull" ? "true or false" : operator === "in" ? "an array of JSON values" : "a JSON value";
          throw new QueryError(`where.${field}.${operator} must be ${kind}`);
        }
      }
    }
  }
  const isField = (field: unknown) => typeof field === "string" && !field.replace(/^-/, "").split(".").includes("");
  if (orderBy !== undefined && !(Array.isArray(orderBy) && orderBy.every(isField))) {
    throw new QueryError("orderBy is an array of field names, each descending with a leading \"-\": [\"-minutes\", \"title\"]");
  }
  for (const [name, value] of [["limit", limit], ["offset", offset]] as const) {
    if (value !== undefined && !(Number.isInteger(value) && (value as number) >= 0)) throw new QueryError(`${name} must be a whole number, 0 or more`);
  }
}

/** A value as the rules order it: [class, value]. The same tuple keys the declared indexes. */
export type SortKey = [number, number | string];

export function sortKey(value: JSONValue | undefined): SortKey {
  if (value === null || value === undefined) return [0, 0];
  if (typeof value === "boolean") return [1, value ? 1 : 0];
  if (typeof value === "number") return [1, value];
  // A date-time as the device shows them (in UTC), data and the values compared alike.
  if (typeof value === "string") return [2, utcDateTime(value)];
  return [2, canonicalJSON(value)];
}

export function compareKeys(a: SortKey, b: SortKey): number {
  if (a[0] !== b[0]) return a[0] - b[0];
  return a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0;
}

export function fieldValue(data: JSONObject, field: string): JSONValue | undefined {
  let current: JSONValue | undefined = data;
  for (const segment of field.split(".")) {
    if (current === null || typeof current !== "object" || Array.isArray(current)) return undefined;
    current = Object.prototype.hasOwnProperty.call(current, segment) ? (current as JSONObject)[segment] : undefined;
  }
  return current;
}

function present(value: JSONValue | undefined): value is JSONValue {
  return value !== null && value !== undefined;
}

/** Whether a record's data (and id) meets one field's condition. */
export function meets(value: JSONValue | undefined, condition: Condition): boolean {
  const key = sortKey(value);
  const compare = (bound: JSONValue) => compareKeys(key, sortKey(bound));
  if (condition.isNull !== undefined && condition.isNull === present(value)) return false;
  if ("eq" in condition) {
    if (condition.eq === null) {
      if (present(value)) return false;
    } else if (!present(value) || compare(condition.eq!) !== 0) return false;
  }
  for (const [name, test] of [["gt", (c: number) => c > 0], ["gte", (c: number) => c >= 0], ["lt", (c: number) => c < 0], ["lte", (c: number) => c <= 0]] as const) {
    const bound = condition[name];
    if (bound === undefined) continue;
    if (!present(value) || bound === null || !test(compare(bound))) return false;
  }
  if (condition.in !== undefined) {
    const matches = condition.in.some((candidate) => (candidate === null ? !present(value) : present(value) && compare(candidate) === 0));
    if (!matches) return false;
  }
  if (condition.contains !== undefined) {
    if (typeof value === "string") {
      if (typeof condition.contains !== "string" || !value.toLowerCase().includes(condition.contains.toLowerCase())) return false;
    } else if (Array.isArray(value)) {
      const needle = condition.contains;
      if (needle === null || !value.some((item) => present(item) && compareKeys(sortKey(item), sortKey(needle)) === 0)) return false;
    } else {
      return false;
    }
  }
  if (condition.startsWith !== undefined) {
    if (typeof value !== "string" || typeof condition.startsWith !== "string" || !value.toLowerCase().startsWith(condition.startsWith.toLowerCase())) return false;
  }
  return true;
}

export function matches(id: string, data: JSONObject, where: PlainQuery["where"]): boolean {
  if (!where) return true;
  return Object.entries(where).every(([field, condition]) => meets(field === "id" ? id : fieldValue(data, field), condition));
}

/** The query's order of records: by its `orderBy` fields, then by id. */
export function recordOrder(options: PlainQuery): (a: { id: string; data: JSONObject }, b: { id: string; data: JSONObject }) => number {
  const keys = (options.orderBy ?? []).map((spec) => ({ field: spec.replace(/^-/, ""), descending: spec.startsWith("-") }));
  return (a, b) => {
    for (const { field, descending } of keys) {
      const order = compareKeys(sortKey(fieldValue(a.data, field)), sortKey(fieldValue(b.data, field)));
      if (order !== 0) return descending ? -order : order;
    }
    return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  };
}

/** Sorts records by the query's order (then by id) and applies its offset and limit. */
export function ordered<T extends { id: string; data: JSONObject }>(rows: T[], options: PlainQuery): T[] {
  const sorted = [...rows].sort(recordOrder(options));
  const start = options.offset ?? 0;
  return sorted.slice(start, options.limit === undefined ? undefined : start + options.limit);
}
