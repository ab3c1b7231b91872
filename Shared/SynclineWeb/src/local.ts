import type { BlobRef } from "./blobs.js";
import type { Op, RecordView } from "./op.js";
import type { OutboxEntry } from "./outbox.js";
import type { Batch, Changed, LocalBlob } from "./store.js";

/** An op's result as a job reports it. */
export interface ReportedResult {
  op_id: string;
  status: string;
  /** `applied`: the version the op took. */
  version?: number;
  reason?: string;
  current?: unknown;
}

/** What became of one of this device's jobs, as the server (or its stream) told. */
export type JobOutcome =
  | { jobID: string; status: "succeeded"; checkpoint: number; results: ReportedResult[] }
  | { jobID: string; status: "dead"; reason: string }
  /** The server no longer knows the job. */
  | { jobID: string; status: "forgotten" };

/** What settling jobs did: the ops that left (refused), each dead job's ops set aside, and what shows now for the records touched. */
export interface SettledJobs {
  refused: ReportedResult[];
  dead: { jobID: string; opIDs: string[] }[];
  changed: Changed[];
}

/**
 * The device's database as the sync engine and the file transfers use it: each method is
 * one step that reads what to send or takes a server's answer in, all or nothing (in the
 * browser, one IndexedDB transaction: `SyncSteps`). The engine knows nothing else of the
 * database, so Node tests run it over a small in-memory implementation.
 */
export interface LocalSync {
  meta<T>(key: string): Promise<T | undefined>;
  setMeta(key: string, value: unknown): Promise<void>;
  /** How many ops wait to be confirmed. */
  pendingOps(): Promise<number>;

  // Push
  /** The batch to send: one formed earlier and not yet answered, else a new one of the oldest pending ops. */
  nextBatch(deviceID: string, maxOps: number, maxBytes: number, spaceID?: string): Promise<Batch | null>;
  /** The server took the batch as `jobID`. */
  batchAccepted(batch: Batch, jobID: string): Promise<void>;
  /** The server refused the batch: op `index` (every op when null) is set aside with `reason`; the others go back to the queue. Returns the ops set aside. */
  batchRefused(batch: Batch, index: number | null, reason: string): Promise<string[]>;
  /** Takes a batch apart without setting anything aside (to form smaller ones). */
  batchDissolved(batch: Batch): Promise<void>;
  /** The ops set aside, oldest first. */
  setAside(): Promise<OutboxEntry[]>;
  /** Sets aside every op still waiting to be sent that `refuse` gives a reason for (new rules refuse it); returns them. */
  setAsideRefused(refuse: (op: Op) => string | null): Promise<{ opID: string; reason: string }[]>;

  // Jobs
  /** Jobs sent and not yet finished. */
  sentJobs(): Promise<string[]>;
  /** Jobs sent and not yet finished that hold an increment, add or remove of one of `keys` (records of a pulled page). */
  sentJobsMerging(keys: { collection: string; id: string }[]): Promise<string[]>;
  /**
   * Jobs whose outcome is known, settled together (one step): a succeeded job's ops wait
   * for the pull (its conflicting and rejected ones leave), a dead one's are set aside, a
   * forgotten one's go back to the queue.
   */
  jobsSettled(outcomes: JobOutcome[]): Promise<SettledJobs>;

  // Pull
  /** Starts a resync from the beginning. */
  beginResync(): Promise<void>;
  /** Stores one page with its cursor; returns the records that changed on screen. */
  applyPage(changes: RecordView[], cursor: string, hasMore: boolean): Promise<Changed[]>;
  /** The space went away: its records, outbox and cursor go. Returns the ops never confirmed (lost edits). */
  forgetSpace(): Promise<string[]>;

  // Files
  /** Whether files wait to be uploaded, or to have their ops set aside. */
  hasFilesToSettle(): Promise<boolean>;
  /** The files waiting to be uploaded, the least recently used first. */
  pendingBlobs(): Promise<LocalBlob[]>;
  setUploadURL(sha256: string, url: string | null): Promise<void>;
  blobUploaded(sha256: string): Promise<void>;
  /** The server refused the file (`sha256`, when given): the pending ops referencing a refused file are set aside; returns them. */
  blobsRefused(sha256: string | null, reason: string): Promise<{ opID: string; reason: string }[]>;
  /** The server lacks a file an op references: true when this device holds it, to upload again. */
  blobMissing(sha256: string): Promise<boolean>;
  addDownloadedBlob(ref: BlobRef, blob: Blob, now: number): Promise<void>;
  /** Drops the least recently used stored files until they take at most `maxBytes`; returns those dropped. */
  evictBlobs(maxBytes: number): Promise<string[]>;
}
