// Counters and sets converge: random interleavings of every op type give one record,
// whatever the order, the grouping or the duplicates — as the Swift property test holds
// the server's merge to.
import { test } from "node:test";
import assert from "node:assert/strict";
import { RecordState } from "../dist/merge.js";
import { canonicalJSON } from "../dist/json.js";

function random(seed) {
  let state = seed >>> 0;
  return (n) => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state % n;
  };
}

const pick = (next, items) => items[next(items.length)];
const elements = ["a", "b", "c", 1, { k: "v" }];

function randomOps(next, count) {
  const some = () => Array.from({ length: 1 + next(3) }, () => pick(next, elements));
  const data = (allowingNull) => {
    const data = {};
    if (next(2)) data.title = pick(next, ["x", "y"]);
    if (next(3) === 0) data.n = allowingNull && next(2) ? null : next(11) - 5;
    if (next(3) === 0) data.tags = allowingNull && next(2) ? null : some();
    return data;
  };
  return Array.from({ length: count }, (_, n) => {
    const op = { op_id: `00000000-0000-4000-8000-${String(n).padStart(12, "0")}`, collection: "todos", id: "t1",
      hlc: `${1763800000000 + next(16)}-00000-dev-${pick(next, ["a", "b"])}` };
    switch (next(12)) {
      case 0: return { ...op, type: "upsert", data: data(false) };
      case 1: case 2: {
        const changes = data(true);
        return { ...op, type: "patch", data: Object.keys(changes).length ? changes : { title: "z" } };
      }
      case 3: return { ...op, type: "delete" };
      case 4: case 5: case 6: return { ...op, type: "increment", field: "n", by: next(2) ? next(7) - 3 : 0.5 };
      case 7: case 8: case 9: return { ...op, type: "add", field: "tags", values: some() };
      default: return { ...op, type: "remove", field: "tags", values: some() };
    }
  });
}

function shown(ops) {
  const state = new RecordState();
  for (const op of ops) state.apply(op);
  return canonicalJSON({ deleted: state.deleted, data: state.isShown ? state.visibleData : "none" });
}

test("random interleavings of counters, sets and whole writes converge", () => {
  for (let seed = 1; seed <= 300; seed++) {
    const next = random(seed);
    const ops = randomOps(next, 1 + next(30));
    const expected = shown(ops);
    for (let round = 0; round < 6; round++) {
      const order = [...ops];
      for (let index = order.length - 1; index > 0; index--) {
        const other = next(index + 1);
        [order[index], order[other]] = [order[other], order[index]];
      }
      // A retried op applied again changes nothing.
      for (let copies = next(4); copies > 0; copies--) order.splice(next(order.length + 1), 0, pick(next, ops));
      const seen = new Set();
      const once = order.filter((op) => !seen.has(op.op_id) && seen.add(op.op_id));
      assert.equal(shown(once), expected, `seed ${seed}`);
    }
  }
});
