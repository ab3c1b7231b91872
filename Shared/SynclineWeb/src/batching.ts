import { wireOp, type Op } from "./op.js";

/** The most ops a push may carry. */
export const maxOpsPerPush = 500;
/** The most bytes a push body may have. */
export const maxPushBytes = 1_048_576;

const encoder = new TextEncoder();

/** The push body for `ops`, as it is stored with its batch before it is sent. */
export function pushBody(deviceID: string, ops: Op[], spaceID?: string): string {
  const sent = ops.map(wireOp);
  return JSON.stringify(spaceID ? { device_id: deviceID, ops: sent, space_id: spaceID } : { device_id: deviceID, ops: sent });
}

/**
 * How many of `ops` (in queue order) the next push takes: as many as fit in `maxOps` and a
 * body of `maxBytes` — at least one, so an op that alone exceeds the limit is sent and
 * refused by the server (413, then set aside) instead of blocking the queue.
 */
export function batchSize(deviceID: string, ops: Op[], maxBytes = maxPushBytes, maxOps = maxOpsPerPush, spaceID?: string): number {
  const overhead = encoder.encode(pushBody(deviceID, [], spaceID)).length;
  let bytes = overhead;
  let count = 0;
  for (const op of ops.slice(0, maxOps)) {
    const size = encoder.encode(JSON.stringify(wireOp(op))).length + (count > 0 ? 1 : 0);
    if (count > 0 && bytes + size > maxBytes) break;
    bytes += size;
    count += 1;
  }
  return count;
}

/** The byte limit after a 413: half, but never under 1 KiB. */
export function halved(maxBytes: number): number {
  return Math.max(1_024, Math.floor(maxBytes / 2));
}

/**
 * The W3C `traceparent` a push is sent with: the trace id is the batch's idempotency key (a
 * UUID, so every retry of the batch is in the same trace); each attempt is a span of its own.
 */
export function traceparent(batchKey: string): { traceID: string; header: string } {
  const hex = (bytes: Uint8Array) => Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
  const fromKey = batchKey.toLowerCase().replace(/[^0-9a-f]/g, "");
  const traceID = fromKey.length === 32 && /[1-9a-f]/.test(fromKey) ? fromKey : hex(crypto.getRandomValues(new Uint8Array(16)));
  let spanID = hex(crypto.getRandomValues(new Uint8Array(8)));
  if (spanID === "0000000000000000") spanID = "0000000000000001";
  return { traceID, header: `00-${traceID}-${spanID}-01` };
}

/** The jobs of `batches` whose push holds an increment, add or remove of one of `keys`. */
export function jobsMerging(batches: { body: string; job_id: string | null }[], keys: { collection: string; id: string }[]): string[] {
  const wanted = new Set(keys.map((key) => JSON.stringify([key.collection, key.id])));
  return batches.filter((batch) => batch.job_id && (JSON.parse(batch.body).ops as Op[])
    .some((op) => op.field !== undefined && wanted.has(JSON.stringify([op.collection, op.id])))).map((batch) => batch.job_id as string);
}
