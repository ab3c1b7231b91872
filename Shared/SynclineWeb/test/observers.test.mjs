// Observed queries (src/observers.ts), over records kept in a list: which changes wake
// which query, results updated from the changed rows alone when they tell it, read again
// when they do not, and one more delivery per burst of changes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Observers } from "../dist/observers.js";
import { matches, recordOrder } from "../dist/query.js";

const row = (id, data, collection = "todos") => ({
  collection, id, data, version: 1, pending: false, set_aside_reason: null, visibility: "private", public_id: null, can_fork: false, forked_from: null,
});

/** A store's records in a list, read the way the store reads a query; counts its reads. */
function listStore(rows) {
  const store = { rows, reads: 0 };
  store.read = async (query) => {
    store.reads += 1;
    const selected = store.rows.filter((r) => r.collection === query.collection && matches(r.id, r.data, query.where)).sort(recordOrder(query));
    return selected.slice(query.offset ?? 0, query.limit === undefined ? undefined : (query.offset ?? 0) + query.limit)
      .map((r) => ({ collection: r.collection, id: r.id, data: r.data, version: r.version, hasPendingEdits: r.pending, setAsideReason: null, visibility: r.visibility, publicID: null, canFork: false, forkedFrom: null }));
  };
  /** Writes a row and returns the change the store would report. */
  store.write = (next) => {
    store.rows = store.rows.filter((r) => !(r.collection === next.collection && r.id === next.id)).concat([next]);
    return { collection: next.collection, id: next.id, row: next };
  };
  return store;
}

const settled = () => new Promise((resolve) => setTimeout(resolve, 20));

function observe(observers, query) {
  const calls = [];
  const stop = observers.add(query, (records) => calls.push(records.map((record) => record.id)));
  return { calls, stop };
}

test("an observer is called back at once, and again only when its result changes", async () => {
  const store = listStore([row("a", { done: false }), row("b", { done: true })]);
  const observers = new Observers(store.read);
  const open = observe(observers, { collection: "todos", where: { done: { eq: false } } });
  await settled();
  assert.deepEqual(open.calls, [["a"]]);
  observers.changed([store.write(row("c", { done: false }))]);
  await settled();
  assert.deepEqual(open.calls, [["a"], ["a", "c"]]);
  observers.changed([store.write(row("b", { done: true, note: "x" }))]);  // outside the filter, not in the result
  observers.changed([store.write(row("z", { done: false }, "notes"))]);  // another collection
  await settled();
  assert.equal(open.calls.length, 2);
  observers.changed([store.write(row("a", { done: false }))]);  // the same record again: the result is as it was
  await settled();
  assert.equal(open.calls.length, 2);
});

test("changes that carry their rows update the result without reading it again", async () => {
  const store = listStore([row("a", { n: 2 }), row("b", { n: 1 })]);
  const observers = new Observers(store.read);
  const sorted = observe(observers, { collection: "todos", orderBy: ["n"] });
  await settled();
  assert.equal(store.reads, 1);
  observers.changed([store.write(row("c", { n: 0 })), { collection: "todos", id: "a", row: null }]);
  store.rows = store.rows.filter((r) => r.id !== "a");
  await settled();
  assert.deepEqual(sorted.calls.at(-1), ["c", "b"]);
  assert.equal(store.reads, 1, "updated from the changed rows alone");
});

test("a change whose row is not known here, or a limited result that lost a row, reads again", async () => {
  const store = listStore([row("a", { n: 1 }), row("b", { n: 2 }), row("c", { n: 3 })]);
  const observers = new Observers(store.read);
  const firstTwo = observe(observers, { collection: "todos", orderBy: ["n"], limit: 2 });
  await settled();
  assert.deepEqual(firstTwo.calls, [["a", "b"]]);
  // "a" is gone: the row beyond the result's end, never read, moves up.
  store.rows = store.rows.filter((r) => r.id !== "a");
  observers.changed([{ collection: "todos", id: "a", row: null }]);
  await settled();
  assert.deepEqual(firstTwo.calls.at(-1), ["b", "c"]);
  assert.equal(store.reads, 2);
  store.rows = store.rows.map((r) => (r.id === "b" ? row("b", { n: 9 }) : r));
  observers.changed([{ collection: "todos", id: "b" }]);  // a key alone, as a large pull reports it
  await settled();
  assert.deepEqual(firstTwo.calls.at(-1), ["c", "b"]);
  assert.equal(store.reads, 3);
});

