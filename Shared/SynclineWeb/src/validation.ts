import { blobRefOf } from "./blobs.js";
import { isPlainObject } from "./json.js";
import type { Op } from "./op.js";

/** The gateway's limits on one op (the same as the Swift client's). */
export const maxDataBytes = 262_144;
export const maxDataDepth = 64;
const maxIfVersion = 9_000_000_000_000_000;

/**
 * A write the server would refuse, refused at the call: nothing was stored or queued —
 * by the gateway's own checks, or by the app's rules for this device's role (`rule`).
 * `field` is the op's field at fault (`collection`, `id`, `data`, `public_id`, `if_version`),
 * `limit` the limit it broke, when there is one; the message names the place (`data.rating`).
 */
export class InvalidOpError extends Error {
  /** `rule`: the app's rule that refuses the write (`recipes.schema`), when the rules refuse it. */
  constructor(message: string, readonly field: string, readonly limit: number | null = null, readonly rule: string | null = null) {
    super(message);
    this.name = "InvalidOpError";
  }
}

export const collectionPattern = /^[a-z][a-z0-9_]{0,63}$/;
const recordIDPattern = /^[A-Za-z0-9_.:-]{1,128}$/;
const publicIDPattern = /^[a-z0-9][a-z0-9-]{2,127}$/;
const callNamePattern = /^[A-Za-z][A-Za-z0-9_.:-]{0,63}$/;
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const utf8 = new TextEncoder();

/** Throws `InvalidOpError` for an op the gateway would refuse, by the rules it checks a push with. */
export function checkOp(op: Op): void {
  if (typeof op.collection !== "string" || !collectionPattern.test(op.collection)) {
    throw new InvalidOpError("collection must match ^[a-z][a-z0-9_]{0,63}$", "collection");
  }
  if (typeof op.id !== "string" || !recordIDPattern.test(op.id)) throw new InvalidOpError("id must match ^[A-Za-z0-9_.:-]{1,128}$", "id");
  if (op.if_version !== undefined && !(Number.isInteger(op.if_version) && op.if_version >= 0 && op.if_version < maxIfVersion)) {
    throw new InvalidOpError(`if_version must be an integer from 0 to ${maxIfVersion - 1}`, "if_version");
  }
  if (op.type === "publish" || op.type === "fork") {
    if (typeof op.public_id !== "string" || !publicIDPattern.test(op.public_id)) {
      throw new InvalidOpError("public_id must match ^[a-z0-9][a-z0-9-]{2,127}$", "public_id");
    }
  }
  if (op.type === "call") {
    if (typeof op.name !== "string" || !callNamePattern.test(op.name)) {
      throw new InvalidOpError("name must match ^[A-Za-z][A-Za-z0-9_.:-]{0,63}$", "name");
    }
    const bytes = encodedSize(op.args ?? null, "args", 1);
    if (bytes > maxDataBytes) throw new InvalidOpError(`args are ${bytes} bytes, more than ${maxDataBytes}`, "args", maxDataBytes);
    if (op.guess !== undefined) {
      if (!isPlainObject(op.guess)) throw new InvalidOpError("guess must be an object", "guess");
      encodedSize(op.guess, "guess", 1);
    }
    return;
  }
  if (op.type === "increment" || op.type === "add" || op.type === "remove") return checkMerging(op);
  if (op.type !== "upsert" && op.type !== "patch") return;
  const data: unknown = op.data;
  if (!isPlainObject(data)) throw new InvalidOpError("data must be an object", "data");
  if (op.type === "patch" && Object.keys(data).length === 0) throw new InvalidOpError("a patch needs at least one field", "data");
  const bytes = encodedSize(data, "data", 1);
  if (bytes > maxDataBytes) throw new InvalidOpError(`data is ${bytes} bytes, more than ${maxDataBytes}`, "data", maxDataBytes);
}

