// A record as the app sees it, made from what the store shows.
import type { JSONObject } from "./json.js";
import type { ShownRecord } from "./store.js";

/** A record as the app sees it. */
export interface LocalRecord<T = JSONObject> {
  collection: string;
  id: string;
  data: T;
  version: number;
  hasPendingEdits: boolean;
  /** Why the server refused an edit of it, while that edit waits in `setAside()`. */
  setAsideReason: string | null;
  visibility: "private" | "unlisted" | "public";
  publicID: string | null;
  canFork: boolean;
  forkedFrom: string | null;
}

export function shown<T>(row: ShownRecord): LocalRecord<T> {
  return {
    collection: row.collection, id: row.id, data: row.data as unknown as T, version: row.version, hasPendingEdits: row.pending,
    setAsideReason: row.set_aside_reason, visibility: row.visibility, publicID: row.public_id, canFork: row.can_fork, forkedFrom: row.forked_from,
  };
}
