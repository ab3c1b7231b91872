// Date-times in record data as the device shows and compares them (the Swift client's
// rule, held to it by the conformance vectors): every RFC 3339 date-time, whoever wrote it
// and with whatever offset, is the same instant in UTC with milliseconds — the form both
// clients write — so that text order is time order.
import type { JSONValue } from "./json.js";

const dateTime = /^(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(?:[Zz]|([+-])(\d\d):(\d\d))$/;

/** `text` as the same instant in UTC with milliseconds when it is a valid RFC 3339 date-time, else `text`. */
export function utcDateTime(text: string): string {
  const parts = text.length >= 20 && text.length <= 40 && text[4] === "-" ? dateTime.exec(text) : null;
  if (!parts) return text;
  const [year, month, day, hour, minute, second, , , offsetHours, offsetMinutes] = parts.slice(1).map(Number);
  const instant = new Date(0);
  instant.setUTCFullYear(year, month - 1, day);
  // February 30 rolls over into March: not a date.
  if (instant.getUTCMonth() !== month - 1 || instant.getUTCDate() !== day || year < 1 || hour > 23 || minute > 59 || second > 59 || offsetHours > 15 || offsetMinutes > 59) return text;
  instant.setUTCHours(hour, minute, second, Number(((parts[7] ?? "") + "00").slice(0, 3)));
  const ms = instant.getTime() - (parts[8] === "-" ? -1 : 1) * ((offsetHours || 0) * 60 + (offsetMinutes || 0)) * 60_000;
  // An offset can carry 0001-01-01 or 9999-12-31 across a year boundary: clamped, as PostgreSQL's range is.
  return new Date(Math.min(Math.max(ms, -62_135_596_800_000), 253_402_300_799_999)).toISOString();
}

/** A record's data (any value in it) with its date-times in UTC (see `utcDateTime`). */
export function datesInUTC<T extends JSONValue>(value: T): T {
  if (typeof value === "string") return utcDateTime(value) as T;
  if (Array.isArray(value)) return value.map(datesInUTC) as T;
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, datesInUTC(item)])) as T;
  }
  return value;
}
