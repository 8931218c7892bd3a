// Times in the reader's zone and language. The server prints every instant as
// <time datetime="…Z" data-when>UTC text</time>; this script rewrites the text with Intl.DateTimeFormat in
// the page's language (<html lang>) and the account's time zone (<html data-tz>, else the browser's), on
// load and whenever a fragment or a script adds more. Scripts format their own instants with
// mewdexTime.format(iso, options) (options as Intl.DateTimeFormat's, e.g. {timeZone: a schedule's zone}).
"use strict";
(() => {
  const root = document.documentElement;
  const supported = (zone) => {
    if (!zone) return false;
    try { new Intl.DateTimeFormat("en", {timeZone: zone}); return true; } catch (e) { return false; }
  };
  const browserZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  const zone = () => (supported(root.dataset.tz) ? root.dataset.tz : browserZone());
  const cache = new Map();
  function formatter(options) {
    const key = JSON.stringify(options);
    if (!cache.has(key)) cache.set(key, new Intl.DateTimeFormat(root.lang || undefined, options));
    return cache.get(key);
  }
  function format(iso, options = {}) {
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso || "");
    const parts = ["weekday", "year", "month", "day", "hour", "minute", "dateStyle", "timeStyle"];
    const base = parts.some((k) => k in options) ? {} : {dateStyle: "medium", timeStyle: "short"};
    const opts = {...base, ...options};
    if (!supported(opts.timeZone)) opts.timeZone = zone();
    return formatter(opts).format(date);
  }
  function apply(scope) {
    const fresh = "time[data-when]:not([data-local])";
    const nodes = scope.matches && scope.matches(fresh) ? [scope] : [];
    if (scope.querySelectorAll) nodes.push(...scope.querySelectorAll(fresh));
    for (const el of nodes) {
      const iso = el.getAttribute("datetime");
      if (!iso) continue;
      el.title = `${el.textContent.trim()} · ${zone()}`;
      el.textContent = format(iso);
      el.dataset.local = "1";
    }
  }
  window.mewdexTime = {format, zone, browserZone, supported};
  const start = () => {
    apply(document);
    new MutationObserver((changes) => {
      for (const change of changes) for (const node of change.addedNodes) if (node.nodeType === 1) apply(node);
    }).observe(document.body, {childList: true, subtree: true});
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
