import { batchSize, jobsMerging, pushBody } from "./batching.js";
import type { BlobRef } from "./blobs.js";
import { request } from "./idb.js";
import type { JobOutcome, LocalSync, SettledJobs } from "./local.js";
import type { Op, RecordView } from "./op.js";
import { OutboxWriter, unconfirmed, type OutboxEntry } from "./outbox.js";
import { all, LocalStore, type Batch, type Changed, type Key, type LocalBlob, type RecordRow, type ServerCopy } from "./store.js";

/**
 * The store's steps that take the server's answers in (`LocalSync` over IndexedDB): push
 * batches formed and answered, jobs' outcomes, pulled pages, and files' uploads. Each is
 * one transaction of the `LocalStore`'s, with the same guarantees; only the sync engine
 * takes them, so they load with it.
 */
export class SyncSteps implements LocalSync {
  constructor(readonly store: LocalStore) {}

  meta<T>(key: string): Promise<T | undefined> {
    return this.store.meta<T>(key);
  }

  setMeta(key: string, value: unknown): Promise<void> {
    return this.store.setMeta(key, value);
  }

  setAside(): Promise<OutboxEntry[]> {
    return this.store.setAside();
  }

  async pendingOps(): Promise<number> {
    return (await this.store.status()).pending;
  }

  hasFilesToSettle(): Promise<boolean> {
    return this.store.hasFilesToSettle();
  }

  pendingBlobs(): Promise<LocalBlob[]> {
    return this.store.pendingBlobs();
  }

  // MARK: - Push

  /** The batch to send: one formed earlier and not yet answered, else a new one of the oldest pending ops. */
  async nextBatch(deviceID: string, maxOps: number, maxBytes: number, spaceID?: string): Promise<Batch | null> {
    return this.store.run(["outbox", "batches", "blobs"], "readwrite", async (tx) => {
      const batches = (await request(tx.objectStore("batches").getAll())) as Batch[];
      const open = batches.find((batch) => batch.job_id === null);
      if (open) return open;
      const outbox = tx.objectStore("outbox");
      // The oldest first: an index keeps rows of one key in primary-key (seq) order.
      let waiting = (await request(outbox.index("state").getAll("pending", maxOps))) as OutboxEntry[];
      // An op waits for its files: the batch ends before the first op referencing one not
      // uploaded yet (order is kept).
      const files = tx.objectStore("blobs");
      for (let i = 0; i < waiting.length; i++) {
        const states = await Promise.all((waiting[i].blobs ?? []).map((sha) => request(files.get(sha)) as Promise<LocalBlob | undefined>));
        if (states.some((file) => file !== undefined && file.state !== "stored")) {
          waiting = waiting.slice(0, i);
          break;
        }
      }
      const chosen = waiting.slice(0, batchSize(deviceID, waiting.map((entry) => entry.op), maxBytes, maxOps, spaceID));
      if (chosen.length === 0) return null;
      const ops = chosen.map((entry) => entry.op);
      const batch: Batch = {
        batch_id: crypto.randomUUID(), key: crypto.randomUUID(), body: pushBody(deviceID, ops, spaceID),
        op_ids: chosen.map((entry) => entry.op_id), job_id: null,
      };
      tx.objectStore("batches").put(batch);
      for (const entry of chosen) OutboxWriter.of(tx).put(entry, { ...entry, state: "batched", batch_id: batch.batch_id });
      return batch;
    });
  }

  /** The server took the batch as `jobID`. */
  async batchAccepted(batch: Batch, jobID: string): Promise<void> {
    await this.store.run(["outbox", "batches"], "readwrite", async (tx) => {
      tx.objectStore("batches").put({ ...batch, job_id: jobID });
      for (const entry of (await request(tx.objectStore("outbox").index("batch_id").getAll(batch.batch_id))) as OutboxEntry[]) {
        OutboxWriter.of(tx).put(entry, { ...entry, state: "sent", job_id: jobID });
      }
    });
  }

