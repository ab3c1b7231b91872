// The package as npm would publish it: what `npm pack` puts in, that every module it holds
// finds its imports there, and that the entry points export the public API and nothing else.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const manifest = JSON.parse(readFileSync(`${root}/package.json`, "utf8"));

test("npm pack builds the package (prepack) and packs the built modules, their types and maps, and nothing else", () => {
  const [packed] = JSON.parse(execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts=false"], { cwd: root, encoding: "utf8" }));
  const files = new Set(packed.files.map((file) => file.path));
  for (const file of ["package.json", "README.md", "LICENSE", "dist/index.js", "dist/index.d.ts", "dist/react.js", "dist/react.d.ts"]) {
    assert.ok(files.has(file), `${file} is packed`);
  }
  for (const file of files) {
    assert.match(file, /^(package\.json|README\.md|LICENSE|dist\/[a-z]+\.(js|d\.ts|js\.map|d\.ts\.map))$/, `${file} belongs in the package`);
    if (file.endsWith(".js")) {
      assert.ok(files.has(`${file}.map`), `${file} has a source map`);
      const map = JSON.parse(readFileSync(`${root}/${file}.map`, "utf8"));
      assert.ok(map.sourcesContent?.[0]?.length > 0, `${file}.map carries its source`);
      // Every relative import resolves inside the package, the dynamic ones (loaded on first use) too.
      for (const [, target] of readFileSync(`${root}/${file}`, "utf8").matchAll(/(?:from |import\()"(\.[^"]+)"/g)) {
        assert.ok(files.has(`dist/${target.replace("./", "")}`), `${file} imports ${target}, which is packed`);
      }
    }
  }
  for (const entry of Object.values(manifest.exports)) {
    for (const target of typeof entry === "string" ? [entry] : Object.values(entry)) assert.ok(files.has(target.replace("./", "")), `${target} is packed`);
  }
  assert.ok(packed.size < 250_000, `the tarball is ${packed.size} bytes`);  // 208 KB with the fake server and source maps carrying their sources
});

test("the entry points export the public API and no internals", async () => {
  const core = await import(`${root}/dist/index.js`);
  assert.deepEqual(Object.keys(core).sort(), [
    "InvalidOpError", "QueryError", "SchemaError", "SignedOutError", "SpaceGoneError", "StorageBlockedError", "blobValue", "createClient", "schema",
  ]);
  assert.deepEqual(Object.keys(manifest.exports).sort(), [".", "./files", "./package.json", "./react", "./testing"]);
  assert.deepEqual(Object.keys(manifest.peerDependencies ?? {}), ["react"]);
  assert.equal(manifest.dependencies, undefined, "no runtime dependencies");
  const react = readFileSync(`${root}/dist/react.js`, "utf8");
  assert.deepEqual([...react.matchAll(/^export function (\w+)/gm)].map((match) => match[1]).sort(), ["SynclineProvider", "useClient", "useCollection", "useQuery", "useRecord", "useSuspenseQuery", "useSyncStatus"]);
  assert.deepEqual([...react.matchAll(/from "([^".][^"]*)"/g)].map((match) => match[1]), ["react"], "React is the one package it imports");
});

test("a page loads the core alone first: the code that talks to the server comes by dynamic import", () => {
  const staticImports = (file) => [...readFileSync(`${root}/dist/${file}`, "utf8").matchAll(/^(?:import|export) [^;]*? from "\.\/([^"]+)"/gm)].map((match) => match[1]);
  const core = new Set();
  const walk = (file) => {
    if (core.has(file)) return;
    core.add(file);
    for (const target of staticImports(file)) walk(target);
  };
  walk("index.js");
  for (const online of ["engine.js", "syncsteps.js", "transfers.js", "http.js", "spaces.js"]) {
    assert.ok(existsSync(`${root}/dist/${online}`), `${online} is a module of its own`);
    assert.ok(!core.has(online), `${online} is loaded on demand, not with the entry point (core: ${[...core].join(", ")})`);
  }
  for (const local of ["client.js", "store.js", "validation.js", "merge.js", "query.js"]) assert.ok(core.has(local), `${local} is in the core`);
});

test("the files a service worker precaches are every module a page may load: the core's, and those loaded on first use", async () => {
  const imports = (file, dynamic) => [...readFileSync(`${root}/dist/${file}`, "utf8")
    .matchAll(dynamic ? /import\("\.\/([^"]+)"\)/g : /^(?:import|export) [^;]*? from "\.\/([^"]+)"/gm)].map((match) => match[1]);
  const closure = (starts) => {
    const found = new Set();
    const walk = (file) => {
      if (found.has(file)) return;
      found.add(file);
      for (const target of imports(file, false)) walk(target);
    };
    starts.forEach(walk);
    return found;
  };
  const core = closure(["index.js"]);
  const all = new Set(core);
  for (let grew = true; grew;) {
    grew = false;
    for (const file of [...all]) {
      for (const target of closure(imports(file, true))) if (!all.has(target)) (all.add(target), grew = true);
    }
  }
  const { coreFiles, lazyFiles } = await import(`${root}/dist/files.js`);
  assert.deepEqual([...coreFiles].sort(), [...core].sort());
  assert.deepEqual([...lazyFiles].sort(), [...all].filter((file) => !core.has(file)).sort());
});
