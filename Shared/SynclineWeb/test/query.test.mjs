// Local query rules: the same records and the same expectations as the Swift client's
// operator test (Tests/UnitTests/QueryTests.swift), so both clients select alike.
import { test } from "node:test";
import assert from "node:assert/strict";
import { matches, ordered, checkQuery } from "../dist/query.js";
import { QueryError } from "../dist/index.js";

const recipes = {
  r1: { title: "Pancakes", minutes: 20, tags: ["sweet", "quick"], vegan: false, rating: 4.5 },
  r2: { title: "Salad", minutes: 10, tags: ["vegan", "quick"], vegan: true },
  r3: { title: "Stew", minutes: 120, tags: [], vegan: true, rating: null, source: { book: "Joy", page: 12 } },
  r4: { title: "pasta", minutes: 25.5, tags: ["quick"], vegan: false, rating: 3 },
  r5: { title: "Quick bread", minutes: "about an hour" },
};
const rows = Object.entries(recipes).map(([id, data]) => ({ id, data }));
const ids = (where, options = {}) => ordered(rows.filter((row) => matches(row.id, row.data, where)), options).map((row) => row.id);

test("every condition selects what the Swift client selects", () => {
  assert.deepEqual(ids({ minutes: { eq: 20 } }), ["r1"]);
  assert.deepEqual(ids({ minutes: { lt: 25 } }), ["r1", "r2"]);
  assert.deepEqual(ids({ minutes: { lte: 25.5 } }), ["r1", "r2", "r4"]);
  assert.deepEqual(ids({ minutes: { gt: 25 } }), ["r3", "r4", "r5"], "strings sort after numbers");
  assert.deepEqual(ids({ minutes: { gte: 120 } }), ["r3", "r5"]);
  assert.deepEqual(ids({ title: { in: ["Salad", "Stew", "Nothing"] } }), ["r2", "r3"]);
  assert.deepEqual(ids({ rating: { in: [3, null] } }), ["r2", "r3", "r4", "r5"], "null in a list matches missing and null");
  assert.deepEqual(ids({ title: { in: [] } }), []);
  assert.deepEqual(ids({ title: { contains: "a" } }), ["r1", "r2", "r4", "r5"]);
  assert.deepEqual(ids({ title: { contains: "P" } }), ["r1", "r4"], "whatever the case");
  assert.deepEqual(ids({ title: { contains: "BRE" } }), ["r5"]);
  assert.deepEqual(ids({ title: { startsWith: "pa" } }), ["r1", "r4"], "a prefix, whatever the case");
  assert.deepEqual(ids({ title: { startsWith: "cakes" } }), []);
  assert.deepEqual(ids({ tags: { startsWith: "qu" } }), [], "an array has no prefix");
  assert.deepEqual(ids({ id: { startsWith: "R" } }), ["r1", "r2", "r3", "r4", "r5"]);
  assert.deepEqual(ids({ tags: { contains: "quick" } }), ["r1", "r2", "r4"]);
  assert.deepEqual(ids({ tags: { contains: "qui" } }), [], "an array holds elements, not substrings");
  assert.deepEqual(ids({ vegan: { eq: true } }), ["r2", "r3"]);
  assert.deepEqual(ids({ vegan: { eq: false } }), ["r1", "r4"]);
  assert.deepEqual(ids({ rating: { isNull: true } }), ["r2", "r3", "r5"]);
  assert.deepEqual(ids({ rating: { eq: null } }), ["r2", "r3", "r5"]);
  assert.deepEqual(ids({ rating: { isNull: false } }), ["r1", "r4"]);
  assert.deepEqual(ids({ "source.book": { eq: "Joy" } }), ["r3"]);
  assert.deepEqual(ids({ "source.page": { gt: 10 } }), ["r3"]);
  assert.deepEqual(ids({ vegan: { eq: true }, minutes: { lt: 60 } }), ["r2"]);
  assert.deepEqual(ids({ id: { in: ["r1", "r5"] } }), ["r1", "r5"]);
  assert.deepEqual(ids({ id: { gt: "r3" } }), ["r4", "r5"]);
});

