// The offline copy of the site (registered by playbook.js once the page is live).
// build.py writes CACHE (named after this build) and FILES (every file of the build,
// relative to this script) into the copy it serves as sw.js.
//
// One rule keeps a reader's copy honest: a page is only ever shown from a complete cache
// of its own build. So the page comes from this build's cache first (never half a newer
// build with an older one's files, and never an older build once a newer one was shown:
// a newer build is shown only after its service worker has cached all of it and taken
// over, and that deletes the older caches). A new build reaches a reader as the browser
// finds a new sw.js: it installs in the background, takes over, and the open page offers
// a reload (playbook.js). The network answers only what no cache holds; a 5xx or a
// network error there falls back to any cached copy.
//
// Install: fetch every file into this build's cache, then check that the page it got
// belongs to this build (every asset it names is in FILES: a page fetched while the site
// was being updated would not), else give up and leave the older copy in place.
// Activate: delete the caches of older builds, take over open pages.
"use strict";
const CACHE = "__CACHE__";
const FILES = __FILES__;
const PAGE = new URL("./", self.location).href;
const PREFIX = "playbook-";

function assetsNamedBy(html) {
  const names = new Set();
  for (const match of html.matchAll(/(?:src|href)="([^"#?]+)"/g)) {
    const url = new URL(match[1], PAGE);
    if (url.origin === self.location.origin && url.href.startsWith(PAGE) && url.href !== PAGE) names.add(url.href);
  }
  return names;
}

self.addEventListener("install", function (event) {
  event.waitUntil(caches.open(CACHE).then(function (cache) {
    return cache.addAll(FILES).then(() => cache.match(PAGE)).then((page) => page.text()).then(function (html) {
      const listed = new Set(FILES.map((name) => new URL(name, self.location).href));
      const strangers = [...assetsNamedBy(html)].filter((url) => !listed.has(url));
      if (strangers.length) {
        throw new Error("the page fetched is not this build's (it names " + strangers[0] + ")");
      }
    }).catch(function (error) {
      return caches.delete(CACHE).then(() => { throw error; });
    });
  }).then(() => self.skipWaiting()));
});

self.addEventListener("activate", function (event) {
  event.waitUntil(caches.keys().then(function (names) {
    return Promise.all(names.filter((name) => name.startsWith(PREFIX) && name !== CACHE).map((name) => caches.delete(name)));
  }).then(() => self.clients.claim()));
});

// The network, but a 5xx or a failure gives way to a cached copy when there is one.
function networkThenAnyCache(request) {
  return fetch(request).then(function (response) {
    if (response.status < 500) return response;
    return caches.match(request, { ignoreMethod: true }).then((hit) => hit || response);
  }, function (error) {
    return caches.match(request, { ignoreMethod: true }).then(function (hit) {
      if (hit) return hit;
      throw error;
    });
  });
}

self.addEventListener("fetch", function (event) {
  const request = event.request;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin || (request.method !== "GET" && request.method !== "HEAD")) return;
  const path = url.origin + url.pathname;
  const isPage = path === PAGE || path === PAGE + "index.html";
  event.respondWith(caches.open(CACHE).then(function (cache) {
    // HEAD: the page's preflight asks whether the runtime's files are there.
    return cache.match(isPage ? PAGE : request, { ignoreMethod: true }).then((hit) => hit || networkThenAnyCache(request));
  }));
});
