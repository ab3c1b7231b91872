// @syncline/web/files: the package's modules a page may load, for a service worker to
// precache, so that an app opens, reads, writes and queues with no network at all. A page
// loads `coreFiles` with `createClient` and `lazyFiles` on first use (the sync engine when
// syncing starts, spaces, the app's rules); a service worker that cached only what the
// first visit happened to load would open the app offline without its sync engine.
// (A test derives both lists from the built modules' imports: they cannot drift.)

/** Loaded with `createClient`: the entry point and what it imports. */
export const coreFiles: readonly string[] = [
  "backoff.js", "blobs.js", "client.js", "collection.js", "database.js", "dates.js", "heldrules.js", "hlc.js", "idb.js", "index.js", "json.js",
  "merge.js", "observers.js", "outbox.js", "query.js", "records.js", "schema.js", "signin.js", "store.js", "tabs.js", "validation.js",
];

/** Loaded on first use, by dynamic `import()`. */
export const lazyFiles: readonly string[] = [
  "batching.js", "engine.js", "http.js", "op.js", "pull.js", "pushanswer.js", "rules.js", "schedule.js", "spaces.js", "syncsteps.js", "transfers.js", "turns.js",
];