  /** The server refused the batch: op `index` (every op when null) is set aside with `reason`; the others go back to the queue. */
  async batchRefused(batch: Batch, index: number | null, reason: string): Promise<string[]> {
    return this.store.run(all, "readwrite", async (tx) => {
      const aside = index !== null && index < batch.op_ids.length ? [batch.op_ids[index]] : batch.op_ids;
      const entries = (await request(tx.objectStore("outbox").index("batch_id").getAll(batch.batch_id))) as OutboxEntry[];
      for (const entry of entries) {
        const refused = aside.includes(entry.op_id);
        OutboxWriter.of(tx).put(entry, { ...entry, state: refused ? "set_aside" : "pending", reason: refused ? reason : null, batch_id: null });
      }
      tx.objectStore("batches").delete(batch.batch_id);
      await this.store.refreshOps(tx, entries.filter((entry) => aside.includes(entry.op_id)));
      return aside;
    });
  }

  async setAsideRefused(refuse: (op: Op) => string | null): Promise<{ opID: string; reason: string }[]> {
    return this.store.run(all, "readwrite", async (tx) => {
      const waiting = (await request(tx.objectStore("outbox").index("state").getAll("pending"))) as OutboxEntry[];
      const aside: { opID: string; reason: string }[] = [];
      const refused: OutboxEntry[] = [];
      for (const entry of waiting) {
        const reason = refuse(entry.op);
        if (reason === null) continue;
        OutboxWriter.of(tx).put(entry, { ...entry, state: "set_aside", reason, batch_id: null });
        aside.push({ opID: entry.op_id, reason });
        refused.push(entry);
      }
      await this.store.refreshOps(tx, refused);
      return aside;
    });
  }

  /** Takes a batch apart without setting anything aside (to form smaller ones). */
  async batchDissolved(batch: Batch): Promise<void> {
    await this.store.run(["outbox", "batches"], "readwrite", async (tx) => {
      for (const entry of (await request(tx.objectStore("outbox").index("batch_id").getAll(batch.batch_id))) as OutboxEntry[]) {
        OutboxWriter.of(tx).put(entry, { ...entry, state: "pending", batch_id: null });
      }
      tx.objectStore("batches").delete(batch.batch_id);
    });
  }

  /** Jobs sent and not yet finished. */
  async sentJobs(): Promise<string[]> {
    // From the batches, not the outbox: a batch keeps its job until the job ends, and there
    // are a handful of batches where there may be thousands of ops (this runs every poll).
    return this.store.run(["batches"], "readonly", async (tx) => {
      const batches = (await request(tx.objectStore("batches").getAll())) as Batch[];
      return [...new Set(batches.map((batch) => batch.job_id).filter((job): job is string => !!job))];
    });
  }

  async sentJobsMerging(keys: Key[]): Promise<string[]> {
    const batches = await this.store.run(["batches"], "readonly", async (tx) => (await request(tx.objectStore("batches").getAll())) as Batch[]);
    return jobsMerging(batches, keys);
  }

  /**
   * Jobs whose outcome is known, in one transaction. A succeeded job's applied, superseded
   * and duplicate ops wait for a pull to reach the checkpoint; its conflicting and rejected
   * ones leave (the server did not apply them); an op the results do not name was applied
   * (an untroubled job's outcome heard on the stream comes without results). A dead (or
   * discarded) job's ops are set aside; a forgotten job's go back to the queue (applied ones
   * answer `duplicate` next time). Each job's batch is no longer one to send or poll.
   */
  async jobsSettled(outcomes: JobOutcome[]): Promise<SettledJobs> {
    return this.store.run(all, "readwrite", async (tx) => {
      const outbox = OutboxWriter.of(tx);
      const byJob = tx.objectStore("outbox").index("job_id");
      const [batches, ...entriesOfJobs] = await Promise.all([
        request(tx.objectStore("batches").getAll()) as Promise<Batch[]>,
        ...outcomes.map((outcome) => request(byJob.getAll(outcome.jobID)) as Promise<OutboxEntry[]>),
      ]);
      const settled: SettledJobs = { refused: [], dead: [], changed: [] };
      const touched: OutboxEntry[] = [];
      outcomes.forEach((outcome, index) => {
        const entries = entriesOfJobs[index];
        if (outcome.status === "succeeded") {
          const byOp = new Map(outcome.results.map((result) => [result.op_id, result]));
          for (const entry of entries) {
            const result = byOp.get(entry.op_id);
            if (result && (result.status === "conflict" || result.status === "rejected")) {
              settled.refused.push(result);
              outbox.delete(entry);
            } else if (entry.state === "sent") {
              const version = result ? (result.status === "applied" ? result.version ?? null : 0) : null;
              outbox.put(entry, { ...entry, state: "confirmed", checkpoint: outcome.checkpoint, applied_version: version });
            }
          }
          touched.push(...entries);
        } else if (outcome.status === "dead") {
          const sent = entries.filter((entry) => entry.state === "sent");
          for (const entry of sent) outbox.put(entry, { ...entry, state: "set_aside", reason: outcome.reason });
          settled.dead.push({ jobID: outcome.jobID, opIDs: sent.map((entry) => entry.op_id) });
          touched.push(...sent);
        } else {
          for (const entry of entries) {
            if (entry.state === "sent") outbox.put(entry, { ...entry, state: "pending", job_id: null, batch_id: null });
          }
        }
      });
      const jobs = new Set(outcomes.map((outcome) => outcome.jobID));
      for (const batch of batches) if (batch.job_id !== null && jobs.has(batch.job_id)) tx.objectStore("batches").delete(batch.batch_id);
      settled.changed = await this.store.refreshOps(tx, touched);
      return settled;
    });
  }

