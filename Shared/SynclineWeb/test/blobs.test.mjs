import { test } from "node:test";
import assert from "node:assert/strict";
import { blobRefOf, blobValue, isContentType, referencedBlobs, sha256Hex } from "../dist/blobs.js";

const a = "a".repeat(64), b = "b".repeat(64);
const ref = (sha, size = 3, type = "image/png") => blobValue({ sha256: sha, size, content_type: type });

test("references are found anywhere in data, each once, as the server counts them", () => {
  const data = { photo: ref(a), steps: [{ text: "stir", photo: ref(b) }, ref(a)], title: "$blob" };
  assert.deepEqual(referencedBlobs(data).sort(), [a, b]);
  assert.deepEqual(referencedBlobs({ title: "soup" }), []);
});

test("a malformed reference is no reference", () => {
  assert.equal(blobRefOf({ $blob: { sha256: a } }), null);
  assert.equal(blobRefOf({ $blob: { sha256: a.toUpperCase(), size: 1, content_type: "image/png" } }), null);
  assert.equal(blobRefOf({ $blob: { sha256: a, size: -1, content_type: "image/png" } }), null);
  assert.equal(blobRefOf({ $blob: { sha256: a, size: 1, content_type: "png" } }), null);
  assert.equal(blobRefOf({ ...ref(a), extra: 1 }), null);
  assert.deepEqual(blobRefOf(ref(a, 9, "text/plain; charset=utf-8")), { sha256: a, size: 9, content_type: "text/plain; charset=utf-8" });
});

test("content types are media types", () => {
  for (const good of ["image/jpeg", "application/pdf", "text/plain; charset=utf-8"]) assert.ok(isContentType(good), good);
  for (const bad of ["", "image", "image/", "/png", "a/b/c", "imäge/png"]) assert.ok(!isContentType(bad), bad);
});

test("sha256Hex is the file's name", async () => {
  assert.equal(await sha256Hex(new TextEncoder().encode("abc").buffer), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
});
