// The web client's pure parts: batching, backoff and SSE framing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Backoff, retryAfterSeconds } from "../dist/backoff.js";
import { batchSize, halved, pushBody, maxOpsPerPush, traceparent } from "../dist/batching.js";
import { ServerSentEvents } from "../dist/sse.js";
import { formatHLC, parseHLC } from "../dist/hlc.js";

const op = (n, size = 10) => ({ op_id: `00000000-0000-4000-8000-${String(n).padStart(12, "0")}`, type: "upsert", collection: "todos", id: `t${n}`, data: { text: "x".repeat(size) } });

test("a batch takes at most 500 ops", () => {
  const ops = Array.from({ length: 1200 }, (_, n) => op(n));
  assert.equal(batchSize("dev", ops), maxOpsPerPush);
  assert.equal(batchSize("dev", ops.slice(0, 7)), 7);
});

test("a batch's body stays within the byte limit, and always holds one op", () => {
  const ops = Array.from({ length: 50 }, (_, n) => op(n, 1000));
  const count = batchSize("dev", ops, 10_000);
  assert.ok(count > 1 && count < 50);
  assert.ok(new TextEncoder().encode(pushBody("dev", ops.slice(0, count))).length <= 10_000);
  assert.ok(new TextEncoder().encode(pushBody("dev", ops.slice(0, count + 1))).length > 10_000);
  assert.equal(batchSize("dev", [op(1, 50_000)], 10_000), 1, "an op too big alone still goes, to be refused by the server");
  assert.equal(batchSize("dev", []), 0);
});

test("bytes are counted as UTF-8", () => {
  const ops = Array.from({ length: 10 }, (_, n) => ({ ...op(n), data: { text: "é".repeat(500) } }));
  const count = batchSize("dev", ops, 5_000);
  assert.ok(new TextEncoder().encode(pushBody("dev", ops.slice(0, count))).length <= 5_000);
});

test("after a 413 the byte limit halves, down to 1 KiB", () => {
  assert.equal(halved(1_048_576), 524_288);
  assert.equal(halved(1_500), 1_024);
});

test("backoff doubles with full jitter, is capped and honours Retry-After", () => {
  const backoff = new Backoff(0.25, 2);
  assert.deepEqual([1, 1, 1, 1].map(() => backoff.next(undefined, 1)), [0.25, 0.5, 1, 2]);
  assert.equal(backoff.next(undefined, 1), 2, "capped");
  assert.equal(backoff.next(undefined, 0.5), 1, "full jitter");
  assert.equal(backoff.next(7, 0.1), 7, "never sooner than Retry-After");
  backoff.reset();
  assert.equal(backoff.next(undefined, 1), 0.25);
});

test("Retry-After in seconds or as a date", () => {
  assert.equal(retryAfterSeconds("3"), 3);
  assert.equal(retryAfterSeconds(null), undefined);
  assert.equal(retryAfterSeconds("Wed, 21 Oct 2015 07:28:10 GMT", Date.parse("Wed, 21 Oct 2015 07:28:00 GMT")), 10);
  assert.equal(retryAfterSeconds("soon"), undefined);
});

test("SSE events split across chunks and line endings", () => {
  const parser = new ServerSentEvents();
  assert.deepEqual(parser.feed('data: {"type":"hel'), []);
  assert.deepEqual(parser.feed('lo"}\n\n: comment\n\ndata: a\r\ndata: b\r\n\r\nda'), ['{"type":"hello"}', "a\nb"]);
  assert.deepEqual(parser.feed("ta:c\n\n"), ["c"]);
  assert.deepEqual(parser.feed("data: d\r\n\r"), []);
  assert.deepEqual(parser.feed("\n"), ["d"]);
});

test("HLC text round-trips and compares as (ms, counter, node)", () => {
  const text = formatHLC({ milliseconds: 1_763_800_000_123, counter: 42, node: "dev-a" });
  assert.equal(text, "1763800000123-00042-dev-a");
  assert.deepEqual(parseHLC(text), { milliseconds: 1_763_800_000_123, counter: 42, node: "dev-a" });
  assert.equal(parseHLC("nonsense"), null);
  assert.ok(formatHLC({ milliseconds: 5, counter: 10, node: "a" }) > formatHLC({ milliseconds: 5, counter: 9, node: "z" }));
});

test("a push's traceparent has its batch's key as trace id, and a new span each attempt", () => {
  const key = "01a218be-944d-7df0-a736-ba5c2c66d9c0";
  const first = traceparent(key), retry = traceparent(key);
  assert.equal(first.traceID, "01a218be944d7df0a736ba5c2c66d9c0");
  assert.equal(retry.traceID, first.traceID);
  assert.notEqual(first.header, retry.header);
  assert.match(first.header, /^00-01a218be944d7df0a736ba5c2c66d9c0-[0-9a-f]{16}-01$/);
  const other = traceparent("not a uuid");
  assert.match(other.header, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
  assert.equal(other.header.split("-")[1], other.traceID);
});
