import type { JSONValue } from "./json.js";

/**
 * A file referenced from record data, as `{"$blob": BlobRef}` anywhere in it (`blobValue`
 * makes that value). Files are stored by content: `sha256` is the hash of their bytes.
 */
export interface BlobRef {
  sha256: string;
  size: number;
  content_type: string;
}

const sha256Pattern = /^[0-9a-f]{64}$/;
const token = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** Whether `text` is a media type a file can be kept with (`type/subtype`, parameters allowed). */
export function isContentType(text: string): boolean {
  if (text.length < 3 || text.length > 255 || !/^[\x20-\x7e]*$/.test(text)) return false;
  const parts = text.split(";", 1)[0].trim().split("/");
  return parts.length === 2 && token.test(parts[0]) && token.test(parts[1]);
}

/** The value in record data that references a file (the type of a `schema.file()` field). */
export interface BlobValue {
  $blob: BlobRef;
}

/** The value to put in record data for a file: `{...recipe, photo: blobValue(await client.attach(file))}`. */
export function blobValue(ref: BlobRef): BlobValue {
  return { $blob: { sha256: ref.sha256, size: ref.size, content_type: ref.content_type } };
}

/** The reference `value` holds (`{"$blob": …}`), or null. */
export function blobRefOf(value: JSONValue | undefined): BlobRef | null {
  if (!value || typeof value !== "object" || Array.isArray(value)) return null;
  const keys = Object.keys(value);
  const inner = (value as Record<string, JSONValue>).$blob;
  if (keys.length !== 1 || !inner || typeof inner !== "object" || Array.isArray(inner)) return null;
  const fields = inner as Record<string, JSONValue>;
  if (Object.keys(fields).length !== 3) return null;
  const { sha256, size, content_type } = fields;
  if (typeof sha256 !== "string" || !sha256Pattern.test(sha256)) return null;
  if (typeof size !== "number" || !Number.isInteger(size) || size < 0) return null;
  if (typeof content_type !== "string" || !isContentType(content_type)) return null;
  return { sha256, size, content_type };
}

/** The hashes of the files `value` references, anywhere in it (each once), as the server counts them. */
export function referencedBlobs(value: JSONValue | undefined): string[] {
  const found = new Set<string>();
  const visit = (item: JSONValue | undefined): void => {
    if (!item || typeof item !== "object") return;
    if (Array.isArray(item)) {
      item.forEach(visit);
      return;
    }
    const ref = blobRefOf(item);
    if (ref) {
      found.add(ref.sha256);
      return;
    }
    Object.values(item).forEach(visit);
  };
  visit(value);
  return [...found];
}

/** The SHA-256 of `bytes`, in lowercase hex. */
export async function sha256Hex(bytes: ArrayBuffer): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest, (byte) => byte.toString(16).padStart(2, "0")).join("");
}