  /**
   * The space went away (deleted, or this user is no longer a member): its records, outbox
   * and cursor go with it; the device identity stays. Returns the ops the server never
   * confirmed — edits that are lost.
   */
  async forgetSpace(): Promise<string[]> {
    return this.store.run(all, "readwrite", async (tx) => {
      const entries = (await request(tx.objectStore("outbox").getAll())) as OutboxEntry[];
      const lost = entries.filter((entry) => unconfirmed.includes(entry.state)).sort((a, b) => (a.seq ?? 0) - (b.seq ?? 0)).map((entry) => entry.op_id);
      for (const store of ["records", "batches", "blobs"]) tx.objectStore(store).clear();
      OutboxWriter.of(tx).clear();
      const meta = tx.objectStore("meta");
      for (const key of ["cursor", "resync", "generation"]) meta.delete(key);
      meta.put(true, "gone");
      return lost;
    });
  }

  async addDownloadedBlob(ref: BlobRef, blob: Blob, now: number): Promise<void> {
    await this.store.run(["blobs"], "readwrite", async (tx) => {
      const file: LocalBlob = { ...ref, state: "stored", blob, upload_url: null, reason: null, last_used: now };
      tx.objectStore("blobs").put(file);
    });
  }

  async setUploadURL(sha256: string, url: string | null): Promise<void> {
    await this.store.updateBlob(sha256, (file) => ({ ...file, upload_url: url }));
  }

  async blobUploaded(sha256: string): Promise<void> {
    await this.store.updateBlob(sha256, (file) => ({ ...file, state: "stored", upload_url: null }));
  }

  /**
   * The server refused the file (`sha256`, when given): every pending op that references a
   * refused file is set aside with its reason. Returns them.
   */
  async blobsRefused(sha256: string | null, reason: string): Promise<{ opID: string; reason: string }[]> {
    // Every sync pass asks: a read answers when no file was refused, as is usual.
    if (sha256 === null) {
      const refused = await this.store.run(["blobs"], "readonly", (tx) => request(tx.objectStore("blobs").index("state").count("refused")));
      if (refused === 0) return [];
    }
    return this.store.run(all, "readwrite", async (tx) => {
      const files = tx.objectStore("blobs");
      if (sha256) {
        const file = (await request(files.get(sha256))) as LocalBlob | undefined;
        if (file) files.put({ ...file, state: "refused", reason, upload_url: null });
      }
      const refused = new Map(((await request(files.index("state").getAll("refused"))) as LocalBlob[]).map((file) => [file.sha256, file.reason ?? reason]));
      const aside: OutboxEntry[] = [];
      for (const entry of (await request(tx.objectStore("outbox").index("state").getAll("pending"))) as OutboxEntry[]) {
        const hit = (entry.blobs ?? []).find((sha) => refused.has(sha));
        if (!hit) continue;
        const why = refused.get(hit)!;
        OutboxWriter.of(tx).put(entry, { ...entry, state: "set_aside", reason: why });
        aside.push({ ...entry, reason: why });
      }
      await this.store.refreshOps(tx, aside);
      return aside.map((entry) => ({ opID: entry.op_id, reason: entry.reason ?? reason }));
    });
  }

