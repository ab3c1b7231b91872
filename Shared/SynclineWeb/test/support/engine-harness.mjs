// What the sync engine's Node tests run it over: the device's database in memory
// (`MemoryLocal`, the `LocalSync` interface IndexedDB serves in the browser), a gateway
// answering from a script through `fetch`, and an engine host that records what the app
// would hear.
import { batchSize, jobsMerging, pushBody } from "../../dist/batching.js";
import { SyncEngine } from "../../dist/engine.js";
import { SignIn } from "../../dist/signin.js";
import { unconfirmed } from "../../dist/outbox.js";

/** The device's database in memory: the outbox's states and the batches as IndexedDB keeps them (outbox.ts, syncsteps.ts). */
export class MemoryLocal {
  values = new Map();
  outbox = [];
  batches = new Map();
  records = new Map();
  /** Files by hash: `{ sha256, size, content_type, state, blob, upload_url, reason, last_used }`. */
  files = new Map();
  #seq = 0;

  /** Queues an upsert (referencing the files `blobs`, by hash); returns its op id. */
  enqueue(collection, id, data, blobs = []) {
    const op = { op_id: crypto.randomUUID(), type: "upsert", collection, id, data };
    this.outbox.push({ op_id: op.op_id, op, collection, id, blobs, state: "pending", batch_id: null, job_id: null, reason: null, checkpoint: null, seq: ++this.#seq });
    return op.op_id;
  }

  /** Keeps a file of this device's, waiting to be uploaded. */
  attach(sha256, blob, contentType = "application/octet-stream") {
    this.files.set(sha256, { sha256, size: blob.size, content_type: contentType, state: "pending", blob, upload_url: null, reason: null, last_used: this.files.size });
  }

  async setAside() {
    return this.outbox.filter((entry) => entry.state === "set_aside");
  }

  inState(state) {
    return this.outbox.filter((entry) => entry.state === state).map((entry) => entry.op_id);
  }

  async meta(key) { return this.values.get(key); }
  async setMeta(key, value) { this.values.set(key, value); }
  async pendingOps() { return this.outbox.filter((entry) => unconfirmed.includes(entry.state)).length; }

  async nextBatch(deviceID, maxOps, maxBytes, spaceID) {
    const open = [...this.batches.values()].find((batch) => batch.job_id === null);
    if (open) return open;
    let waiting = this.outbox.filter((entry) => entry.state === "pending").slice(0, maxOps);
    // An op waits for its files: the batch ends before the first op referencing one not uploaded yet.
    const held = waiting.findIndex((entry) => entry.blobs.some((sha) => this.files.has(sha) && this.files.get(sha).state !== "stored"));
    if (held >= 0) waiting = waiting.slice(0, held);
    const chosen = waiting.slice(0, batchSize(deviceID, waiting.map((entry) => entry.op), maxBytes, maxOps, spaceID));
    if (chosen.length === 0) return null;
    const batch = {
      batch_id: crypto.randomUUID(), key: crypto.randomUUID(), body: pushBody(deviceID, chosen.map((entry) => entry.op), spaceID),
      op_ids: chosen.map((entry) => entry.op_id), job_id: null,
    };
    this.batches.set(batch.batch_id, batch);
    for (const entry of chosen) Object.assign(entry, { state: "batched", batch_id: batch.batch_id });
    return batch;
  }

  async batchAccepted(batch, jobID) {
    this.batches.set(batch.batch_id, { ...batch, job_id: jobID });
    for (const entry of this.#ofBatch(batch)) Object.assign(entry, { state: "sent", job_id: jobID });
  }

  async batchRefused(batch, index, reason) {
    const aside = index !== null && index < batch.op_ids.length ? [batch.op_ids[index]] : batch.op_ids;
    for (const entry of this.#ofBatch(batch)) {
      const refused = aside.includes(entry.op_id);
      Object.assign(entry, { state: refused ? "set_aside" : "pending", reason: refused ? reason : null, batch_id: null });
    }
    this.batches.delete(batch.batch_id);
    return aside;
  }

  async setAsideRefused(refuse) {
    const aside = [];
    for (const entry of this.outbox.filter((entry) => entry.state === "pending")) {
      const reason = refuse(entry.op);
      if (reason === null) continue;
      Object.assign(entry, { state: "set_aside", reason, batch_id: null });
      aside.push({ opID: entry.op_id, reason });
    }
    return aside;
  }

  async batchDissolved(batch) {
    for (const entry of this.#ofBatch(batch)) Object.assign(entry, { state: "pending", batch_id: null });
    this.batches.delete(batch.batch_id);
  }

  async sentJobs() {
    return [...new Set([...this.batches.values()].map((batch) => batch.job_id).filter(Boolean))];
  }

  async sentJobsMerging(keys) {
    return jobsMerging([...this.batches.values()], keys);
  }

  /** Every step the engine took that settled jobs, with how many outcomes each held. */
  settleSteps = [];

  async jobsSettled(outcomes) {
    this.settleSteps.push(outcomes.length);
    const settled = { refused: [], dead: [], changed: [] };
    for (const outcome of outcomes) {
      const entries = this.#ofJob(outcome.jobID);
      if (outcome.status === "succeeded") {
        const byOp = new Map(outcome.results.map((result) => [result.op_id, result]));
        for (const entry of entries) {
          const result = byOp.get(entry.op_id);
          if (result && (result.status === "conflict" || result.status === "rejected")) {
            settled.refused.push(result);
            this.outbox.splice(this.outbox.indexOf(entry), 1);
          } else if (entry.state === "sent") {
            Object.assign(entry, { state: "confirmed", checkpoint: outcome.checkpoint });
          }
        }
      } else if (outcome.status === "dead") {
        const sent = entries.filter((entry) => entry.state === "sent");
        for (const entry of sent) Object.assign(entry, { state: "set_aside", reason: outcome.reason });
        settled.dead.push({ jobID: outcome.jobID, opIDs: sent.map((entry) => entry.op_id) });
      } else {
        for (const entry of entries) {
          if (entry.state === "sent") Object.assign(entry, { state: "pending", job_id: null, batch_id: null });
        }
      }
      settled.changed.push(...entries.map((entry) => ({ collection: entry.collection, id: entry.id })));
      this.#dropBatches(outcome.jobID);
    }
    return settled;
  }

  async beginResync() {
    this.values.set("generation", (this.values.get("generation") ?? 0) + 1);
    this.values.set("resync", true);
    this.values.delete("cursor");
  }

  async applyPage(changes, cursor, hasMore) {
    const generation = this.values.get("generation") ?? 0;
    for (const change of changes) this.records.set(`${change.collection}/${change.id}`, { ...change, generation });
    this.values.set("cursor", cursor);
    this.outbox = this.outbox.filter((entry) => !(entry.state === "confirmed" && entry.checkpoint <= Number(cursor)));
    if (!hasMore && this.values.get("resync")) {
      for (const [key, record] of this.records) if (record.generation < generation) this.records.delete(key);
      this.values.delete("resync");
    }
    return changes.map((change) => ({ collection: change.collection, id: change.id }));
  }

  async forgetSpace() {
    const lost = this.outbox.filter((entry) => unconfirmed.includes(entry.state)).map((entry) => entry.op_id);
    this.outbox = [];
    this.batches.clear();
    this.records.clear();
    for (const key of ["cursor", "resync", "generation"]) this.values.delete(key);
    this.values.set("gone", true);
    return lost;
  }

  async hasFilesToSettle() { return [...this.files.values()].some((file) => file.state !== "stored"); }
  async pendingBlobs() { return [...this.files.values()].filter((file) => file.state === "pending").sort((a, b) => a.last_used - b.last_used); }
  async setUploadURL(sha256, url) { this.files.get(sha256).upload_url = url; }
  async blobUploaded(sha256) { Object.assign(this.files.get(sha256), { state: "stored", upload_url: null }); }

  async blobsRefused(sha256, reason) {
    if (sha256) Object.assign(this.files.get(sha256), { state: "refused", reason, upload_url: null });
    const refused = new Map([...this.files.values()].filter((file) => file.state === "refused").map((file) => [file.sha256, file.reason ?? reason]));
    const aside = [];
    for (const entry of this.outbox.filter((candidate) => candidate.state === "pending")) {
      const hit = entry.blobs.find((sha) => refused.has(sha));
      if (!hit) continue;
      Object.assign(entry, { state: "set_aside", reason: refused.get(hit) });
      aside.push({ opID: entry.op_id, reason: entry.reason });
    }
    return aside;
  }

  async blobMissing(sha256) {
    const file = this.files.get(sha256);
    if (!file || file.state === "refused") return false;
    Object.assign(file, { state: "pending", upload_url: null });
    return true;
  }

  async addDownloadedBlob(ref, blob, now) { this.files.set(ref.sha256, { ...ref, state: "stored", blob, upload_url: null, reason: null, last_used: now }); }
  async evictBlobs() { return []; }

  #ofBatch(batch) { return this.outbox.filter((entry) => entry.batch_id === batch.batch_id); }
  #ofJob(jobID) { return this.outbox.filter((entry) => entry.job_id === jobID); }
  #dropBatches(jobID) {
    for (const [id, batch] of this.batches) if (batch.job_id === jobID) this.batches.delete(id);
  }
}

/**
 * A gateway answering from `answer(request)` (`{ status, json, headers }`), through `fetch`;
 * every request is kept, its body parsed.
 */
export function gateway(answer) {
  const requests = [];
  globalThis.fetch = async (url, init) => {
    const { pathname, search } = new URL(url);
    const body = typeof init.body === "string" ? JSON.parse(init.body) : init.body;
    const request = { method: init.method, path: pathname, query: new URLSearchParams(search), headers: init.headers, body };
    requests.push(request);
    const { status, json, headers = {} } = answer(request) ?? { status: 500, json: { detail: `no answer scripted for ${init.method} ${pathname}` } };
    const type = status >= 400 ? "application/problem+json" : "application/json";
    return new Response(json === undefined ? null : JSON.stringify(json), { status, headers: { "Content-Type": type, ...headers } });
  };
  return requests;
}

/** An engine over `local`, for a device syncing its personal space (or `spaceID`); events kept in `events`. */
export function engine(local, { spaceID, tokenProvider = async () => "token" } = {}) {
  const events = [];
  const host = {
    store: null, gatewayURL: "http://gateway.test", spaceID, fanoutURL: undefined,
    signIn: new SignIn(tokenProvider, (reason, detail) => events.push({ name: "unauthorized", detail: { reason, detail } })),
    pollInterval: null, pushDelay: 0, deviceName: "node", identity: {},
    state: { lastSyncAt: null, lastError: null, lastPushTraceID: null, live: false, pullWanted: false, writesWaiting: false },
    running: () => true, leader: () => false, sharedDevice: () => null, emit: (name, detail) => events.push({ name, detail }), changed: () => {}, changedAll: () => {},
    rulesChanged: () => { host.rulesChanges += 1; }, rulesChanges: 0, heartbeatInterval: undefined, liveChanged: (live) => host.liveChanges.push(live), liveChanges: [],
  };
  return { engine: new SyncEngine(host, local), events, state: host.state, host };
}

/** The usual answers: a device registered, every push a job that succeeded at `checkpoint`, and a page of `changes`. */
export function usualServer({ checkpoint = 1, changes = [], push } = {}) {
  let jobs = 0;
  return (request) => {
    if (request.method === "POST" && request.path === "/v1/devices") return { status: 201, json: { device_id: "device-1" } };
    if (request.method === "POST" && request.path === "/v1/sync/push") return push?.(request) ?? { status: 202, json: { job_id: `job-${++jobs}`, status: "queued" } };
    if (request.method === "GET" && request.path.startsWith("/v1/sync/jobs/")) return { status: 200, json: { status: "succeeded", checkpoint: String(checkpoint), results: [] } };
    if (request.method === "GET" && request.path === "/v1/sync/pull") return { status: 200, json: { changes, cursor: String(checkpoint), has_more: false } };
    return undefined;
  };
}

