// The conformance vectors the Swift code generates: the web client's merge rules and clock
// must give exactly what the server's and the Swift client's give.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { ClockState } from "../dist/hlc.js";
import { RecordState, localMerge, stampOf } from "../dist/merge.js";
import { canonicalJSON } from "../dist/json.js";
import { utcDateTime } from "../dist/dates.js";
import { checkOp } from "../dist/validation.js";
import { InvalidOpError } from "../dist/index.js";
import { compactPullPage, readPullPage } from "../dist/pull.js";
import { pushAnswer } from "../dist/pushanswer.js";

const vectors = JSON.parse(readFileSync(fileURLToPath(new URL("../../../Tests/Conformance/vectors.json", import.meta.url)), "utf8"));

function view(state) {
  if (!state || !state.isShown) return { shown: false };
  const visibility = state.publicVisibility;
  return {
    shown: true, deleted: state.deleted, data: state.visibleData, visibility, public_id: state.shownPublicID,
    can_fork: visibility !== "private" && state.visibility?.canFork === true, forked_from: state.fork?.publicID ?? null,
  };
}

function merged(ops, source) {
  const state = new RecordState();
  for (const op of ops) {
    if (op.type === "fork") state.forkFrom(source ?? {}, op.public_id, stampOf(op));
    else state.apply(op);
  }
  return view(state);
}

function permutations(items) {
  if (items.length <= 1) return [items];
  return items.flatMap((item, index) => permutations([...items.slice(0, index), ...items.slice(index + 1)]).map((rest) => [item, ...rest]));
}

test("the vectors file has cases of every kind", () => {
  assert.ok(vectors.merge.length >= 20 && vectors.local.length >= 5 && vectors.clock.length >= 5);
  const types = new Set(vectors.merge.flatMap((c) => c.ops.map((op) => op.type)));
  assert.deepEqual([...types].sort(), ["add", "delete", "fork", "increment", "patch", "publish", "remove", "unpublish", "upsert"]);
});

for (const c of vectors.merge) {
  test(`merge, every order: ${c.name}`, () => {
    for (const order of permutations(c.ops)) {
      assert.equal(canonicalJSON(merged(order, c.source)), canonicalJSON(c.expect), order.map((op) => op.op_id.slice(-2)).join(","));
    }
  });
}

for (const c of vectors.local) {
  test(`a device's view: ${c.name}`, () => {
    assert.equal(canonicalJSON(view(localMerge(c.ops, c.server))), canonicalJSON(c.expect));
    assert.equal(canonicalJSON(view(localMerge([...c.ops].reverse(), c.server))), canonicalJSON(c.expect), "reversed");
  });
}

test("the clock's send and receive rules, step by step", () => {
  const clock = new ClockState();
  for (const step of vectors.clock) {
    if ("observe" in step) clock.observe(step.observe);
    else assert.equal(clock.next(step.next, "dev-a"), step.expect);
  }
});

/** The op with the case's expansions set (see the file's `about`). */
function expanded(c) {
  const op = structuredClone(c.op);
  for (const [pointer, spec] of Object.entries(c.expand)) {
    let value;
    if ("repeat" in spec) value = spec.repeat.repeat(spec.count);
    else if ("items" in spec) value = Array.from({ length: spec.items }, (_, index) => index);
    else if ("number" in spec) value = Number(spec.number);
    else {
      value = true;
      for (let level = 0; level < spec.nest; level++) value = { a: value };
    }
    const path = pointer.split("/").slice(1);
    let target = op;
    for (const key of path.slice(0, -1)) target = target[key] ??= {};
    target[path[path.length - 1]] = value;
  }
  return op;
}

test("the vectors file has validation cases, refused and taken", () => {
  assert.ok(vectors.validation.filter((c) => c.refused).length > 20);
  assert.ok(vectors.validation.filter((c) => !c.refused).length > 10);
});

for (const c of vectors.validation) {
  test(`a write the server ${c.refused ? "refuses is refused" : "takes is taken"}: ${c.name}`, () => {
    let refused = null;
    try {
      checkOp(expanded(c));
    } catch (error) {
      assert.ok(error instanceof InvalidOpError, String(error));
      refused = { field: error.field, limit: error.limit };
    }
    assert.deepEqual(refused, c.refused);
  });
}

test("dates are written as toISOString() writes them, read to the millisecond, and shown in UTC", () => {
  assert.ok(vectors.date.length >= 10);
  for (const c of vectors.date) {
    if ("write" in c) assert.equal(new Date(c.write).toISOString(), c.expect, `writing ${c.write}`);
    else if ("show" in c) assert.equal(utcDateTime(c.show), c.expect, `showing ${c.show}`);
    else assert.equal(Date.parse(c.read), c.expect, `reading ${c.read}`);
  }
});

test("both forms of every pull page read as the same records", () => {
  assert.ok(vectors.pull.length >= 5);
  for (const c of vectors.pull) {
    const full = readPullPage(c.full);
    assert.deepEqual(readPullPage(c.compact), full, c.name);
    // The compact page has fewer bytes, and the fake server's compact form reads the same.
    assert.ok(JSON.stringify(c.compact).length < JSON.stringify(c.full).length || c.full.changes.length === 0, c.name);
    assert.deepEqual(readPullPage(compactPullPage(full)), full, c.name);
  }
});

test("a compact clock naming no device of its page makes the page unreadable", () => {
  const page = vectors.pull.find((c) => c.compact.changes.length > 0).compact;
  for (const hlc of [page.changes[0].hlc.slice(0, 20) + "9", page.changes[0].hlc.slice(0, 20), page.changes[0].hlc.slice(0, 20) + "x"]) {
    assert.throws(() => readPullPage({ ...page, changes: [{ ...page.changes[0], hlc }] }), /unreadable/, hlc);
  }
  assert.throws(() => readPullPage({ ...page, devices: "x" }), /unreadable/);
});

test("every answer the gateway gives a push comes to what SynclineClient does with it", () => {
  assert.ok(vectors.push_answers.length >= 10);
  const actions = new Set();
  for (const c of vectors.push_answers) {
    const decided = pushAnswer({
      status: c.status, body: c.body, detail: c.detail, retryAfter: c.retry_after, namesSpace: c.names_space, batchOps: c.batch_ops,
    });
    assert.deepEqual(decided, c.expect, c.name);
    actions.add(decided.action);
  }
  // Every action is among the gateway's answers: none is decided for answers it never gives.
  assert.deepEqual([...actions].sort(), ["accepted", "file_missing", "halve_batch", "retry", "set_aside", "unknown_device_or_space"]);
});
