// File transfers (src/transfers.ts) through the sync engine in Node, over the in-memory
// database and a scripted gateway (test/support): a file goes up before the op that
// references it, with PUT or, past 4 MiB, with tus in pieces resumed where the server says;
// a file the server refuses sets its ops aside; a file the server lost is sent again.
import { test } from "node:test";
import assert from "node:assert/strict";
import { engine, gateway, MemoryLocal, usualServer } from "./support/engine-harness.mjs";

const sha = (char) => char.repeat(64);
const paths = (requests) => requests.map((request) => `${request.method} ${request.path}`);

test("a file is uploaded before the op that references it is pushed", async () => {
  const local = new MemoryLocal();
  await local.setMeta("device_id", "device-1");
  local.attach(sha("a"), new Blob(["a picture"]), "image/png");
  local.enqueue("photos", "p1", { picture: sha("a") }, [sha("a")]);
  const usual = usualServer();
  const requests = gateway((request) => (request.method === "PUT" ? { status: 201, json: {} } : usual(request)));
  const { engine: sync, events } = engine(local);
  await sync.sync(5);

  assert.deepEqual(paths(requests).slice(0, 3), ["GET /v1/rules", `PUT /v1/blobs/${sha("a")}`, "POST /v1/sync/push"]);
  assert.equal(requests[1].headers["Content-Type"], "image/png");
  assert.equal(await requests[1].body.text(), "a picture");
  assert.equal(local.files.get(sha("a")).state, "stored");
  assert.ok(events.some((event) => event.name === "uploaded" && event.detail.sha256 === sha("a")));
  assert.equal(local.outbox.length, 0);
});

test("a file the server refuses sets aside the ops that reference it, and the others are pushed", async () => {
  const local = new MemoryLocal();
  await local.setMeta("device_id", "device-1");
  local.attach(sha("b"), new Blob(["too large, says the server"]));
  const referencing = local.enqueue("photos", "p1", { picture: sha("b") }, [sha("b")]);
  const other = local.enqueue("notes", "n1", { title: "kept" });
  const usual = usualServer();
  const requests = gateway((request) => (request.method === "PUT" ? { status: 413, json: { detail: "file too large" } } : usual(request)));
  const { engine: sync, events } = engine(local);
  await sync.sync(5);

  assert.deepEqual(local.inState("set_aside"), [referencing]);
  assert.equal(local.files.get(sha("b")).state, "refused");
  const pushed = requests.filter((request) => request.path === "/v1/sync/push").flatMap((request) => request.body.ops.map((op) => op.op_id));
  assert.deepEqual(pushed, [other]);
  assert.deepEqual(events.filter((event) => event.name === "setAside").map((event) => event.detail), [{ opID: referencing, reason: "file too large" }]);
  assert.ok(events.some((event) => event.name === "uploadRefused"));
});

test("a file the server no longer holds (409 blob_missing) is uploaded again, then its op is pushed again", async () => {
  const local = new MemoryLocal();
  await local.setMeta("device_id", "device-1");
  local.attach(sha("c"), new Blob(["purged on the server"]));
  await local.blobUploaded(sha("c"));
  const op = local.enqueue("photos", "p1", { picture: sha("c") }, [sha("c")]);
  let missing = true;
  const usual = usualServer();
  const requests = gateway((request) => {
    if (request.method === "PUT") {
      missing = false;
      return { status: 201, json: {} };
    }
    if (request.path === "/v1/sync/push" && missing) return { status: 409, json: { code: "blob_missing", sha256: sha("c"), op_index: 0, detail: "no such file" } };
    return usual(request);
  });
  const { engine: sync } = engine(local);
  await sync.sync(5);

  assert.deepEqual(paths(requests).slice(0, 4), ["GET /v1/rules", "POST /v1/sync/push", `PUT /v1/blobs/${sha("c")}`, "POST /v1/sync/push"]);
  assert.deepEqual(requests[3].body.ops.map((pushed) => pushed.op_id), [op]);
  assert.equal(local.outbox.length, 0);
});

test("a file past 4 MiB goes up with tus in pieces, and an interrupted upload resumes where the server says", async () => {
  const local = new MemoryLocal();
  await local.setMeta("device_id", "device-1");
  const size = 9 * 1024 * 1024;
  local.attach(sha("d"), new Blob([new Uint8Array(size)]));
  local.enqueue("videos", "v1", { video: sha("d") }, [sha("d")]);
  let received = 0, failOnce = true;
  const usual = usualServer();
  const requests = gateway((request) => {
    if (request.method === "POST" && request.path === "/v1/uploads") {
      assert.equal(request.headers["Upload-Length"], String(size));
      return { status: 201, json: {}, headers: { Location: "/v1/uploads/u1" } };
    }
    if (request.method === "HEAD") return { status: 200, headers: { "Upload-Offset": String(received) } };
    if (request.method === "PATCH") {
      assert.equal(request.headers["Upload-Offset"], String(received), "each piece starts where the server is");
      if (received > 0 && failOnce) {
        failOnce = false;
        return { status: 503, json: { detail: "restarting" } };
      }
      received += request.body.size;
      return { status: 204, headers: { "Upload-Offset": String(received) } };
    }
    return usual(request);
  });
  const { engine: sync } = engine(local);
  await assert.rejects(sync.sync(5), /upload answered 503/);
  assert.equal(local.files.get(sha("d")).upload_url, "/v1/uploads/u1", "the upload's address is kept, to resume");
  await sync.sync(5);

  assert.equal(received, size);
  assert.equal(requests.filter((request) => request.method === "POST" && request.path === "/v1/uploads").length, 1, "resumed, not started again");
  assert.ok(paths(requests).includes("HEAD /v1/uploads/u1"));
  assert.equal(local.files.get(sha("d")).state, "stored");
  assert.equal(local.outbox.length, 0);
});
