// Managing spaces (src/spaces.ts): each call's request, the server's views read into the
// app's names, and an unexpected answer thrown with the server's detail.
import { test } from "node:test";
import assert from "node:assert/strict";
import { SignIn } from "../dist/signin.js";
import { Spaces } from "../dist/spaces.js";

/** A gateway answering `routes["METHOD /path"]` (`[status, json]`); every request is kept. */
function serve(routes) {
  const seen = [];
  globalThis.fetch = async (url, init) => {
    const key = `${init.method} ${new URL(url).pathname}`;
    seen.push({ key, body: init.body === undefined ? undefined : JSON.parse(init.body) });
    const [status, json] = routes[key] ?? [404, { detail: `no route ${key}` }];
    return new Response(json === undefined ? null : JSON.stringify(json), { status });
  };
  return seen;
}

const spaces = () => new Spaces("http://gateway.test", new SignIn(async () => "token", () => {}));

test("spaces, invitations and members are read into the app's names", async () => {
  const seen = serve({
    "GET /v1/spaces": [200, { items: [{ space_id: "s1", name: "Family", role: "owner", personal: false }] }],
    "POST /v1/spaces": [201, { space_id: "s2", name: "Boat", role: "owner", personal: false }],
    "POST /v1/spaces/s1/invitations": [201, { invitation_id: "i1", code: "c0de", role: "viewer", expires_at: "2026-12-01T00:00:00Z" }],
    "POST /v1/invitations/c0de/accept": [200, { space_id: "s1", role: "viewer" }],
    "GET /v1/spaces/s1/members": [200, { items: [{ user_id: "ann", role: "owner", joined_at: "2026-11-01T00:00:00Z" }] }],
  });
  const client = spaces();
  assert.deepEqual(await client.list(), [{ spaceID: "s1", name: "Family", role: "owner", personal: false }]);
  assert.deepEqual(await client.create("Boat"), { spaceID: "s2", name: "Boat", role: "owner", personal: false });
  assert.deepEqual(await client.invite("s1", "viewer", 3600), { invitationID: "i1", code: "c0de", role: "viewer", expiresAt: "2026-12-01T00:00:00Z" });
  assert.deepEqual(await client.accept("c0de"), { spaceID: "s1", role: "viewer" });
  assert.deepEqual(await client.members("s1"), [{ userID: "ann", role: "owner", joinedAt: "2026-11-01T00:00:00Z" }]);
  assert.deepEqual(seen.map((request) => request.body), [undefined, { name: "Boat" }, { role: "viewer", expires_in: 3600 }, undefined, undefined]);
});

test("roles, removals and deletion send what the server expects, with ids escaped in the path", async () => {
  const seen = serve({
    "PATCH /v1/spaces/s1/members/user%2F1": [200, {}],
    "DELETE /v1/spaces/s1/members/user%2F1": [204, undefined],
    "DELETE /v1/spaces/s1": [204, undefined],
  });
  const client = spaces();
  await client.setRole("editor", "user/1", "s1");
  await client.removeMember("user/1", "s1");
  await client.delete("s1");
  assert.deepEqual(seen.map((request) => request.key), [
    "PATCH /v1/spaces/s1/members/user%2F1", "DELETE /v1/spaces/s1/members/user%2F1", "DELETE /v1/spaces/s1",
  ]);
  assert.deepEqual(seen[0].body, { role: "editor" });
});

test("an answer other than the expected one is thrown with the server's detail", async () => {
  serve({ "POST /v1/invitations/expired/accept": [410, { code: "invitation_expired", detail: "This invitation has expired." }] });
  await assert.rejects(spaces().accept("expired"), /server answered 410: This invitation has expired\./);
});
