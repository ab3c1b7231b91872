// The web fake server refuses as the gateway does: `Tests/Conformance/refusals.json` holds
// requests with the gateway's status and problem code (written by the gateway's route
// tests, which hold the Swift fake to the same answers). Each request to a route this fake
// serves must get the same status and code here.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { FakeSyncServer } from "../dist/testing.js";

const file = JSON.parse(readFileSync(fileURLToPath(new URL("../../../Tests/Conformance/refusals.json", import.meta.url)), "utf8"));

// The routes this fake serves (`FakeSyncServer.answer`); the others it answers 501.
const served = [
  /^POST \/v1\/devices$/, /^POST \/v1\/devices\/[^/]+\/set-aside$/, /^POST \/v1\/sync\/push$/,
  /^GET \/v1\/sync\/jobs\/[^/]+$/, /^GET \/v1\/sync\/pull$/,
];

test("the web fake server answers the requests it serves with the gateway's status and code", async () => {
  const server = new FakeSyncServer("http://gateway.test");
  const registered = await server.answer(new Request("http://gateway.test/v1/devices", {
    method: "POST", headers: { Authorization: "Bearer alice" }, body: JSON.stringify({ name: "phone", platform: "web" }),
  }));
  const device = (await registered.json()).device_id;
  const checked = file.refusals.filter((request) => served.some((route) => route.test(`${request.method} ${request.path.split("?")[0]}`)));
  assert.ok(checked.length >= 20, `only ${checked.length} of the file's requests are served here`);
  const disagreements = [];
  for (const request of checked) {
    const response = await server.answer(new Request(`http://gateway.test${request.path.replaceAll("{device}", device)}`, {
      method: request.method,
      headers: request.authorized ? { Authorization: "Bearer alice" } : {},
      body: request.body === null ? undefined : request.body.replaceAll("{device}", device),
    }));
    const text = await response.text();
    const code = response.headers.get("Content-Type")?.startsWith("application/problem+json") ? JSON.parse(text).code : null;
    if (response.status !== request.status || code !== request.code) {
      disagreements.push(`${request.method} ${request.path} ${request.body ?? ""}: the gateway answers ${request.status} ${request.code}, this fake ${response.status} ${code}`);
    }
  }
  assert.deepEqual(disagreements, []);
});
