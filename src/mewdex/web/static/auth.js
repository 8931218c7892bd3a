// Signed-in browsers: every state-changing request (fetch, HTMX, or XHR via mewdexCsrfToken) carries the session's CSRF token
// from the readable `__Host-mewdex_csrf` cookie (`mewdex_csrf` on plain http to a LAN address) in `X-CSRF-Token`; the API refuses it otherwise (403).
"use strict";
// The base path mewdex is served under (MEWDEX_BASE_PATH, e.g. "/memes"; "" at the root), from <html data-base>:
// every script builds its local URLs as BASE + "/path" (app.js api() adds it to the paths it is given).
const BASE = document.documentElement.dataset.base || "";
(() => {
  const cookie = (name) => (document.cookie.match(new RegExp(`(?:^|;\\s*)${name}=([^;]+)`)) || [])[1];
  const csrf = () => cookie("__Host-mewdex_csrf") || cookie("__Secure-mewdex_csrf") || cookie("mewdex_csrf") || "";
  const unsafe = (method) => !["GET", "HEAD", "OPTIONS"].includes((method || "GET").toUpperCase());
  // For XMLHttpRequest senders (uploads with progress): the header value, or "" when not signed in.
  window.mewdexCsrfToken = () => decodeURIComponent(csrf());
  const plainFetch = window.fetch.bind(window);
  window.fetch = (input, init = {}) => {
    const method = init.method || (input instanceof Request ? input.method : "GET");
    const token = csrf();
    if (token && unsafe(method)) {
      const headers = new Headers(init.headers || (input instanceof Request ? input.headers : undefined));
      headers.set("X-CSRF-Token", decodeURIComponent(token));
      init = {...init, headers};
    }
    return plainFetch(input, init);
  };
  document.addEventListener("htmx:configRequest", (event) => {
    const token = csrf();
    if (token && unsafe(event.detail.verb)) event.detail.headers["X-CSRF-Token"] = decodeURIComponent(token);
  });
})();
