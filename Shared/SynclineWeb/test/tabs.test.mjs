// The tabs of one database (src/tabs.ts) in Node: a lock manager in memory with the Web
// Locks semantics the client relies on, and Node's own BroadcastChannel. One tab leads at
// a time and another takes over when it stops; a tab that does not lead has the leader
// sync for it; news reaches the other tabs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tabs } from "../dist/tabs.js";

/** Exclusive locks by name, granted in request order (`ifAvailable`: now or never; `signal`: stop waiting). */
class MemoryLocks {
  #queues = new Map();

  async request(name, options, callback) {
    const queue = this.#queues.get(name) ?? [];
    this.#queues.set(name, queue);
    if (options.ifAvailable && queue.length > 0) return callback(null);
    let grant;
    const granted = new Promise((resolve, reject) => {
      grant = resolve;
      options.signal?.addEventListener("abort", () => {
        const at = queue.indexOf(grant);
        if (at > 0) {
          queue.splice(at, 1);
          reject(new DOMException("abandoned", "AbortError"));
        }
      }, { once: true });
    });
    queue.push(grant);
    if (queue.length === 1) grant();
    await granted;
    try {
      return await callback({ name });
    } finally {
      queue.shift();
      queue[0]?.();
    }
  }
}

/** A tab's host whose loop runs until `end()`; what it heard and the syncs it ran are kept. */
function tab(name, locks, syncs = () => {}) {
  const host = { news: [], syncs: [] };
  host.heard = (news) => host.news.push(news);
  host.lead = () => new Promise((resolve) => { host.end = resolve; });
  host.sync = async (timeout) => { host.syncs.push(timeout); await syncs(timeout); };
  return { tabs: new Tabs(name, host, locks), host };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 20));

test("one tab leads at a time, and a waiting tab takes over when the leader stops", async () => {
  const locks = new MemoryLocks();
  const a = tab("db-1", locks), b = tab("db-1", locks);
  const aFollows = a.tabs.follow(), bFollows = b.tabs.follow();
  await settle();
  assert.equal(a.tabs.leader, true);
  assert.equal(b.tabs.leader, false);
  a.host.end();
  await aFollows;
  await settle();
  assert.equal(a.tabs.leader, false);
  assert.equal(b.tabs.leader, true);
  b.host.end();
  await bFollows;
  a.tabs.close();
  b.tabs.close();
});

test("a tab that does not lead has the leader sync for it, and hears how the sync ended", async () => {
  const locks = new MemoryLocks();
  let fail = false;
  const leader = tab("db-2", locks, async () => { if (fail) throw new Error("push answered 503"); });
  const other = tab("db-2", locks);
  const leading = leader.tabs.follow();
  await settle();
  await other.tabs.sync(5);
  assert.deepEqual(leader.host.syncs, [5]);
  assert.deepEqual(other.host.syncs, [], "the sync ran in the leading tab");
  fail = true;
  await assert.rejects(other.tabs.sync(5), /push answered 503/);
  leader.host.end();
  await leading;
  leader.tabs.close();
  other.tabs.close();
});

test("with no tab leading, a sync runs in the tab that asks, which holds the lock meanwhile", async () => {
  const locks = new MemoryLocks();
  let heldDuringSync = false;
  const lone = tab("db-3", locks, async () => {
    heldDuringSync = await locks.request("db-3", { ifAvailable: true }, async (lock) => lock === null);
  });
  await lone.tabs.sync(2);
  assert.deepEqual(lone.host.syncs, [2]);
  assert.equal(heldDuringSync, true);
  lone.tabs.close();
});

test("news goes to the other tabs of the database, not back to the one that told it", async () => {
  const locks = new MemoryLocks();
  const a = tab("db-4", locks), b = tab("db-4", locks), elsewhere = tab("db-5", locks);
  a.tabs.tell({ type: "changed", keys: [{ collection: "todos", id: "1" }] });
  a.tabs.tell({ type: "event", name: "conflict", detail: { opID: "op-1" } });
  await settle();
  assert.deepEqual(b.host.news.map((news) => news.type), ["changed", "event"]);
  assert.deepEqual(a.host.news, []);
  assert.deepEqual(elsewhere.host.news, []);
  for (const each of [a, b, elsewhere]) each.tabs.close();
});

test("a tab abandoned while it waits for the lock never leads", async () => {
  const locks = new MemoryLocks();
  const a = tab("db-6", locks), b = tab("db-6", locks);
  const aFollows = a.tabs.follow(), bFollows = b.tabs.follow();
  await settle();
  b.tabs.abandon();
  await bFollows;
  a.host.end();
  await aFollows;
  await settle();
  assert.equal(b.tabs.leader, false);
  assert.equal(b.host.end, undefined, "its loop never started");
  a.tabs.close();
  b.tabs.close();
});