  /** The server lacks a file an op references (409 `blob_missing`): uploaded again when this device holds it. */
  async blobMissing(sha256: string): Promise<boolean> {
    return this.store.run(["blobs"], "readwrite", async (tx) => {
      const files = tx.objectStore("blobs");
      const file = (await request(files.get(sha256))) as LocalBlob | undefined;
      if (!file || file.state === "refused") return false;
      files.put({ ...file, state: "pending", upload_url: null });
      return true;
    });
  }

  /** Drops the least recently used stored files until they take at most `maxBytes` (files waiting to be uploaded stay). */
  async evictBlobs(maxBytes: number): Promise<string[]> {
    return this.store.run(["blobs"], "readwrite", async (tx) => {
      const files = tx.objectStore("blobs");
      const stored = ((await request(files.index("state").getAll("stored"))) as LocalBlob[]).sort((a, b) => b.last_used - a.last_used);
      let kept = 0;
      const gone: string[] = [];
      for (const file of stored) {
        if (kept + file.size <= maxBytes) kept += file.size;
        else gone.push(file.sha256);
      }
      for (const sha of gone) files.delete(sha);
      return gone;
    });
  }

  /** Starts a resync from the beginning, in a new generation; survives a reload midway. */
  async beginResync(): Promise<void> {
    await this.store.run(["meta"], "readwrite", async (tx) => {
      const meta = tx.objectStore("meta");
      const generation = ((await request(meta.get("generation"))) as number | undefined) ?? 0;
      meta.put(generation + 1, "generation");
      meta.put(true, "resync");
      meta.delete("cursor");
    });
  }

  /** Stores one page with its cursor; returns the records that changed on screen. */
  async applyPage(changes: RecordView[], cursor: string, hasMore: boolean): Promise<Changed[]> {
    return this.store.run(all, "readwrite", async (tx) => {
      const meta = tx.objectStore("meta"), records = tx.objectStore("records"), outbox = tx.objectStore("outbox");
      const [stored, clock, entries, resync] = await Promise.all([
        request(meta.get("generation")) as Promise<number | undefined>,
        LocalStore.clock(tx),
        request(outbox.getAll()) as Promise<OutboxEntry[]>,
        request(meta.get("resync")),
      ]);
      const generation = stored ?? 0;
      const touched = new Map<string, Key>();
      const touch = (key: Key) => touched.set(JSON.stringify([key.collection, key.id]), { collection: key.collection, id: key.id });
      // What the server holds now, for the records this page (or the end of a resync) settles.
      const settled = new Map<string, ServerCopy | null>();
      for (const change of changes) {
        if (change.hlc) clock.observe(change.hlc);
        touch(change);
        settled.set(JSON.stringify([change.collection, change.id]), { view: change, generation });
      }
      LocalStore.saveClock(tx, clock);
      meta.put(cursor, "cursor");
      // Confirmed ops leave once the pull reaches their checkpoint.
      const left = new Set<number>();
      for (const entry of entries) {
        if (entry.state === "confirmed" && (entry.checkpoint ?? 0) <= Number(cursor)) {
          OutboxWriter.of(tx).delete(entry);
          left.add(entry.seq!);
          touch(entry);
        }
      }
      // The end of a resync: records of older generations were not pulled again, so are gone
      // (this page's rows are written below, so they are read here as they were before it).
      if (!hasMore && resync) {
        // Once per resync, so a read of every row rather than an index written on every pull.
        const stale = ((await request(records.getAll())) as RecordRow[]).filter((row) => row.server && (row.generation ?? 0) < generation);
        for (const row of stale) {
          if (settled.has(JSON.stringify([row.collection, row.id]))) continue;
          touch(row);
          settled.set(JSON.stringify([row.collection, row.id]), null);
        }
        meta.delete("resync");
      }
      // The records with local edits, from the outbox read once: every other settled record shows as the server has it.
      const edited = new Map<string, OutboxEntry[]>();
      for (const entry of entries) {
        if (left.has(entry.seq!)) continue;
        const name = JSON.stringify([entry.collection, entry.id]);
        edited.set(name, [...(edited.get(name) ?? []), entry]);
      }
      const result: Changed[] = [];
      for (const [name, key] of touched) {
        const copy = settled.get(name);
        const row = copy !== undefined ? this.store.show(tx, key, copy, edited.get(name) ?? []) : await this.store.refresh(tx, key);
        result.push({ ...key, row });
      }
      return result;
    });
  }
}
