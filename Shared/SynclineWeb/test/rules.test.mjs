// The app's rules as the web client holds them (src/rules.ts, src/heldrules.ts): what the
// gateway's intake refuses for a role, refused at the call by the same checks.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ClientRules } from "../dist/rules.js";
import { HeldRules, ruleReason } from "../dist/heldrules.js";

const document = {
  version: 3, default: "deny",
  collections: {
    recipes: {
      schema: {
        type: "object", required: ["title"],
        properties: {
          title: { type: "string", minLength: 1, maxLength: 20, pattern: "^[A-Z]" },
          minutes: { type: "integer", minimum: 0 },
          kind: { enum: ["main", "dessert"] },
          photo: { type: "file", contentTypes: ["image/*"], maxSize: 1000 },
        },
      },
      write: { delete: ["owner", "author"], publish: ["owner"], fields: { price: ["owner"] } },
      immutable: ["kind"],
    },
    notes: { schema: { type: "object", additionalProperties: false, properties: { text: { type: "string" } } } },
  },
};
const rules = ClientRules.compile(document);
const op = (type, data, collection = "recipes") => ({ op_id: "o1", type, collection, id: "r1", ...(data ? { data } : {}) });

test("an upsert must match the whole schema, and the refusal names the rule and the field", () => {
  assert.equal(rules.version, 3);
  assert.equal(rules.screen(op("upsert", { title: "Soup" }), "editor"), null);
  assert.deepEqual(rules.screen(op("upsert", { minutes: 5 }), "editor"), {
    rule: "recipes.schema", pointer: "/data/title", detail: "title is required",
  });
  assert.equal(rules.screen(op("upsert", { title: "soup" }), "editor").pointer, "/data/title");
  assert.equal(rules.screen(op("upsert", { title: "Soup", minutes: 1.5 }), "editor").pointer, "/data/minutes");
  assert.equal(rules.screen(op("upsert", { title: "Soup", kind: "starter" }), "editor").pointer, "/data/kind");
  const photo = (type, size) => ({ $blob: { sha256: "a".repeat(64), size, content_type: type } });
  assert.equal(rules.screen(op("upsert", { title: "Soup", photo: photo("image/png", 10) }), "editor"), null);
  assert.equal(rules.screen(op("upsert", { title: "Soup", photo: photo("text/html", 10) }), "editor").pointer, "/data/photo");
  assert.equal(rules.screen(op("upsert", { title: "Soup", photo: photo("image/png", 5000) }), "editor").pointer, "/data/photo");
});

test("a patch checks the fields it sets, and may not remove a required one", () => {
  assert.equal(rules.screen(op("patch", { minutes: 3 }), "editor"), null);
  assert.equal(rules.screen(op("patch", { minutes: null }), "editor"), null);
  assert.equal(rules.screen(op("patch", { title: null }), "editor").detail, "title is required and cannot be removed");
  assert.equal(rules.screen(op("patch", { colour: "red" }, "notes"), "editor").pointer, "/data/colour");
});

test("op type rights follow the role; what an author may do waits for the server", () => {
  assert.equal(rules.screen(op("publish"), "editor").rule, "recipes.write.publish");
  assert.equal(rules.screen(op("publish"), "owner"), null);
  assert.equal(rules.screen(op("delete"), "editor"), null);
  assert.equal(rules.screen(op("upsert", { title: "Soup" }), "viewer").rule, "recipes.write.upsert");
  // A role not known yet: only what no role decides.
  assert.equal(rules.screen(op("publish"), null), null);
});

test("a collection the rules do not name follows their default", () => {
  assert.deepEqual(rules.screen(op("upsert", { a: 1 }, "todos"), "owner"), {
    rule: "default", pointer: "/collection", detail: "the rules name no collection 'todos' and refuse the others",
  });
  assert.equal(ClientRules.compile({ version: 1, collections: {} }).screen(op("upsert", { a: 1 }, "todos"), "owner"), null);
  assert.equal(ClientRules.compile("not a document"), null);
});

