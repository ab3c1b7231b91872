// The gateway's HTTP (src/http.ts): the bearer token, asked again once after a 401; a server
// out of reach as a failure worth retrying; an answer's problem, detail and Retry-After.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Gateway, Retry } from "../dist/http.js";

function serve(answer) {
  const seen = [];
  globalThis.fetch = async (url, init) => {
    seen.push({ url, authorization: init.headers.Authorization, contentType: init.headers["Content-Type"] });
    return answer(seen.length);
  };
  return seen;
}

test("a 401 asks the app for a fresh token once, and the request is sent again with it", async () => {
  const asked = [];
  const gateway = new Gateway("http://gateway.test", async (refresh) => {
    asked.push(refresh);
    return refresh ? "fresh" : "stale";
  });
  const seen = serve((n) => new Response(n === 1 ? "" : "{}", { status: n === 1 ? 401 : 200 }));
  const answer = await gateway.send("POST", "/v1/devices", "{}");
  assert.equal(answer.status, 200);
  assert.deepEqual(asked, [false, true]);
  assert.deepEqual(seen.map((request) => request.authorization), ["Bearer stale", "Bearer fresh"]);
  assert.equal(seen[0].contentType, "application/json");
});

test("a token still refused after the refresh is answered as the server answered, not asked for a third time", async () => {
  const asked = [];
  const gateway = new Gateway("http://gateway.test", async (refresh) => (asked.push(refresh), "token"));
  serve(() => new Response(JSON.stringify({ detail: "token expired" }), { status: 401 }));
  const answer = await gateway.send("GET", "/v1/sync/pull");
  assert.equal(answer.status, 401);
  assert.equal(answer.detail, "token expired");
  assert.deepEqual(asked, [false, true]);
});

test("a server out of reach is a failure worth retrying", async () => {
  const gateway = new Gateway("http://gateway.test", async () => "token");
  globalThis.fetch = async () => { throw new TypeError("fetch failed"); };
  await assert.rejects(gateway.send("GET", "/v1/sync/pull"), (error) => error instanceof Retry && /cannot reach the server: fetch failed/.test(error.message));
});

test("an answer carries its problem, its detail for people and the server's Retry-After", async () => {
  const gateway = new Gateway("http://gateway.test", async () => "token");
  serve(() => new Response(JSON.stringify({ code: "rate_limited", detail: "slow down" }), { status: 429, headers: { "Retry-After": "3" } }));
  const answer = await gateway.send("POST", "/v1/sync/push", "{}");
  assert.equal(answer.problem.code, "rate_limited");
  assert.equal(answer.detail, "slow down");
  assert.equal(answer.retryAfter, 3);
  serve(() => new Response("<html>bad gateway</html>", { status: 502 }));
  const text = await gateway.send("GET", "/v1/sync/pull");
  assert.deepEqual(text.problem, {});
  assert.equal(text.detail, "<html>bad gateway</html>", "a body that is no problem is shown as text");
  assert.equal(text.retryAfter, undefined);
});
