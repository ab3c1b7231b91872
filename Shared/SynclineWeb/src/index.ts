// SynclineWeb: the browser side of Syncline — createClient, and the core it is built on (the
// clock, the merge rules, push batching, backoff, SSE framing).
export { canonicalJSON } from "./json.js";
export type { JSONObject, JSONValue } from "./json.js";
export { ClockState, formatHLC, parseHLC, maxCounter } from "./hlc.js";
export type { HLC } from "./hlc.js";
export type { Op, OpType, RecordView } from "./op.js";
export { RecordState, localMerge, compareStamps, stampOf } from "./merge.js";
export type { PublicVisibility, Stamp } from "./merge.js";
export { ServerSentEvents } from "./sse.js";
export { Backoff, retryAfterSeconds } from "./backoff.js";
export { batchSize, halved, maxOpsPerPush, maxPushBytes, pushBody } from "./batching.js";
export { createClient, SyncClient, SpaceGoneError } from "./client.js";
export type { ClientOptions, LocalRecord, Query, SetAsideOp, Space, SyncStatus } from "./client.js";
export { matches, ordered, sortKey, compareKeys } from "./query.js";
export { StorageBlockedError } from "./store.js";
export { InvalidOpError, checkOp, maxDataBytes, maxDataDepth } from "./validation.js";
export type { Condition, QueryOptions, Where } from "./query.js";
export { blobValue, blobRefOf, referencedBlobs, isContentType, sha256Hex } from "./blobs.js";
export type { BlobRef } from "./blobs.js";
