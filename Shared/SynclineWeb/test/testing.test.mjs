// The fake server of @syncline/web/testing (src/testing.ts) driving the real sync engine
// (over the in-memory database of test/support): two devices converging through it, a
// refusal at the push and in a job, an outage, a paused worker, a refused sign-in, and a
// space that goes away — each as the client meets it from the real server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { FakeSyncServer } from "../dist/testing.js";
import { engine, MemoryLocal } from "./support/engine-harness.mjs";

/** A fake at the harness's gateway URL, with `fetch` routed to it for the test. */
function fake(t) {
  const server = new FakeSyncServer("http://gateway.test");
  t.after(server.install());
  return server;
}

const device = (user, options = {}) => {
  const local = new MemoryLocal();
  return { local, ...engine(local, { tokenProvider: async () => user, ...options }) };
};

test("two devices of a user converge through the fake, and another device's edit reaches both", async (t) => {
  const server = fake(t);
  const phone = device("alice"), laptop = device("alice");
  phone.local.enqueue("todos", "a", { title: "bread" });
  await phone.engine.sync(5);
  laptop.local.enqueue("todos", "b", { title: "milk" });
  await laptop.engine.sync(5);
  server.upsert("alice", "todos", "c", { title: "eggs" });
  await phone.engine.sync(5);
  assert.deepEqual(server.records("alice", "todos"), { a: { title: "bread" }, b: { title: "milk" }, c: { title: "eggs" } });
  assert.deepEqual([...phone.local.records.keys()].sort(), ["todos/a", "todos/b", "todos/c"]);
  assert.equal(phone.local.outbox.length + laptop.local.outbox.length, 0);
  assert.deepEqual(server.records("bob", "todos"), {}, "another user sees none of it");
});

test("an op refused at the push is set aside, one rejected in its job is reported, and the rest apply", async (t) => {
  const server = fake(t);
  const phone = device("alice");
  server.refuse((op) => (op.id === "bad" ? { invalid: "no bad ids" } : op.id === "late" ? { rejected: "forbidden" } : null));
  const [good, bad, late] = ["good", "bad", "late"].map((id) => phone.local.enqueue("todos", id, { title: id }));
  await phone.engine.sync(5);
  assert.deepEqual(phone.local.inState("set_aside"), [bad]);
  assert.equal(phone.local.outbox.find((entry) => entry.op_id === bad).reason, "ops[1]: no bad ids");
  assert.deepEqual(phone.events.filter((event) => event.name === "rejected").map((event) => [event.detail.opID, event.detail.reason]), [[late, "forbidden"]]);
  assert.deepEqual(Object.keys(server.records("alice", "todos")), ["good"]);
  assert.ok(good);
  // The device tells the server what it set aside, once.
  assert.deepEqual(server.setAsideReports(await phone.local.meta("device_id")), { [bad]: "ops[1]: no bad ids" });
  const told = server.requests.filter((r) => r.path.endsWith("/set-aside")).length;
  await phone.engine.sync(5);
  assert.equal(server.requests.filter((r) => r.path.endsWith("/set-aside")).length, told);
});

test("an outage and a failing server fail the sync with their reasons, and the sync after them applies the edit", async (t) => {
  const server = fake(t);
  const phone = device("alice");
  phone.local.enqueue("todos", "a", { title: "bread" });
  server.setOffline(true);
  await assert.rejects(phone.engine.sync(1), /cannot reach the server/);
  server.setOffline(false);
  server.setUnavailable(true);
  await assert.rejects(phone.engine.sync(1), /503/);
  server.setUnavailable(false);
  await phone.engine.sync(5);
  assert.deepEqual(server.records("alice", "todos"), { a: { title: "bread" } });
  assert.equal(phone.local.outbox.length, 0);
});

test("a paused worker keeps the job running until it resumes; the sync waits within its timeout", async (t) => {
  const server = fake(t);
  const phone = device("alice");
  phone.local.enqueue("todos", "a", { title: "bread" });
  server.pauseJobs();
  await assert.rejects(phone.engine.sync(0.5), /jobs still running/);
  assert.equal(server.queuedJobs, 1);
  assert.deepEqual(phone.local.inState("sent").length, 1);
  setTimeout(() => server.resumeJobs(), 200);
  await phone.engine.sync(5);
  assert.equal(server.queuedJobs, 0);
  assert.deepEqual(server.records("alice", "todos"), { a: { title: "bread" } });
});

test("a refused sign-in is told once with its reason, and a stale if_version is a conflict with the record as it is", async (t) => {
  const server = fake(t);
  const phone = device("alice");
  server.refuseTokens("expired");
  phone.local.enqueue("todos", "a", { title: "bread" });
  await assert.rejects(phone.engine.sync(1), /401/);
  await assert.rejects(phone.engine.sync(1), /401/);
  assert.deepEqual(phone.events.filter((event) => event.name === "unauthorized").map((event) => event.detail.reason), ["expired"]);
  assert.equal(phone.host.signIn.state, "refused");
  server.refuseTokens(null);
  await phone.engine.sync(5);
  assert.equal(phone.host.signIn.state, "accepted");
  const op = phone.local.enqueue("todos", "a", { title: "rolls" });
  phone.local.outbox.at(-1).op.if_version = 7;
  await phone.engine.sync(5);
  const conflict = phone.events.find((event) => event.name === "conflict");
  assert.equal(conflict.detail.opID, op);
  assert.equal(conflict.detail.current.data.title, "bread");
});

test("a shared space deleted under its device drops the device's copy and reports the edits lost", async (t) => {
  const server = fake(t);
  const space = server.createSpace("alice");
  server.addMember("bob", space);
  const bobs = device("bob", { spaceID: space });
  bobs.local.enqueue("todos", "a", { title: "shared" });
  await bobs.engine.sync(5);
  assert.deepEqual(server.records("alice", "todos", space), { a: { title: "shared" } });
  server.pauseJobs();
  const lost = bobs.local.enqueue("todos", "b", { title: "never applied" });
  await assert.rejects(bobs.engine.sync(0.3));
  server.deleteSpace(space);
  await assert.rejects(bobs.engine.sync(5), (error) => error.name === "SpaceGoneError");
  assert.deepEqual(bobs.events.find((event) => event.name === "editsLost").detail.opIDs, [lost]);
});