test("order, limit and offset", () => {
  assert.deepEqual(ids(undefined, { orderBy: ["minutes"] }), ["r2", "r1", "r4", "r3", "r5"]);
  assert.deepEqual(ids(undefined, { orderBy: ["-minutes"] }), ["r5", "r3", "r4", "r1", "r2"]);
  assert.deepEqual(ids(undefined, { orderBy: ["rating"] }), ["r2", "r3", "r5", "r4", "r1"], "missing and null first, then by id");
  assert.deepEqual(ids(undefined, { orderBy: ["-vegan", "title"] }), ["r2", "r3", "r1", "r4", "r5"]);
  assert.deepEqual(ids(undefined, { orderBy: ["title"] }), ["r1", "r5", "r2", "r3", "r4"]);
  assert.deepEqual(ids(undefined, { orderBy: ["minutes"], limit: 2, offset: 1 }), ["r1", "r4"]);
  assert.deepEqual(ids(undefined, { offset: 3 }), ["r4", "r5"]);
});

test("a query that is not one throws QueryError naming what is wrong, before it reads anything", () => {
  const refused = (query) => {
    try {
      checkQuery(query);
      return null;
    } catch (error) {
      assert.ok(error instanceof QueryError, String(error));
      return error.message;
    }
  };
  assert.equal(refused({ where: { minutes: { lt: 30 } }, orderBy: ["-minutes", "title"], limit: 10, offset: 0 }), null);
  assert.equal(refused({ collection: "recipes", where: { "source.book": { eq: "Joy" }, id: { in: ["r1", null] } } }), null);
  assert.equal(refused(undefined), null);
  assert.match(refused({ where: { minutes: { between: [1, 2] } } }), /where\.minutes: unknown operator "between" \(eq, gt, gte, lt, lte, in, contains, startsWith, isNull\)/);
  assert.match(refused({ where: { minutes: 30 } }), /where\.minutes is a condition object such as \{eq: value\}/);
  assert.match(refused({ where: { minutes: { in: 30 } } }), /where\.minutes\.in must be an array/);
  assert.match(refused({ where: { minutes: { isNull: "yes" } } }), /where\.minutes\.isNull must be true or false/);
  assert.match(refused({ where: { minutes: { lt: NaN } } }), /where\.minutes\.lt must be a JSON value/);
  assert.match(refused({ where: { cooked: { gt: new Date() } } }), /where\.cooked\.gt must be a JSON value/);
  assert.match(refused({ where: { "a..b": { eq: 1 } } }), /"a\.\.b" is not a field/);
  assert.match(refused({ where: [] }), /where is an object of field conditions/);
  assert.match(refused({ orderBy: "minutes" }), /orderBy is an array of field names/);
  assert.match(refused({ orderBy: ["-"] }), /orderBy is an array of field names/);
  assert.match(refused({ limit: -1 }), /limit must be a whole number/);
  assert.match(refused({ offset: 1.5 }), /offset must be a whole number/);
  assert.match(refused({ filter: { minutes: { lt: 3 } } }), /unknown query option "filter" \(where, orderBy, limit, offset\)/);
});

// The Swift client's test of the same name: a backend writing `datetime.isoformat()` and a
// device writing UTC, compared and ordered by time.
test("dates with an offset compare and order by time", () => {
  const rows = Object.entries({
    a: { at: "2026-11-22T10:00:00+01:00" },
    b: { at: "2026-11-22T09:30:00Z" },
    c: { at: "2026-11-22T08:00:00-00:30" },
    d: { at: "2026-11-22T09:15:00.123456+00:00", log: ["2026-11-22T10:00:00+01:00", "not a date"] },
    e: { at: "soon" },
  }).map(([id, data]) => ({ id, data }));
  const ids = (where, options = {}) => ordered(rows.filter((row) => matches(row.id, row.data, where)), options).map((row) => row.id);
  assert.deepEqual(ids({ at: { eq: "2026-11-22T09:00:00.000Z" } }), ["a"]);
  assert.deepEqual(ids({ at: { gt: "2026-11-22T09:00:00Z", lt: "2026-11-22T11:00:00+01:00" } }), ["b", "d"]);
  assert.deepEqual(ids({ at: { lt: "2026-11-22T09:00:00Z" } }), ["c"]);
  assert.deepEqual(ids({ at: { isNull: false } }, { orderBy: ["at"] }), ["c", "a", "d", "b", "e"]);
  assert.deepEqual(ids({ log: { contains: "2026-11-22T09:00:00Z" } }), ["d"]);
});

