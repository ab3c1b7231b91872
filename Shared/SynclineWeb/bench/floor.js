// The floor under SynclineWeb's figures: bare IndexedDB, in the same browser, doing the
// writes the client's store does for the same work (the same stores, keys, indexes and
// transactions, and the same HTTP calls), with nothing of the client around them: no
// merge rules, no clock, no observers, no events, no other tabs. Pages come in the form the
// client asks for, read back to full records as the client reads them.
import { readPullPage } from "../dist/pull.js";

const request = (req) => new Promise((resolve, reject) => { req.onsuccess = () => resolve(req.result); req.onerror = () => reject(req.error); });
const done = (tx) => new Promise((resolve, reject) => { tx.oncomplete = () => resolve(); tx.onerror = tx.onabort = () => reject(tx.error); });

/** A database laid out as the client's: meta, records by [collection, id] with two declared indexes, the outbox with its indexes, batches. */
export function openFloor(name) {
  const open = indexedDB.open(name, 1);
  open.onupgradeneeded = () => {
    const db = open.result;
    db.createObjectStore("meta");
    const records = db.createObjectStore("records", { keyPath: ["collection", "id"] });
    records.createIndex("by:category", ["shownIn", "k_category"]);
    records.createIndex("by:category,n", ["shownIn", "k_category", "k_n"]);
    const outbox = db.createObjectStore("outbox", { keyPath: "seq", autoIncrement: true });
    outbox.createIndex("op_id", "op_id", { unique: true });
    outbox.createIndex("record", ["collection", "id"]);
    outbox.createIndex("state", "state");
    outbox.createIndex("job_id", "job_id");
    outbox.createIndex("batch_id", "batch_id");
    db.createObjectStore("batches", { keyPath: "batch_id" });
  };
  return request(open);
}

/** A row as the client stores a pulled record: the server's copy beside what shows, and the indexed sort keys. */
function row(change) {
  const data = change.data ?? {};
  return {
    collection: change.collection, id: change.id, server: change, generation: 0, shownIn: change.collection, data, version: change.version,
    pending: false, set_aside_reason: null, visibility: change.visibility ?? "private", public_id: null, can_fork: false, forked_from: null,
    "k_category": [1, data.category ?? 0], "k_n": [1, data.n ?? 0],
  };
}

/** Pulls every page as the client does (`limit=1000`), storing each page and its cursor in one transaction. Returns the records stored. */
export async function floorPull(db, api, { deleteConfirmed = false } = {}) {
  let cursor = null, stored = 0;
  for (;;) {
    const page = readPullPage((await api("GET", `/v1/sync/pull?form=compact&limit=1000${cursor ? `&since=${cursor}` : ""}`)).json);
    const tx = db.transaction(["records", "meta", "outbox"], "readwrite");
    const records = tx.objectStore("records"), outbox = tx.objectStore("outbox");
    for (const change of page.changes) {
      records.put(row(change));
      if (deleteConfirmed) outbox.index("record").getAllKeys([change.collection, change.id]).onsuccess = (event) => { for (const seq of event.target.result) outbox.delete(seq); };
    }
    tx.objectStore("meta").put(page.cursor, "cursor");
    await done(tx);
    stored += page.changes.length;
    cursor = page.cursor;
    if (!page.has_more) return stored;
  }
}

/** A local write's transaction: the clock, the record's row and its outbox entries read; the entry, the row, the clock and the outbox counts written. */
export async function floorWrite(db, op) {
  const tx = db.transaction(["meta", "records", "outbox"], "readwrite");
  const meta = tx.objectStore("meta"), records = tx.objectStore("records"), outbox = tx.objectStore("outbox");
  const [clock, current, counts] = await Promise.all([
    request(meta.get("clock")), request(records.get([op.collection, op.id])), request(meta.get("outbox_counts")),
    request(outbox.index("record").getAll([op.collection, op.id])),
  ]);
  const hlc = `${Date.now()}-00000-floor`;
  outbox.add({ op_id: op.op_id, collection: op.collection, id: op.id, op: { ...op, hlc }, state: "pending", batch_id: null, job_id: null, checkpoint: null, reason: null, created_at: Date.now() });
  records.put({ ...(current ?? row({ collection: op.collection, id: op.id, version: 0, data: {} })), data: op.data, pending: true,
    "k_category": [1, op.data.category], "k_n": [1, op.data.n] });
  meta.put({ ...(clock ?? {}), ms: Date.now() }, "clock");
  meta.put({ ...(counts ?? {}), pending: (counts?.pending ?? 0) + 1 }, "outbox_counts");
  await done(tx);
}

/**
 * The drain of the outbox's pending ops as the client does it: each batch of 500 stored
 * with its key, pushed, marked sent; every job followed to its end and its ops confirmed;
 * then everything pulled back, the confirmed entries leaving with their records' pages.
 */
export async function floorDrain(db, api, device, sleep) {
  const jobs = [];
  for (;;) {
    const tx = db.transaction(["outbox", "batches"], "readwrite");
    const entries = await request(tx.objectStore("outbox").index("state").getAll("pending", 500));
    if (entries.length === 0) { await done(tx); break; }
    const key = crypto.randomUUID();
    const body = JSON.stringify({ device_id: device, ops: entries.map((entry) => entry.op) });
    tx.objectStore("batches").put({ batch_id: key, body, op_ids: entries.map((entry) => entry.op_id) });
    for (const entry of entries) tx.objectStore("outbox").put({ ...entry, state: "batched", batch_id: key });
    await done(tx);
    const answer = await api("POST", "/v1/sync/push", JSON.parse(body), { "Idempotency-Key": key });
    const sent = db.transaction(["outbox", "batches"], "readwrite");
    for (const entry of entries) sent.objectStore("outbox").put({ ...entry, state: "sent", batch_id: null, job_id: answer.json.job_id });
    sent.objectStore("batches").delete(key);
    await done(sent);
    jobs.push(answer.json.job_id);
  }
  for (const job of jobs) {
    let status;
    for (let wait = 0.05; (status = (await api("GET", `/v1/sync/jobs/${job}`)).json).status !== "succeeded"; wait = Math.min(wait * 2, 1)) await sleep(wait);
    const tx = db.transaction(["outbox"], "readwrite");
    const entries = await request(tx.objectStore("outbox").index("job_id").getAll(job));
    for (const entry of entries) tx.objectStore("outbox").put({ ...entry, state: "confirmed", checkpoint: status.checkpoint });
    await done(tx);
  }
  return floorPull(db, api, { deleteConfirmed: true });
}
