// The sync engine (src/engine.ts) in Node: its database is the in-memory `MemoryLocal`
// (test/support; the browser's is IndexedDB, behind the same `LocalSync` interface), and the
// gateway is a script of answers served through `fetch`. What the engine sends, and what
// it does with each answer: pushes under their idempotency keys, refused ops set aside,
// batches too large split, jobs followed and forgotten ones sent again, resyncs, a space
// that is gone, and the server's Retry-After.
import { test } from "node:test";
import assert from "node:assert/strict";
import { SpaceGoneError } from "../dist/store.js";
import { engine, gateway, MemoryLocal, usualServer } from "./support/engine-harness.mjs";

const pushes = (requests) => requests.filter((request) => request.path === "/v1/sync/push");

test("a sync registers the device, pushes the outbox under its key, follows the job and pulls to its end", async () => {
  const local = new MemoryLocal();
  const first = local.enqueue("todos", "a", { title: "bread" });
  const second = local.enqueue("todos", "b", { title: "milk" });
  const requests = gateway(usualServer({ checkpoint: 2, changes: [{ collection: "todos", id: "a", version: 1, deleted: false, data: { title: "bread" } }] }));
  const { engine: sync } = engine(local);
  await sync.sync(5);

  assert.deepEqual(requests.map((request) => `${request.method} ${request.path}`), [
    "POST /v1/devices", "GET /v1/rules", "POST /v1/sync/push", "GET /v1/sync/jobs/job-1", "GET /v1/sync/pull",
  ]);
  const [push] = pushes(requests);
  assert.deepEqual(push.body.ops.map((op) => op.op_id), [first, second]);
  assert.equal(push.body.device_id, "device-1");
  assert.match(push.headers["Idempotency-Key"], /^[0-9a-f-]{36}$/);
  assert.match(push.headers.traceparent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
  assert.equal(await local.meta("device_id"), "device-1");
  assert.equal(await local.meta("cursor"), "2");
  assert.equal(local.outbox.length, 0, "confirmed ops leave once the pull reaches their checkpoint");
  assert.ok(local.records.has("todos/a"));
});

test("a refused op is set aside with the server's reason, and the rest of its batch is sent again", async () => {
  const local = new MemoryLocal();
  const ops = ["a", "b", "c"].map((id) => local.enqueue("todos", id, { title: id }));
  let refused = false;
  const requests = gateway(usualServer({
    push: (request) => {
      if (refused) return undefined;
      refused = true;
      assert.equal(request.body.ops.length, 3);
      return { status: 422, json: { code: "invalid_op", detail: "title too long", op_index: 1 } };
    },
  }));
  const { engine: sync, events } = engine(local);
  await sync.sync(5);

  const sent = pushes(requests);
  assert.equal(sent.length, 2);
  assert.deepEqual(sent[1].body.ops.map((op) => op.op_id), [ops[0], ops[2]]);
  assert.notEqual(sent[1].headers["Idempotency-Key"], sent[0].headers["Idempotency-Key"], "a new batch, a new key");
  assert.deepEqual(local.inState("set_aside"), [ops[1]]);
  assert.equal(local.outbox.find((entry) => entry.op_id === ops[1]).reason, "title too long");
  assert.deepEqual(events.filter((event) => event.name === "setAside").map((event) => event.detail), [{ opID: ops[1], reason: "title too long" }]);
});

test("a push the server answers for again is sent again under the same key until it is answered", async () => {
  const local = new MemoryLocal();
  local.enqueue("todos", "a", { title: "bread" });
  let failures = 0;
  const requests = gateway(usualServer({ push: () => (failures++ < 1 ? { status: 503, json: { detail: "busy" }, headers: { "Retry-After": "1" } } : undefined) }));
  const { engine: sync } = engine(local);
  const started = Date.now();
  await sync.sync(10);

  const sent = pushes(requests);
  assert.equal(sent.length, 2);
  assert.equal(sent[1].headers["Idempotency-Key"], sent[0].headers["Idempotency-Key"], "the same batch: a retry doubles nothing");
  assert.ok(Date.now() - started >= 950, "the server's Retry-After is waited out");
  assert.equal(local.outbox.length, 0);
});

test("a batch too large is split in halves; an op too large alone is set aside", async () => {
  const local = new MemoryLocal();
  const small = local.enqueue("todos", "a", { title: "a" });
  const large = local.enqueue("todos", "b", { title: "x".repeat(2000) });
  const requests = gateway(usualServer({
    push: (request) => (JSON.stringify(request.body).length > 1500 ? { status: 413, json: { detail: "push too large" } } : undefined),
  }));
  const { engine: sync } = engine(local);
  await sync.sync(5);

  const sent = pushes(requests).map((request) => request.body.ops.map((op) => op.op_id));
  assert.deepEqual(sent[0], [small, large]);
  assert.ok(sent.some((ops) => ops.length === 1 && ops[0] === small), "the batch was sent again in smaller pieces");
  assert.deepEqual(local.inState("set_aside"), [large]);
  assert.equal(local.outbox.length, 1);
});

test("a job the server no longer knows sends its ops again, and a dead job sets them aside", async () => {
  const local = new MemoryLocal();
  const forgotten = local.enqueue("todos", "a", { title: "a" });
  let pushed = 0;
  const usual = usualServer();
  const requests = gateway((request) => {
    if (request.path === "/v1/sync/push") return { status: 202, json: { job_id: `job-${++pushed}` } };
    if (request.path === "/v1/sync/jobs/job-1") return { status: 404, json: { detail: "no such job" } };
    if (request.path === "/v1/sync/jobs/job-2") return { status: 200, json: { status: "dead", last_error: "poison" } };
    return usual(request);
  });
  const { engine: sync, events } = engine(local);
  await sync.sync(5);

  assert.equal(pushes(requests).length, 2);
  assert.deepEqual(pushes(requests)[1].body.ops.map((op) => op.op_id), [forgotten]);
  assert.deepEqual(local.inState("set_aside"), [forgotten]);
  assert.equal(local.outbox[0].reason, "job dead: poison");
  assert.deepEqual(events.find((event) => event.name === "jobDead").detail, { jobID: "job-2", opIDs: [forgotten] });
});

test("the outcomes of many jobs are settled in one step, and the app is told once what they changed", async () => {
  const local = new MemoryLocal();
  await local.setMeta("device_id", "device-1");
  for (let i = 0; i < 40; i++) {
    local.enqueue("todos", `t${i}`, { title: `${i}` });
    const batch = await local.nextBatch("device-1", 1, 1_000_000);
    await local.batchAccepted(batch, `job-${i}`);
  }
  const requests = gateway((request) => {
    const job = request.path.match(/^\/v1\/sync\/jobs\/job-(\d+)$/);
    if (job && Number(job[1]) === 7) return { status: 200, json: { status: "succeeded", checkpoint: "40", results: [{ op_id: local.outbox[7].op_id, status: "rejected", reason: "forbidden" }] } };
    if (job) return { status: 200, json: { status: "succeeded", checkpoint: String(Number(job[1]) + 1), results: [] } };
    return usualServer({ checkpoint: 40 })(request);
  });
  const { engine: sync, events, host } = engine(local);
  const told = [];
  host.changed = (changes) => told.push(changes.length);
  await sync.sync(5);

  assert.equal(requests.filter((request) => request.path.startsWith("/v1/sync/jobs/")).length, 40);
  assert.deepEqual(local.settleSteps, [40], "one step for all forty outcomes");
  assert.equal(told[0], 40, "the app heard of the forty records at once");
  assert.deepEqual(events.filter((event) => event.name === "rejected").map((event) => event.detail.reason), ["forbidden"]);
  assert.equal(local.outbox.length, 0);
  assert.equal(local.batches.size, 0);
});

test("a pull answered 410 starts a resync from the beginning, which drops what the server no longer holds", async () => {
  const local = new MemoryLocal();
  await local.setMeta("device_id", "device-1");
  await local.setMeta("cursor", "7");
  local.records.set("todos/old", { collection: "todos", id: "old", generation: 0 });
  const requests = gateway((request) => {
    if (request.path !== "/v1/sync/pull") return undefined;
    if (request.query.get("since") === "7") return { status: 410, json: { code: "resync_required", detail: "cursor too old" } };
    return { status: 200, json: { changes: [{ collection: "todos", id: "new", version: 9, deleted: false, data: {} }], cursor: "9", has_more: false } };
  });
  const { engine: sync, events } = engine(local);
  await sync.sync(5);

  const pulls = requests.filter((request) => request.path === "/v1/sync/pull");
  assert.deepEqual(pulls.map((request) => request.query.get("since")), ["7", null]);
  assert.deepEqual([...local.records.keys()], ["todos/new"]);
  assert.equal(await local.meta("cursor"), "9");
  assert.ok(events.some((event) => event.name === "resync"));
});

test("a shared space that is gone is forgotten, and the edits it never confirmed are reported lost", async () => {
  const local = new MemoryLocal();
  await local.setMeta("device_id", "device-1");
  const edit = local.enqueue("todos", "a", { title: "a" });
  const requests = gateway((request) => {
    if (request.path === "/v1/sync/push" || request.path === "/v1/sync/pull") {
      assert.equal(request.query.get("space_id") ?? request.body?.space_id, "space-1");
      return { status: 404, json: { detail: "No such space." } };
    }
    return undefined;
  });
  const { engine: sync, events } = engine(local, { spaceID: "space-1" });
  await assert.rejects(sync.sync(5), SpaceGoneError);

  assert.deepEqual(requests.map((request) => `${request.method} ${request.path}`), ["GET /v1/rules", "POST /v1/sync/push", "GET /v1/sync/pull"]);
  assert.equal(await local.meta("gone"), true);
  assert.equal(local.outbox.length, 0);
  assert.deepEqual(events.map((event) => event.name), ["editsLost", "spaceGone"]);
  assert.deepEqual(events[0].detail, { spaceID: "space-1", opIDs: [edit] });
  await assert.rejects(sync.sync(5), SpaceGoneError, "a forgotten space syncs no more");
});

test("syncs asked for at once take turns: passes never overlap, and the batch is pushed once", async () => {
  const local = new MemoryLocal();
  await local.setMeta("device_id", "device-1");
  let inFlight = 0, most = 0;
  const usual = usualServer();
  const answered = gateway((request) => usual(request));
  const fetchOne = globalThis.fetch;
  globalThis.fetch = async (url, init) => {
    most = Math.max(most, ++inFlight);
    await new Promise((resolve) => setTimeout(resolve, 5));
    try { return await fetchOne(url, init); } finally { inFlight -= 1; }
  };
  const { engine: sync } = engine(local);
  local.enqueue("todos", "a", { title: "a" });
  await Promise.all([sync.sync(5), sync.sync(5), sync.sync(5), sync.sync(5)]);

  assert.equal(most, 1, "two passes sent requests at once");
  assert.equal(pushes(answered).length, 1);
  assert.equal(local.outbox.length, 0);
  const pulls = answered.filter((request) => request.path === "/v1/sync/pull").length;
  assert.equal(pulls, 1, "the passes after the first found nothing more to pull");
});

const recipesRules = {
  version: 2, default: "allow",
  collections: { recipes: { schema: { type: "object", required: ["title"], properties: { title: { type: "string" } } } } },
};

test("a new version of the rules sets aside the waiting ops it refuses, with the rule's name, and pushes the rest", async () => {
  const local = new MemoryLocal();
  await local.setMeta("device_id", "device-1");
  const untitled = local.enqueue("recipes", "r1", { minutes: 5 });
  const titled = local.enqueue("recipes", "r2", { title: "Soup" });
  const usual = usualServer();
  const requests = gateway((request) =>
    request.path === "/v1/rules" ? { status: 200, json: recipesRules, headers: { ETag: '"rules-2"' } } : usual(request));
  const { engine: sync, events, host } = engine(local);
  await sync.sync(5);

  assert.deepEqual(local.inState("set_aside"), [untitled]);
  assert.equal(local.outbox.find((entry) => entry.op_id === untitled).reason, "rule:recipes.schema");
  assert.deepEqual(events.filter((event) => event.name === "setAside").map((event) => event.detail), [{ opID: untitled, reason: "rule:recipes.schema" }]);
  assert.deepEqual(pushes(requests)[0].body.ops.map((pushed) => pushed.op_id), [titled]);
  assert.deepEqual(await local.meta("rules"), { document: recipesRules, etag: '"rules-2"' });
  assert.equal(host.rulesChanges, 1);

  // Within the minute the rules are not asked for again.
  await sync.sync(5);
  assert.equal(requests.filter((request) => request.path === "/v1/rules").length, 1);
});

test("a push the rules refuse sets the op aside with the rule's name, and the rules are looked up again with their ETag", async () => {
  const local = new MemoryLocal();
  await local.setMeta("device_id", "device-1");
  await local.setMeta("rules", { document: { ...recipesRules, version: 1, collections: {} }, etag: '"rules-1"' });
  const refused = local.enqueue("recipes", "r1", { minutes: 5 });
  const kept = local.enqueue("recipes", "r2", { title: "Soup" });
  let pushesSeen = 0;
  const usual = usualServer({
    push: () => (++pushesSeen === 1
      ? { status: 422, json: { code: "invalid_request", op_index: 0, pointer: "/ops/0/data/title", rule: "recipes.schema", rules_version: 2, detail: "…" } }
      : undefined),
  });
  let rulesAsked = 0;
  const requests = gateway((request) => {
    if (request.path !== "/v1/rules") return usual(request);
    return ++rulesAsked === 1 ? { status: 304, headers: { ETag: '"rules-1"' } } : { status: 200, json: recipesRules, headers: { ETag: '"rules-2"' } };
  });
  const { engine: sync, events } = engine(local);
  await sync.sync(5);
  assert.equal(requests.find((request) => request.path === "/v1/rules").headers["If-None-Match"], '"rules-1"');
  assert.equal(local.outbox.find((entry) => entry.op_id === refused).reason, "rule:recipes.schema");
  assert.ok(events.some((event) => event.name === "setAside" && event.detail.reason === "rule:recipes.schema"));
  assert.ok(!local.inState("set_aside").includes(kept));

  await sync.sync(5);
  assert.equal(rulesAsked, 2, "the 422 named a newer version: looked up on the next pass");
  assert.equal((await local.meta("rules")).etag, '"rules-2"');
});

test("an op the rules refused when its job was applied is reported with the rule's name", async () => {
  const local = new MemoryLocal();
  await local.setMeta("device_id", "device-1");
  const opID = local.enqueue("recipes", "pie", { kind: "main" });
  const usual = usualServer();
  gateway((request) => {
    if (request.path.startsWith("/v1/sync/jobs/")) {
      return { status: 200, json: { status: "succeeded", checkpoint: "1", rules_version: 0, results: [{ op_id: opID, status: "rejected", reason: "rule", rule: "recipes.immutable.kind" }] } };
    }
    return usual(request);
  });
  const { engine: sync, events } = engine(local);
  await sync.sync(5);
  assert.deepEqual(events.filter((event) => event.name === "rejected").map((event) => event.detail.reason), ["rule:recipes.immutable.kind"]);
});

test("a device the server no longer knows (a restore from before it registered) registers again and pushes its ops", async () => {
  const local = new MemoryLocal();
  await local.setMeta("device_id", "device-lost");
  const op = local.enqueue("todos", "a", { title: "written offline" });
  const requests = gateway(usualServer({
    push: (request) => (request.body.device_id === "device-lost" ? { status: 404, json: { code: "not_found", detail: "No such device." } } : undefined),
  }));
  const { engine: sync } = engine(local);
  await assert.rejects(sync.sync(5));
  await sync.sync(5);

  const sent = pushes(requests);
  assert.deepEqual(sent.map((push) => push.body.device_id), ["device-lost", "device-1"]);
  assert.deepEqual(sent[1].body.ops.map((entry) => entry.op_id), [op]);
  assert.equal(await local.meta("device_id"), "device-1");
  assert.equal(local.outbox.length, 0);
});

test("a stream silent for two heartbeats is closed and opened again, at once when the browser says it is online", async () => {
  const sources = [];
  globalThis.EventSource = class {
    constructor(url) { this.url = url; this.closed = false; sources.push(this); }
    close() { this.closed = true; }
  };
  const random = Math.random;
  Math.random = () => 0.99;  // the stream's backoff waits its whole first step (0.25 s)
  const local = new MemoryLocal();
  gateway(usualServer());
  const { engine: sync, state, host } = engine(local);
  try {
    Object.assign(host, { fanoutURL: "http://fanout.test", leader: () => true, heartbeatInterval: 0.1 });
    await sync.sync(5);
    assert.equal(sources.length, 1);
    sources[0].onmessage({ data: JSON.stringify({ type: "hello", cursor: "1", space_id: "s" }) });
    assert.equal(state.live, true);
    // Heartbeats keep it: one every 0.1 s for 0.5 s.
    for (let i = 0; i < 5; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      sources[0].onmessage({ data: JSON.stringify({ type: "heartbeat" }) });
    }
    assert.equal(state.live, true);
    assert.equal(sources[0].closed, false);
    // Then silence (a fanout stopped, a half-open connection): closed after two intervals.
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(sources[0].closed, true);
    assert.equal(state.live, false);
    assert.equal(state.pullWanted, true, "what was missed meanwhile is pulled");
    assert.deepEqual(host.liveChanges, [true, false], "the other tabs hear it");
    assert.equal(sources.length, 1, "the next try waits for the backoff");
    sync.networkBack();
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(sources.length, 2, "online: opened again at once");
  } finally {
    Math.random = random;
    Object.assign(host, { running: () => false });
    await new Promise((resolve) => setTimeout(resolve, 250));  // its watchdog and retry find the client stopped
    delete globalThis.EventSource;
  }
});

test("a page that holds this device's job's increments waits for the job's outcome, asked after the page was read", async () => {
  const local = new MemoryLocal();
  const op = { op_id: crypto.randomUUID(), type: "increment", collection: "shelves", id: "s1", field: "n", by: 1 };
  local.outbox.push({ op_id: op.op_id, op, collection: "shelves", id: "s1", blobs: [], state: "pending", batch_id: null, job_id: null, reason: null, checkpoint: null, seq: 1 });
  const usual = usualServer({ checkpoint: 5, changes: [{ collection: "shelves", id: "s1", version: 5, deleted: false, data: { n: 1 } }] });
  let asked = 0;
  const requests = gateway((request) => {
    if (request.path !== "/v1/sync/jobs/job-1") return usual(request);
    asked += 1;
    // Still running when the pass follows it; applied by the time the page that holds it was read.
    return asked === 1 ? { status: 200, json: { status: "processing" } }
      : { status: 200, json: { status: "succeeded", checkpoint: "5", results: [{ op_id: op.op_id, status: "applied", version: 5 }] } };
  });
  const shown = [];
  const applyPage = local.applyPage.bind(local);
  local.applyPage = async (...page) => {
    shown.push(local.outbox.find((entry) => entry.op_id === op.op_id)?.state ?? "gone");
    return applyPage(...page);
  };
  const { engine: sync } = engine(local);
  await sync.sync(5);
  const paths = requests.map((request) => `${request.method} ${request.path}`);
  const pull = paths.indexOf("GET /v1/sync/pull");
  assert.deepEqual(paths.slice(pull, pull + 2), ["GET /v1/sync/pull", "GET /v1/sync/jobs/job-1"], paths.join(", "));
  assert.equal(shown[0], "confirmed", "the page was stored once the op's version was known");
  assert.equal(local.outbox.length, 0);
});
