// Taking turns (src/turns.ts): one run at a time for every caller waiting, as in the Swift
// clients and services (Tests/UnitTests/TakingTurnsTests.swift).
import { test } from "node:test";
import assert from "node:assert/strict";
import { TakingTurns } from "../dist/turns.js";

test("the first caller leads at once, and the work stops when nobody waits", () => {
  const turns = new TakingTurns();
  assert.equal(turns.arrive("a"), true);
  assert.equal(turns.running, true);
  assert.deepEqual(turns.takeWaiting(), []);
  assert.equal(turns.finish(), undefined);
  assert.equal(turns.running, false);
  assert.equal(turns.arrive("b"), true, "after the work stopped, the next caller leads again");
});

test("callers during a run are served together by the next run, led by the first of them", () => {
  const turns = new TakingTurns();
  assert.equal(turns.arrive("leader"), true);
  assert.deepEqual(turns.takeWaiting(), []);
  assert.deepEqual(["b", "c", "d"].map((caller) => turns.arrive(caller)), [false, false, false]);
  assert.equal(turns.finish(), "b");
  assert.equal(turns.running, true);
  assert.deepEqual(turns.takeWaiting(), ["c", "d"]);
  assert.equal(turns.finish(), undefined);
});

test("a request made after a run started waits for the next run", () => {
  const turns = new TakingTurns();
  turns.arrive(1);
  turns.arrive(2);
  assert.equal(turns.finish(), 2);
  assert.deepEqual(turns.takeWaiting(), []);
  assert.equal(turns.arrive(3), false, "3 arrived after run 2 took its requests");
  assert.equal(turns.finish(), 3);
  assert.deepEqual(turns.takeWaiting(), []);
  assert.equal(turns.finish(), undefined);
});
