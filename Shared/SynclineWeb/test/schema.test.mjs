// The schema of typed collections: what each kind takes and refuses, and where it says.
import { test } from "node:test";
import assert from "node:assert/strict";
import { schema, SchemaError } from "../dist/index.js";

const recipe = schema.object({
  title: schema.string(),
  minutes: schema.optional(schema.integer()),
  rating: schema.nullable(schema.number()),
  tags: schema.array(schema.string()),
  level: schema.literal("easy", "hard"),
  author: schema.object({ name: schema.string() }),
  photo: schema.optional(schema.file()),
  extra: schema.optional(schema.json()),
});

const good = { title: "Soup", rating: null, tags: ["warm"], level: "easy", author: { name: "Ana" } };

function problem(value) {
  try {
    recipe.check(value, "data");
    return null;
  } catch (error) {
    assert.ok(error instanceof SchemaError, String(error));
    return `${error.path}: ${error.message}`;
  }
}

test("a value of the shape passes, optional fields missing or present", () => {
  assert.equal(problem(good), null);
  const photo = { $blob: { sha256: "ab".repeat(32), size: 3, content_type: "image/png" } };
  assert.equal(problem({ ...good, minutes: 20, rating: 4.5, photo, extra: { any: [1, "x"] } }), null);
});

test("each kind refuses what is not of it, naming the place", () => {
  assert.equal(problem({ ...good, title: 3 }), "data.title: data.title must be a string");
  assert.equal(problem({ ...good, minutes: 2.5 }), "data.minutes: data.minutes must be a whole number");
  assert.equal(problem({ ...good, rating: Infinity }), "data.rating: data.rating must be a finite number");
  assert.equal(problem({ ...good, tags: ["a", 1] }), "data.tags[1]: data.tags[1] must be a string");
  assert.equal(problem({ ...good, level: "medium" }), 'data.level: data.level must be one of "easy", "hard"');
  assert.equal(problem({ ...good, author: {} }), "data.author.name: data.author.name must be a string");
  assert.equal(problem({ ...good, photo: { $blob: { sha256: "x" } } }), "data.photo: data.photo must be a file reference: blobValue(await client.attach(file))");
  assert.equal(problem({ ...good, titel: "typo" }), "data.titel: data.titel is not a field of this shape");
  const { title, ...untitled } = good;
  void title;
  assert.equal(problem(untitled), "data.title: data.title must be a string");
  assert.equal(problem([good]), "data: data must be an object");
});
