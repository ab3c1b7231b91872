// @syncline/web: the browser client of Syncline. This is its whole public API; the modules
// behind it are internal. React bindings: "@syncline/web/react".
export { createClient } from "./client.js";
export type { ClientOptions, LocalRecord, Query, SetAsideOp, SyncClient, SyncStatus } from "./client.js";
export type { Invitation, Member, Role, Space } from "./spaces.js";
export type { Collection, Patch } from "./collection.js";
export type { SyncEventMap, SyncEventName, SyncEvents } from "./events.js";
export type { AuthState, TokenRefusal } from "./signin.js";
export { schema, SchemaError } from "./schema.js";
export type { Infer, ObjectOf, Schema } from "./schema.js";
export { QueryError } from "./query.js";
export type { Condition, FieldPath, OrderBy, QueryOptions, ValueAt, Where } from "./query.js";
export { InvalidOpError } from "./validation.js";
export { SignedOutError, StorageBlockedError } from "./database.js";
export { SpaceGoneError } from "./store.js";
export { blobValue } from "./blobs.js";
export type { BlobRef, BlobValue } from "./blobs.js";
export type { JSONObject, JSONValue } from "./json.js";
export type { OpType, RecordView } from "./op.js";
