// The published types: what TypeScript accepts and refuses in an app (test/types), and the
// README's examples as written (each TypeScript block of it, compiled).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const here = (path) => fileURLToPath(new URL(path, import.meta.url));

test("typed collections, queries and events compile as apps use them, and misuse does not", () => {
  const readme = readFileSync(here("../README.md"), "utf8");
  const blocks = [...readme.matchAll(/```(tsx?)\n([^]*?)```/g)];
  assert.ok(blocks.length >= 3, "the README has TypeScript examples");
  rmSync(here("types/readme"), { recursive: true, force: true });
  mkdirSync(here("types/readme"));
  // Each block is a module of its own; top-level await as in an app's module.
  blocks.forEach(([, language, code], index) => writeFileSync(here(`types/readme/example-${index + 1}.${language}`), `${code}\nexport {};\n`));
  try {
    execFileSync("tsc", ["-p", here("types")], { encoding: "utf8" });
  } catch (error) {
    assert.fail(`tsc -p test/types:\n${error.stdout}${error.stderr}`);
  }
});
