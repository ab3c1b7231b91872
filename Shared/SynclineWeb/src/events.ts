import type { RecordView } from "./op.js";
import type { TokenRefusal } from "./signin.js";

/** What each of `client.events` says, by name (each is a `CustomEvent` whose `detail` is this). */
export interface SyncEventMap {
  /** The server did not apply an edit: its `if_version` was stale. `current` is the record as it is. */
  conflict: { opID: string; reason?: string; current?: RecordView };
  /** The server did not apply an edit (`reason`: `public_id_taken`, `not_found`, `not_forkable`, `forbidden`, `stale`, …). */
  rejected: { opID: string; reason?: string; current?: RecordView };
  /** The server refused an edit; it waits in `setAside()` for `retry` or `drop`. */
  setAside: { opID: string; reason: string };
  /** A job failed for good: its edits were set aside. */
  jobDead: { jobID: string; opIDs: string[] };
  /** A page of changes was pulled and stored. */
  pulled: { cursor: string };
  /** The server could no longer serve changes since this device's cursor: a full pull began, keeping edits not yet sent. */
  resync: undefined;
  /** The browser deleted this database while in use: it starts over with a full pull. */
  storageReset: { databaseName: string };
  /** The browser refused to store an edit (quota): the write rejected. */
  storageFull: { opID: string };
  /** The space went away with edits of this device not applied. */
  editsLost: { spaceID: string | undefined; opIDs: string[] };
  /** The space was deleted, or this user removed from it: its local data went with it. */
  spaceGone: { spaceID: string | undefined };
  /**
   * The server refused this device's token, a fresh one too: the app should sign the user
   * in again (`reason`: `expired`, `invalid` or `missing`). Told once, until a token is
   * taken again; `status().auth` is `refused` meanwhile.
   */
  unauthorized: { reason: TokenRefusal; detail: string };
  /** This device signed out, in this tab or another (`wiped`: its data was deleted, and the client can no longer be used). */
  signedOut: { wiped: boolean };
  uploaded: { sha256: string };
  uploadRefused: { sha256: string; reason: string };
  uploadProgress: { sha256: string; sent: number; total: number };
}

export type SyncEventName = keyof SyncEventMap;

/** `client.events`: an `EventTarget` whose listeners know each event's `detail`. */
export interface SyncEvents extends EventTarget {
  addEventListener<K extends SyncEventName>(type: K, listener: (event: CustomEvent<SyncEventMap[K]>) => void, options?: boolean | AddEventListenerOptions): void;
  addEventListener(type: string, listener: EventListenerOrEventListenerObject | null, options?: boolean | AddEventListenerOptions): void;
  removeEventListener<K extends SyncEventName>(type: K, listener: (event: CustomEvent<SyncEventMap[K]>) => void, options?: boolean | EventListenerOptions): void;
  removeEventListener(type: string, listener: EventListenerOrEventListenerObject | null, options?: boolean | EventListenerOptions): void;
}
