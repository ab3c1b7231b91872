// The gateway's HTTP (src/http.ts): the bearer token, asked again once after a 401; a server
// out of reach as a failure worth retrying; an answer's problem, detail and Retry-After.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Gateway, Retry } from "../dist/http.js";
import { SignIn, tokenExpiry } from "../dist/signin.js";

/** A sign-in over `provider`; the refusals it reports are kept in `refusals`. */
function signIn(provider) {
  const refusals = [];
  const kept = new SignIn(provider, (reason, detail) => refusals.push({ reason, detail }));
  kept.refusals = refusals;
  return kept;
}

/** A JWT (unsigned: the client never checks signatures) expiring at `exp` (seconds). */
const jwt = (exp) => `e30.${Buffer.from(JSON.stringify({ sub: "u", exp })).toString("base64url")}.sig`;

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
  const gateway = new Gateway("http://gateway.test", signIn(async (refresh) => {
    asked.push(refresh);
    return refresh ? "fresh" : "stale";
  }));
  const seen = serve((n) => new Response(n === 1 ? "" : "{}", { status: n === 1 ? 401 : 200 }));
  const answer = await gateway.send("POST", "/v1/devices", "{}");
  assert.equal(answer.status, 200);
  assert.deepEqual(asked, [false, true]);
  assert.deepEqual(seen.map((request) => request.authorization), ["Bearer stale", "Bearer fresh"]);
  assert.equal(seen[0].contentType, "application/json");
});

test("a token still refused after the refresh is answered as the server answered, not asked for a third time", async () => {
  const asked = [];
  const signedIn = signIn(async (refresh) => (asked.push(refresh), "token"));
  const gateway = new Gateway("http://gateway.test", signedIn);
  serve(() => new Response(JSON.stringify({ detail: "token expired", token: "expired" }), { status: 401 }));
  const answer = await gateway.send("GET", "/v1/sync/pull");
  assert.equal(answer.status, 401);
  assert.equal(answer.detail, "token expired");
  assert.deepEqual(asked, [false, true]);
  assert.equal(signedIn.state, "refused");
  await gateway.send("GET", "/v1/sync/pull");
  assert.deepEqual(signedIn.refusals, [{ reason: "expired", detail: "token expired" }], "told once, not on every request");
  serve(() => new Response("{}", { status: 200 }));
  await gateway.send("GET", "/v1/sync/pull");
  assert.equal(signedIn.state, "accepted");
});

test("the token is kept until shortly before it expires, an opaque one until a 401, and callers at once share one ask", async () => {
  const now = Date.now();
  let asked = 0;
  const expiring = signIn(async () => (asked++, jwt(Math.floor(now / 1000) + 120)));
  const [a, b] = await Promise.all([expiring.token(false, now), expiring.token(false, now)]);
  assert.equal(a, b);
  assert.equal(asked, 1, "two callers at once, one ask");
  await expiring.token(false, now + 60_000);
  assert.equal(asked, 1, "a minute later it is still good");
  await expiring.token(false, now + 100_000);
  assert.equal(asked, 2, "within 30 s of its expiry it is asked for anew");
  await expiring.token(true, now + 100_000);
  assert.equal(asked, 3, "a refresh always asks");
  let opaque = 0;
  const kept = signIn(async () => (opaque++, "opaque-token"));
  for (let i = 0; i < 5; i++) await kept.token(false);
  assert.equal(opaque, 1);
  assert.equal(tokenExpiry(jwt(1700000000)), 1700000000 * 1000);
  assert.equal(tokenExpiry("not.a-jwt"), null);
  const failing = signIn(async () => { throw new Error("offline"); });
  await assert.rejects(failing.token(false), /offline/);
  await assert.rejects(failing.token(false), /offline/, "a failed ask is not kept");
});

test("a server out of reach is a failure worth retrying", async () => {
  const gateway = new Gateway("http://gateway.test", signIn(async () => "token"));
  globalThis.fetch = async () => { throw new TypeError("fetch failed"); };
  await assert.rejects(gateway.send("GET", "/v1/sync/pull"), (error) => error instanceof Retry && /cannot reach the server: fetch failed/.test(error.message));
});

test("an answer carries its problem, its detail for people and the server's Retry-After", async () => {
  const gateway = new Gateway("http://gateway.test", signIn(async () => "token"));
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
