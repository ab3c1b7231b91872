// The sync loop's policy (src/schedule.ts): when the next pass runs and what it does. The
// Swift client's SyncSchedule follows the same rules (Tests/UnitTests/SyncScheduleTests.swift).
import { test } from "node:test";
import assert from "node:assert/strict";
import { liveJobWait, SyncSchedule } from "../dist/schedule.js";

const synced = (jobsInFlight) => ({ synced: true, jobsInFlight });

test("a first pass asks for running jobs", () => {
  assert.equal(new SyncSchedule(30).followUp(undefined, true), "ask");
});

test("with nothing running the loop waits for a wake or the next poll", () => {
  const schedule = new SyncSchedule(30);
  assert.equal(schedule.wait(synced(false), false), 30);
  assert.equal(schedule.wait(synced(false), true), null, "a live stream wakes the loop");
  assert.equal(new SyncSchedule(null).wait(synced(false), false), null);
});

test("running jobs are polled at doubling intervals up to a second without a stream", () => {
  const schedule = new SyncSchedule(30);
  assert.deepEqual(Array.from({ length: 7 }, () => schedule.wait(synced(true), false)), [0.05, 0.1, 0.2, 0.4, 0.8, 1, 1]);
  schedule.wait(synced(false), false);
  assert.equal(schedule.wait(synced(true), false), 0.05, "once nothing runs, the next job starts from the shortest interval");
});

test("with a live stream running jobs are left to it for ten seconds", () => {
  const schedule = new SyncSchedule(30);
  assert.equal(schedule.wait(synced(true), true), liveJobWait);
  schedule.jobsFollowed(true);
  assert.equal(schedule.followUp(undefined, true), "wait");
  schedule.waitedInVain(true);
  assert.equal(schedule.followUp(undefined, true), "ask", "nothing heard within the wait: the jobs are asked for");
});

test("failures back off with jitter and never sooner than the server's Retry-After", () => {
  const schedule = new SyncSchedule(30);
  const failed = { synced: false };
  assert.deepEqual(Array.from({ length: 9 }, () => schedule.wait(failed, false, 1)), [0.25, 0.5, 1, 2, 4, 8, 16, 30, 30]);
  assert.equal(schedule.wait(failed, false, 0.5), 15, "full jitter");
  assert.equal(schedule.wait({ synced: false, retryAfter: 45 }, false, 0), 45);
  schedule.wait(synced(false), false);
  assert.equal(schedule.wait(failed, false, 1), 0.25, "a pass that syncs resets the backoff");
});

test("a wait that times out pulls only without a stream and with polling on", () => {
  assert.equal(new SyncSchedule(30).waitedInVain(true), false, "a live stream pokes when there is something to pull");
  assert.equal(new SyncSchedule(30).waitedInVain(false), true);
  assert.equal(new SyncSchedule(null).waitedInVain(false), false);
});

test("what the stream told decides whether a job is asked for", () => {
  const schedule = new SyncSchedule(30);
  schedule.jobsFollowed(true);
  assert.equal(schedule.followUp({ status: "succeeded", checkpoint: "7", troubled: false }, true), "settle");
  assert.equal(schedule.followUp({ status: "succeeded", checkpoint: "7", troubled: true }, true), "ask", "its results say which ops were refused");
  assert.equal(schedule.followUp({ status: "dead", checkpoint: null, troubled: true }, true), "ask");
  assert.equal(schedule.followUp(undefined, true), "wait");
  assert.equal(schedule.followUp(undefined, false), "ask", "without a stream every job is asked for");
});

test("a stream opened or an overdue outcome asks for jobs once", () => {
  const schedule = new SyncSchedule(30);
  schedule.jobsFollowed(true);
  schedule.streamOpened();
  assert.equal(schedule.followUp(undefined, true), "ask");
  schedule.jobsFollowed(true);
  assert.equal(schedule.followUp(undefined, true), "wait");
  schedule.outcomeOverdue();
  assert.equal(schedule.followUp(undefined, true), "ask");
  schedule.jobsFollowed(false);
  assert.equal(schedule.followUp(undefined, true), "ask", "without a stream, asking never stops");
});
