import { canonicalJSON, type JSONObject, type JSONValue } from "./json.js";

/**
 * Local queries, with the rules of the Swift client (SQLite's): null or missing before
 * numbers (booleans are 1 and 0), numbers before strings, strings in order; a condition on
 * a missing or null field is false, except `isNull`. Strings compare by UTF-16 code units
 * (the same order as the Swift client's UTF-8 bytes except for characters beyond U+FFFF).
 */
export interface Condition {
  eq?: JSONValue;
  gt?: JSONValue;
  gte?: JSONValue;
  lt?: JSONValue;
  lte?: JSONValue;
  in?: JSONValue[];
  /** A substring of a string field, or an element of an array field. */
  contains?: JSONValue;
  /** true: the field is null or missing; false: it holds a value. */
  isNull?: boolean;
}

/** Field conditions, all of which a record must meet; `"a.b"` reaches into an object. */
export type Where = Record<string, Condition>;

export interface QueryOptions {
  where?: Where;
  /** Fields to order by (`"-minutes"`: descending); ties go by id. */
  orderBy?: string[];
  limit?: number;
  offset?: number;
}

/** A value as the rules order it: [class, value]. The same tuple keys the declared indexes. */
export type SortKey = [number, number | string];

export function sortKey(value: JSONValue | undefined): SortKey {
  if (value === null || value === undefined) return [0, 0];
  if (typeof value === "boolean") return [1, value ? 1 : 0];
  if (typeof value === "number") return [1, value];
  if (typeof value === "string") return [2, value];
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
      if (typeof condition.contains !== "string" || !value.includes(condition.contains)) return false;
    } else if (Array.isArray(value)) {
      const needle = condition.contains;
      if (needle === null || !value.some((item) => present(item) && compareKeys(sortKey(item), sortKey(needle)) === 0)) return false;
    } else {
      return false;
    }
  }
  return true;
}

export function matches(id: string, data: JSONObject, where: Where | undefined): boolean {
  if (!where) return true;
  return Object.entries(where).every(([field, condition]) => meets(field === "id" ? id : fieldValue(data, field), condition));
}

/** The query's order of records: by its `orderBy` fields, then by id. */
export function recordOrder(options: QueryOptions): (a: { id: string; data: JSONObject }, b: { id: string; data: JSONObject }) => number {
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
export function ordered<T extends { id: string; data: JSONObject }>(rows: T[], options: QueryOptions): T[] {
  const sorted = [...rows].sort(recordOrder(options));
  const start = options.offset ?? 0;
  return sorted.slice(start, options.limit === undefined ? undefined : start + options.limit);
}
