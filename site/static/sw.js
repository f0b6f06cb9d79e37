// The offline copy of the site (registered by playbook.js once the page is live).
// build.py writes CACHE (named after this build) and FILES (every file of the build,
// relative to this script) into the copy it serves as sw.js.
//
// Install: fetch every file into this build's cache. Activate: delete the caches of
// older builds, take over open pages. Fetch: versioned and hashed files from the cache
// first; the page itself from the network first, so a new build is seen at once when
// online, and from the cache when not.
"use strict";
const CACHE = "__CACHE__";
const FILES = __FILES__;
const PAGE = new URL("./", self.location).href;

self.addEventListener("install", function (event) {
  event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(FILES)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", function (event) {
  event.waitUntil(caches.keys().then(function (names) {
    return Promise.all(names.filter((name) => name.startsWith("playbook-") && name !== CACHE).map((name) => caches.delete(name)));
  }).then(() => self.clients.claim()));
});

self.addEventListener("fetch", function (event) {
  const request = event.request;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin || (request.method !== "GET" && request.method !== "HEAD")) return;
  if (request.mode === "navigate" || url.href.split("#")[0] === PAGE) {
    event.respondWith(fetch(request).catch(() => caches.open(CACHE).then((cache) => cache.match(PAGE))));
    return;
  }
  event.respondWith(caches.open(CACHE).then(function (cache) {
    // HEAD: the page's preflight asks whether the runtime's files are there.
    return cache.match(request, { ignoreMethod: true }).then((hit) => hit || fetch(request));
  }));
});
