// The shopping list's service worker. On install it caches the app and every module of the
// Syncline package it may load — the core's and those loaded on first use, as
// @syncline/web/files lists them — so the list opens, shows what it holds, and takes and
// queues edits with no network at all. Requests to the Syncline server are never cached.
// Cache first: a new version of the app changes `version`.
import { coreFiles, lazyFiles } from "../dist/files.js";

const version = "shopping-list-1";
const files = ["./", "./index.html", "./app.js", ...[...coreFiles, ...lazyFiles].map((file) => `../dist/${file}`)];

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(version).then((cache) => cache.addAll(files)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(caches.keys()
    .then((names) => Promise.all(names.filter((name) => name !== version).map((name) => caches.delete(name))))
    .then(() => self.clients.claim()));
});

self.addEventListener("fetch", (event) => {
  if (event.request.method !== "GET" || new URL(event.request.url).origin !== location.origin) return;
  // The page's own query (?gateway=…) does not make another file.
  event.respondWith(caches.match(event.request, { ignoreSearch: true }).then((cached) => cached ?? fetch(event.request)));
});