test("held rules read what the database keeps: a personal space's writer is its owner", async () => {
  const meta = new Map([["rules", { document, etag: '"rules-3"' }]]);
  const store = { meta: async (key) => meta.get(key) };
  const personal = await HeldRules.read(store, undefined);
  assert.equal(personal.role, "owner");
  assert.equal(personal.version, 3);
  assert.equal(personal.screen(op("publish")), null);
  const shared = await HeldRules.read(store, "space-1");
  assert.equal(shared.role, null);
  meta.set("role", "editor");
  assert.equal((await HeldRules.read(store, "space-1")).screen(op("publish")).rule, "recipes.write.publish");
  const none = await HeldRules.read({ meta: async () => undefined }, undefined);
  assert.equal(none.screen(op("upsert", { anything: true }, "todos")), null);
  assert.equal(ruleReason("recipes.schema"), "rule:recipes.schema");
});

test("a call is checked at the call, shows its guess as a patch would, and is sent without it", async () => {
  const { checkOp, InvalidOpError } = await import("../dist/validation.js");
  const { pushBody } = await import("../dist/batching.js");
  const { RecordState } = await import("../dist/merge.js");
  const call = { op_id: "00000000-0000-4000-8000-000000000001", type: "call", collection: "items", id: "rope", name: "reserve", args: { qty: 2 }, guess: { reserved: 2 }, hlc: "1763800000000-00001-d" };
  checkOp(call);
  assert.throws(() => checkOp({ ...call, name: "bad name" }), (error) => error instanceof InvalidOpError && error.field === "name");
  assert.throws(() => checkOp({ ...call, args: { n: NaN } }), InvalidOpError);
  assert.throws(() => checkOp({ ...call, guess: [1] }), (error) => error.field === "guess");
  const sent = JSON.parse(pushBody("device-1", [call]));
  assert.equal(sent.ops[0].guess, undefined);
  assert.deepEqual(sent.ops[0].args, { qty: 2 });
  const state = new RecordState();
  state.apply(call);
  assert.deepEqual(Object.fromEntries(state.fields), { reserved: 2 });
});

test("an increment, add or remove is checked against the field's schema as the gateway checks it", () => {
  const merging = (type, field, extra) => ({ op_id: "o1", type, collection: "recipes", id: "r1", field, ...extra });
  const tagged = ClientRules.compile({
    version: 1, collections: { recipes: { schema: { type: "object", properties: {
      title: { type: "string" }, minutes: { type: "integer", minimum: 0 }, rating: { type: "number" },
      tags: { type: "array", items: { type: "string" } },
    } } } },
  });
  assert.equal(tagged.screen(merging("increment", "minutes", { by: -3 }), "editor"), null, "a minimum is judged when applied");
  assert.equal(tagged.screen(merging("increment", "rating", { by: 0.5 }), "editor"), null);
  assert.deepEqual(tagged.screen(merging("increment", "title", { by: 1 }), "editor"), {
    rule: "recipes.schema", pointer: "/field", detail: "title is not a number: it cannot be incremented",
  });
  assert.equal(tagged.screen(merging("increment", "minutes", { by: 0.5 }), "editor").pointer, "/by");
  assert.equal(tagged.screen(merging("add", "tags", { values: ["quick"] }), "editor"), null);
  assert.equal(tagged.screen(merging("add", "tags", { values: ["quick", 3] }), "editor").pointer, "/values/1");
  assert.equal(tagged.screen(merging("remove", "minutes", { values: [1] }), "editor").pointer, "/field");
  assert.equal(rules.screen(merging("increment", "servings", { by: 1 }), "editor"), null, "a field the schema does not close off");
  assert.equal(rules.screen({ ...merging("add", "tags", { values: ["x"] }), collection: "notes" }, "editor").pointer, "/field");
});