test("a burst of changes during a read makes one more delivery, and none after unsubscribing", async () => {
  const store = listStore([row("a", {})]);
  let release;
  const gate = new Promise((resolve) => { release = resolve; });
  let reads = 0;
  const observers = new Observers(async (query) => {
    reads += 1;
    const snapshot = await store.read(query);  // what the store held when the read began
    if (reads === 2) await gate;
    return snapshot;
  });
  const all = observe(observers, { collection: "todos" });
  await settled();
  observers.rereadAll();
  await settled();  // the second read waits at the gate
  for (const id of ["b", "c", "d"]) observers.changed([store.write(row(id, {}))]);
  release();
  await settled();
  assert.deepEqual(all.calls, [["a"], ["a", "b", "c", "d"]], "the three changes during the read make one more delivery");
  assert.equal(reads, 2, "from their rows alone");
  all.stop();
  observers.changed([store.write(row("e", {}))]);
  await settled();
  assert.equal(all.calls.at(-1).length, 4, "no call after unsubscribing");
});

test("results updated from changed rows equal a fresh read, over random writes to limited, ordered and filtered queries", async () => {
  let seed = 7;
  const random = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return (seed >>> 16) % n; };
  const store = listStore(Array.from({ length: 30 }, (_, i) => row(`r${i}`, { n: random(10), done: random(2) === 0 })));
  const observers = new Observers(store.read);
  const queries = [
    { collection: "todos", orderBy: ["n"] },
    { collection: "todos", orderBy: ["-n"], limit: 5 },
    { collection: "todos", where: { done: { eq: true } }, orderBy: ["n"], limit: 8 },
    { collection: "todos", where: { n: { gte: 4 } } },
  ];
  const watched = queries.map((query) => {
    const seen = { last: null, calls: 0 };
    observers.add(query, (records) => { seen.last = records.map((record) => `${record.id}:${record.data.n}:${record.data.done}`); seen.calls += 1; });
    return seen;
  });
  await settled();
  for (let round = 0; round < 150; round++) {
    const changes = [];
    for (let k = random(6) + 1; k > 0; k--) {
      const id = `r${random(36)}`;
      if (random(5) === 0) {
        store.rows = store.rows.filter((r) => r.id !== id);
        changes.push({ collection: "todos", id, row: null });
      } else {
        changes.push(store.write(row(id, { n: random(10), done: random(2) === 0 })));
      }
    }
    observers.changed(changes);
    await settled();
    for (const [index, query] of queries.entries()) {
      const fresh = (await store.read(query)).map((record) => `${record.id}:${record.data.n}:${record.data.done}`);
      assert.deepEqual(watched[index].last, fresh, `query ${index} after round ${round}`);
    }
  }
});

test("a write into a result of twenty thousand records is placed without sorting it, and an unchanged one calls nothing", async () => {
  const store = listStore(Array.from({ length: 20_000 }, (_, i) => row(`r${String(i).padStart(5, "0")}`, { n: i % 1000 })));
  const observers = new Observers(store.read);
  const all = observe(observers, { collection: "todos", orderBy: ["n"] });
  await settled();
  assert.equal(all.calls.length, 1);
  observers.changed([store.write(row("new", { n: 500 }))]);
  await settled();
  const result = all.calls.at(-1);
  assert.equal(result.length, 20_001);
  assert.deepEqual(result, (await store.read({ collection: "todos", orderBy: ["n"] })).map((record) => record.id));
  observers.changed([store.write(row("new", { n: 500 }))]);
  await settled();
  assert.equal(all.calls.length, 2, "the same record again changes nothing");
  assert.equal(store.reads, 2, "one read at the start, one to check; the writes were placed from their rows");
});
