/** A JSON value, as records' data holds it. */
export type JSONValue = null | boolean | number | string | JSONValue[] | { [field: string]: JSONValue };

/** A record's fields. */
export type JSONObject = { [field: string]: JSONValue };

/** An object literal's kind of object (not an array, a `Date`, a `Map` or another class's instance). */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

/** JSON text with object keys sorted: equal values give equal text. */
export function canonicalJSON(value: JSONValue): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return "[" + value.map(canonicalJSON).join(",") + "]";
  const keys = Object.keys(value).sort();
  return "{" + keys.map((key) => JSON.stringify(key) + ":" + canonicalJSON(value[key])).join(",") + "}";
}
