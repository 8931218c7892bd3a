// mewdex service worker (served as <base>/sw.js, scope "<base>/"; web/routers/pwa.py); BASE below is the base
// path (MEWDEX_BASE_PATH, "" at the root) read from the scope, and every path here is under it.
// under BASE, the base path (MEWDEX_BASE_PATH) read from the worker's own scope.
// 1. The shell only: styles, scripts and icons under /static/ come from the network and are kept in a
//    cache for when it is down. Pages, the API and media are never cached here (per user, they change).
// 2. The Web Share Target: a picture shared to the installed app arrives as a POST to /share-target;
//    its files wait in Cache Storage ("mewdex-shared"). Any page on any site can post that form too, so
//    the files are only a proposal: the upload page shows them and sends them through the normal
//    upload path (POST /api/v1/memes, with its limits, quota and CSRF check) only when the person
//    presses Upload; Discard, like Upload, clears them here (app.js, sharedProposal).
"use strict";

const SHELL = "mewdex-shell-v2";
const SHARED = "mewdex-shared";
const BASE = new URL(self.registration.scope).pathname.replace(/\/$/, "");
const SHELL_FILES = [
  "/static/mewdex.css",
  "/static/app.js",
  "/static/tags.js",
  "/static/recaption.js",
  "/static/auth.js",
  "/static/times.js",
  "/static/htmx.min.js",
  "/static/icons/icon.svg",
  "/static/icons/icon-192.png",
].map((path) => BASE + path);

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(SHELL).then((cache) => cache.addAll(SHELL_FILES)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches.keys()
      .then((keys) => Promise.all(keys.filter((k) => k.startsWith("mewdex-shell-") && k !== SHELL).map((k) => caches.delete(k))))
      .then(() => self.clients.claim()),
  );
});

// Network first (a new release's scripts match its pages at once); the cached copy when offline.
async function shellAsset(request) {
  const cache = await caches.open(SHELL);
  try {
    const resp = await fetch(request);
    if (resp.ok) await cache.put(request, resp.clone());
    return resp;
  } catch (e) {
    const cached = await cache.match(request);
    if (cached) return cached;
    throw e;
  }
}

async function receiveShare(request) {
  let count = 0;
  try {
    const form = await request.formData();
    const files = form.getAll("files").filter((f) => f && typeof f === "object" && f.size > 0);
    const cache = await caches.open(SHARED);
    for (const old of await cache.keys()) await cache.delete(old);  // the last share, and whose it was
    for (const [i, file] of files.entries()) {
      const headers = {"Content-Type": file.type || "application/octet-stream", "X-Filename": encodeURIComponent(file.name || `shared-${i + 1}`)};
      await cache.put(`${BASE}/shared-files/${i}`, new Response(file, {headers}));
      count++;
    }
  } catch (e) {
    return Response.redirect(`${BASE}/upload?shared=failed`, 303);
  }
  return Response.redirect(`${BASE}/upload?shared=${count}`, 303);
}

self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (url.origin !== self.location.origin) return;
  if (event.request.method === "POST" && url.pathname === BASE + "/share-target") {
    event.respondWith(receiveShare(event.request));
  } else if (event.request.method === "GET" && url.pathname.startsWith(BASE + "/static/") && SHELL_FILES.includes(url.pathname)) {
    event.respondWith(shellAsset(event.request));
  }
});