/** An increment's, add's or remove's field, and its `by` or `values`. */
function checkMerging(op: Op): void {
  if (op.data !== undefined && op.data !== null) throw new InvalidOpError(`${op.type} takes no data; it names a field`, "data");
  const field: unknown = op.field;
  if (typeof field !== "string" || field === "" || field.includes("\u0000")) {
    throw new InvalidOpError("field must name a field: a non-empty string without NUL", "field");
  }
  if ([...field].length > maxFieldNameLength) throw new InvalidOpError(`field is longer than ${maxFieldNameLength} characters`, "field", maxFieldNameLength);
  if (op.type === "increment") {
    if (typeof op.by !== "number" || !Number.isFinite(op.by)) throw new InvalidOpError("by must be a finite number", "by");
    return;
  }
  const values: unknown = op.values;
  if (!Array.isArray(values)) throw new InvalidOpError("values must be an array", "values");
  if (values.length < 1 || values.length > maxSetValues) {
    throw new InvalidOpError(`values must hold 1 to ${maxSetValues} elements, not ${values.length}`, "values", maxSetValues);
  }
  const bytes = encodedSize(values, "values", 1, "values");
  // Only a key is followed by a colon in JSON text: a "$blob" key anywhere inside.
  if (JSON.stringify(values).includes('"$blob":')) {
    throw new InvalidOpError('values must not hold file references ({"$blob": …}); set a file with a patch', "values");
  }
  if (bytes > maxDataBytes) throw new InvalidOpError(`values are ${bytes} bytes, more than ${maxDataBytes}`, "values", maxDataBytes);
}

const maxFieldNameLength = 256;
const maxSetValues = 1000;

function refuse(path: string, problem: string, limit: number | null = null, field = "data"): never {
  throw new InvalidOpError(`${path} ${problem}`, field, limit);
}

/**
 * The bytes of `value` as the server writes it (compact JSON), checking on the way that it
 * is JSON the server takes: no NaN or infinity, no `Date` or other object of a class, no
 * NUL or half a surrogate pair, well-formed file references, nested no deeper than the limit.
 */
function encodedSize(value: unknown, path: string, depth: number, field = "data"): number {
  switch (typeof value) {
    case "boolean": return value ? 4 : 5;
    case "number":
      if (!Number.isFinite(value)) refuse(path, "is not a finite number; JSON has no NaN or infinity", null, field);
      return numberSize(value);
    case "string": return stringSize(value, path, field);
    case "object": break;
    default: refuse(path, `is ${value === undefined ? "undefined" : `a ${typeof value}`}, which JSON cannot hold (remove the field, or set it to null)`, null, field);
  }
  if (value === null) return 4;
  if (depth > maxDataDepth) refuse(field, `nests more than ${maxDataDepth} levels of objects and arrays`, maxDataDepth, field);
  if (Array.isArray(value)) {
    let size = 1 + Math.max(value.length - 1, 0) + 1;
    for (let index = 0; index < value.length; index++) size += encodedSize(value[index], `${path}[${index}]`, depth + 1, field);
    return size;
  }
  if (!isPlainObject(value)) {
    const kind = value instanceof Date ? "a Date (store date.toISOString() or date.getTime())" : `an instance of ${value.constructor?.name ?? "a class"}`;
    refuse(path, `is ${kind}, not a plain object`, null, field);
  }
  if ("$blob" in value && blobRefOf(value as never) === null) {
    refuse(`${path}.$blob`, "must be a file reference: {\"sha256\": 64 lowercase hex digits, \"size\": bytes, \"content_type\": a media type}, alone in its object");
  }
  const keys = Object.keys(value);
  let size = 1 + Math.max(keys.length - 1, 0) + 1;
  for (const key of keys) size += stringSize(key, `${path} (a field name)`, field) + 1 + encodedSize(value[key], `${path}.${key}`, depth + 1, field);
  return size;
}

/** The server's escapes: `\"`, `\\`, `\n`, `\r`, `\t` take two bytes, other control characters six; the rest is UTF-8. */
function stringSize(text: string, path: string, field = "data"): number {
  if (text.includes("\u0000")) refuse(path, "must not contain the NUL character (\\u0000)", null, field);
  if (loneSurrogate.test(text)) refuse(path, "holds half of a surrogate pair, which is not text", null, field);
  let size = 2 + utf8.encode(text).length;
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    if (code === 0x22 || code === 0x5c || code === 0x0a || code === 0x0d || code === 0x09) size += 1;
    else if (code < 0x20) size += 5;
  }
  return size;
}

/**
 * A number's length as the server writes it. It reads an integer that fits 64 bits as one;
 * any other number is a double, written as the shortest digits that read back, in
 * exponent form (`1e-07`, `1e+19`) below 1e-4 and from 1e16.
 */
function numberSize(value: number): number {
  const text = JSON.stringify(value);
  if (/^-?\d+$/.test(text) && BigInt(text) <= 9_223_372_036_854_775_807n && BigInt(text) >= -9_223_372_036_854_775_808n) return text.length;
  if (Number.isInteger(value) && Math.abs(value) < 1e15) return String(value).length;
  const [mantissa, exponentText] = value.toExponential().split("e");
  const exponent = Number(exponentText);
  if (exponent >= -4 && exponent < 16) return text.length;
  return mantissa.length + 2 + Math.max(String(Math.abs(exponent)).length, 2);
}
