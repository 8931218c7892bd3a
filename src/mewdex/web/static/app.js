// mewdex web UI: small vanilla scripts over server-rendered pages.
// Reads are rendered on the server (HTMX swaps fragments); every change goes through the JSON API.
// Strings come from the page's message catalogue (#i18n), never from this file.
"use strict";

const M = JSON.parse(document.getElementById("i18n").textContent);

// The message ``key`` with its {placeholders} filled; n === 1 picks ``<key>.one`` where there is one
// (the rule of dto/i18n.py translate).
function t(key, vars = {}) {
  if (vars.n === 1 && M[`${key}.one`] !== undefined) key = `${key}.one`;
  const msg = M[key] ?? key;
  return msg.replace(/\{(\w+)\}/g, (_, k) => (k in vars ? String(vars[k]) : `{${k}}`));
}

function errorText(body, status) {
  const err = body && body.error;
  if (err && err.code && M[`error.${err.code}`]) return M[`error.${err.code}`];
  if (err && err.message) return err.message;
  if (status === 0) return t("js.offline");
  return t("js.failed_status", {status});
}

async function api(method, url, body, headers = {}) {
  const init = {method, headers: {...headers}};
  if (body instanceof FormData) init.body = body;
  else if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  let resp;
  try {
    resp = await fetch(BASE + url, init);  // url: a path under the base path (MEWDEX_BASE_PATH)
  } catch (e) {
    return {ok: false, status: 0, body: null};
  }
  let data = null;
  try { data = await resp.json(); } catch (e) { /* an empty or non-JSON body (204) */ }
  return {ok: resp.ok, status: resp.status, body: data};
}

let toastTimer = null;
function toast(message, kind = "ok") {
  const box = document.getElementById("toast");
  box.textContent = message;
  box.className = `show ${kind}`;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { box.className = ""; }, 3500);
}

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
const memeOf = (el) => el.closest("[data-id]");

// ------------------------------------------------------------------ clipboard and media

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch (e) {
    const area = document.createElement("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    return ok;
  }
}

async function asPng(blob) {
  if (blob.type === "image/png") return blob;
  const bitmap = await createImageBitmap(blob);  // first frame of an animation
  const canvas = document.createElement("canvas");
  canvas.width = bitmap.width;
  canvas.height = bitmap.height;
  canvas.getContext("2d").drawImage(bitmap, 0, 0);
  return await new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
}

// A meme's bytes: `/media/{id}`, or the card's `data-src` (a shared collection's meme, read through the
// member route /api/v1/collections/{id}/media/{meme}: the chat's cards of a shared collection).
const mediaPathOf = (holder) => (holder && holder.dataset.src) || `/media/${holder && holder.dataset.id}`;

async function copyImage(holder) {
  try {
    let resp = await fetch(BASE + mediaPathOf(holder));
    if (!resp.ok) throw new Error(String(resp.status));
    // a clip, a sticker or a HEIC photo is no image the page can draw: its still thumbnail (the poster) is copied
    if (!/^image\/(png|jpeg|gif|webp|avif)$/.test(resp.headers.get("content-type") || "")) {
      resp = await fetch(BASE + mediaPathOf(holder) + "/thumbnail");
      if (!resp.ok) throw new Error(String(resp.status));
    }
    const png = await asPng(await resp.blob());
    await navigator.clipboard.write([new ClipboardItem({"image/png": png})]);
    toast(t("js.copied_image"));
    return true;
  } catch (e) {
    toast(t("js.copy_image_failed"), "error");
    return false;
  }
}

// A meme copied or shared from search results is a choice for that query (POST /api/v1/feedback;
// README "Learning from your choices"). Elsewhere there is no query, so nothing is learned.
function reportChoice(holder, kind) {
  const meta = holder && holder.closest("#results") && document.querySelector("#results .result-meta[data-query]");
  const query = meta ? meta.dataset.query.trim() : "";
  if (!query) return;
  api("POST", "/api/v1/feedback", {query, meme_id: holder.dataset.id, kind, source: "search"});
}

const EXTENSIONS = {
  "image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp", "image/avif": ".avif",
  "image/heic": ".heic", "video/mp4": ".mp4", "video/webm": ".webm", "application/x-tgsticker": ".tgs",
};

// The name a meme's file is saved under (the mirror of library.names.saved_name): its name plus its
// extension, unless the name ends in it already (a clip renamed "dance.webm" is never "dance.webm.webm").
function savedName(name, ext) {
  const lower = name.toLowerCase();
  return ext && name.length > ext.length && lower.endsWith(ext.toLowerCase()) ? name.slice(0, -ext.length) + ext : name + ext;
}

// Share (phones; shown where the browser has the Web Share API): the image itself as a file named
// "<name>.<ext>", or its link where files cannot be shared. A cancelled share says nothing.
async function shareMeme(holder) {
  const id = holder.dataset.id;
  try {
    const resp = await fetch(BASE + mediaPathOf(holder));
    if (!resp.ok) throw new Error(String(resp.status));
    const blob = await resp.blob();
    const name = savedName(holder.dataset.name || "meme", holder.dataset.ext || EXTENSIONS[blob.type] || "");
    const file = new File([blob], name, {type: blob.type});
    if (navigator.canShare && navigator.canShare({files: [file]})) {
      await navigator.share({files: [file], title: holder.dataset.name || ""});
    } else {
      await navigator.share({url: await mediaLink(id, holder), title: holder.dataset.name || ""});
    }
    reportChoice(holder, "share");
  } catch (e) {
    if (e && e.name === "AbortError") return;
    toast(t("js.share_failed"), "error");
  }
}
if (navigator.share) document.documentElement.classList.add("can-share");

// Signed in (login required): a signed, expiring link that works in chats without a session.
async function mediaLink(id, holder) {
  if (holder && holder.dataset.src) return location.origin + BASE + holder.dataset.src;  // a member's link
  if (window.mewdexCsrfToken && window.mewdexCsrfToken()) {
    try {
      const resp = await fetch(`${BASE}/api/v1/memes/${id}/signed-url`);
      if (resp.ok) return location.origin + BASE + (await resp.json()).url;
    } catch (e) { /* fall back to the plain link */ }
  }
  return `${location.origin}${BASE}/media/${id}`;
}

// Animated preview on hover/focus: swap the still thumbnail for the animated one; a clip plays.
function setPreview(target, on) {
  const clip = target && target.querySelector ? target.querySelector("video[data-clip]") : null;
  if (clip) {
    if (on) clip.play().catch(() => {}); else clip.pause();
    return;
  }
  const img = target && target.querySelector ? target.querySelector("img[data-animated-src]") : null;
  if (!img) return;
  if (on && !img.dataset.stillSrc) {
    img.dataset.stillSrc = img.src;
    img.src = img.dataset.animatedSrc;
  } else if (!on && img.dataset.stillSrc) {
    img.src = img.dataset.stillSrc;
    delete img.dataset.stillSrc;
  }
}
document.addEventListener("mouseover", (e) => { const c = e.target.closest(".card"); if (c && !c.contains(e.relatedTarget)) setPreview(c, true); });
document.addEventListener("mouseout", (e) => { const c = e.target.closest(".card"); if (c && !c.contains(e.relatedTarget)) setPreview(c, false); });
document.addEventListener("focusin", (e) => { if (e.target.matches(".card-open")) setPreview(e.target.closest(".card"), true); });
document.addEventListener("focusout", (e) => { if (e.target.matches(".card-open")) setPreview(e.target.closest(".card"), false); });

// ------------------------------------------------------------------ detail dialog

const dialog = document.getElementById("detail-dialog");
let lastOpener = null;

async function openDetail(href, opener) {
  const resp = await fetch(`${href}?fragment=1`);
  if (!resp.ok) { toast(t("js.load_failed"), "error"); return; }
  $("#detail-body").innerHTML = await resp.text();
  preselectLastCollection($("#detail-body"));
  $("#detail-full").href = href;
  lastOpener = opener || lastOpener;
  if (!dialog.open) dialog.showModal();
  const heading = $("#detail-body .meme-name");
  if (heading) { heading.tabIndex = -1; heading.focus(); }
}

function reloadDetail() {
  const detail = $("#detail-body .detail");
  if (dialog.open && detail) openDetail(`${BASE}/memes/${detail.dataset.id}`);
  else location.reload();
}

dialog.addEventListener("close", () => {
  $("#detail-body").replaceChildren();
  if (lastOpener && document.contains(lastOpener)) lastOpener.focus();
});
dialog.addEventListener("click", (e) => { if (e.target === dialog) dialog.close(); });

// ------------------------------------------------------------------ keyboard

document.addEventListener("keydown", (e) => {
  const typing = e.target.closest("input, textarea, select, [contenteditable]");
  if (e.key === "/" && !typing && !e.ctrlKey && !e.metaKey && !e.altKey) {
    const q = $("#q");
    e.preventDefault();
    if (q) { q.focus(); q.select(); } else location.href = BASE + "/";
  } else if (e.key === "Escape" && !dialog.open) {
    const form = e.target.closest(".rename-form");
    if (form) { e.preventDefault(); toggleRename(form.closest("[data-component=rename]"), false); }
  }
});

// ------------------------------------------------------------------ inline forms

function toggleRename(box, on) {
  const form = $(".rename-form", box);
  form.hidden = !on;
  $(".meme-name", box).hidden = on;
  $("[data-action=rename-start]", box).hidden = on;
  $(".form-error", form).textContent = "";
  if (on) { const input = $("input", form); input.focus(); input.select(); }
  else $("[data-action=rename-start]", box).focus();
}

function toggleConfirm(box, on) {
  $("[data-action=confirm-start]", box).hidden = on;
  $(".confirm-ask", box).hidden = !on;
  (on ? $(".confirm-ask button", box) : $("[data-action=confirm-start]", box)).focus();
}

async function renameMeme(form) {
  const article = form.closest(".detail");
  const name = form.display_name.value.trim();
  const r = await api("PATCH", `/api/v1/memes/${article.dataset.id}`, {display_name: name},
                      {"If-Match": article.dataset.revision});
  if (!r.ok) { $(".form-error", form).textContent = errorText(r.body, r.status); return; }
  const meme = r.body.meme || r.body;
  const shown = meme.display_name || name;
  article.dataset.revision = meme.revision ?? article.dataset.revision;
  article.dataset.name = shown;
  const saved = savedName(shown, article.dataset.ext || "");
  const at = `[data-id="${article.dataset.id}"]`;
  $$(`.card${at} .card-actions a[download], .detail${at} .actions a[download]`).forEach((el) => { el.download = saved; });
  $(".meme-name", article).textContent = shown;
  $$(`.card[data-id="${article.dataset.id}"] .name`).forEach((el) => { el.textContent = shown; });
  toggleRename(form.closest("[data-component=rename]"), false);
  toast(t("js.renamed"));
}

async function renameCollection(form) {
  const head = form.closest("[data-collection]");
  const r = await api("PATCH", `/api/v1/collections/${head.dataset.collection}`, {name: form.name.value.trim()});
  if (!r.ok) { $(".form-error", form).textContent = errorText(r.body, r.status); return; }
  location.reload();
}

async function createCollection(form) {
  const r = await api("POST", "/api/v1/collections", {name: form.name.value.trim()});
  if (!r.ok) { $(".form-error", form).textContent = errorText(r.body, r.status); return; }
  // The list filtered to the new name, with a confirmation, scrolled to the new row.
  const id = r.body.id;
  location.assign(`${BASE}/collections?q=${encodeURIComponent(r.body.name)}&created=${id}#c-${id}`);
}

// "Add to" remembers the collection used last (this browser), for the detail page and the library.
const LAST_COLLECTION = "mewdex.lastCollection";

function rememberCollection(id) {
  try { localStorage.setItem(LAST_COLLECTION, id); } catch (_) { /* storage off: nothing to remember */ }
}

function preselectLastCollection(root = document) {
  let id = null;
  try { id = localStorage.getItem(LAST_COLLECTION); } catch (_) { return; }
  if (!id) return;
  $$("form[data-action-form=add-to-collection] select[name=collection_id], #bulk-collection", root).forEach((select) => {
    if ([...select.options].some((o) => o.value === id)) select.value = id;
  });
}

function importRow(item) {
  const li = document.createElement("li");
  li.className = `upload-item st-${item.status}`;
  const name = document.createElement("span");
  name.className = "file-name";
  name.textContent = item.name || item.filename || "";
  const result = document.createElement("span");
  result.className = "file-result";
  if (item.status === "rejected") {
    result.textContent = `${t("status.rejected")}: ${errorText({error: item.error})}`;
  } else {
    const link = document.createElement("a");
    link.href = `${BASE}/memes/${item.meme.id}`;
    link.textContent = `${t(`status.${item.status}`)}: ${item.meme.display_name}`;
    result.append(link);
  }
  li.append(name, result);
  return li;
}

async function importCollection(form) {
  const data = new FormData();
  data.append("file", form.file.files[0]);
  const button = $("button[type=submit]", form);
  button.disabled = true;
  $(".form-error", form).textContent = t("js.importing");
  const r = await api("POST", "/api/v1/collections/import", data);
  button.disabled = false;
  $(".form-error", form).textContent = "";
  if (!r.ok) { $(".form-error", form).textContent = errorText(r.body, r.status); return; }
  const report = $("#import-report");
  const items = r.body.items || [];
  const counts = {created: 0, duplicate: 0, rejected: 0};
  items.forEach((i) => { counts[i.status] = (counts[i.status] || 0) + 1; });
  const head = document.createElement("p");
  head.className = "result-meta";
  const link = document.createElement("a");
  link.href = `${BASE}/collections/${r.body.collection.id}`;
  link.textContent = r.body.collection.name;
  head.append(t("js.imported_into"), " ", link, " — ", t("js.import_counts", counts));
  const list = document.createElement("ul");
  list.className = "upload-list";
  list.append(...items.map(importRow));
  report.replaceChildren(head, list);
  form.reset();
  if (window.htmx) htmx.ajax("GET", BASE + "/collections", {target: "#collection-list", select: "#collection-list", swap: "outerHTML"});
}

async function addToCollection(form) {
  const article = form.closest(".detail");
  const r = await api("POST", `/api/v1/collections/${form.collection_id.value}/items`, {meme_ids: [article.dataset.id]});
  if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
  rememberCollection(form.collection_id.value);
  toast(t("js.added_to_collection"));
  reloadDetail();
}

document.addEventListener("submit", (e) => {
  const form = e.target.closest("[data-action-form]");
  if (!form) return;
  e.preventDefault();
  const handlers = {
    "rename": renameMeme, "rename-collection": renameCollection, "create-collection": createCollection,
    "import-collection": importCollection, "add-to-collection": addToCollection,
    "set-text": (f) => saveText(f.closest(".detail"), f.text.value, f),
  };
  handlers[form.dataset.actionForm](form);
});

// ------------------------------------------------------------------ actions

// What mewdex learned (issue 33; partials/feedback_section.html): learning on/off and forgetting it all.
async function feedbackLearning(box) {
  const r = await api("PUT", "/api/v1/feedback/settings", {learning_enabled: box.checked});
  if (!r.ok) { box.checked = !box.checked; toast(errorText(r.body, r.status), "error"); return; }
  toast(t(box.checked ? "js.feedback_on" : "js.feedback_off"));
}

async function feedbackClear(button) {
  const r = await api("DELETE", "/api/v1/feedback");
  if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
  toast(t("js.feedback_cleared"));
  location.reload();
}

// One entry of the list ("forget this"): DELETE /api/v1/feedback/{id}; the row goes, the counts follow on reload.
async function feedbackForget(button) {
  button.disabled = true;
  const r = await api("DELETE", `/api/v1/feedback/${encodeURIComponent(button.dataset.id)}`);
  if (!r.ok && r.status !== 404) { button.disabled = false; toast(errorText(r.body, r.status), "error"); return; }
  const entry = button.closest(".feedback-entry");
  const list = entry.parentElement;
  entry.remove();
  if (!list.children.length) list.remove();
  toast(t("js.feedback_forgotten"));
}

async function markWanted(button) {
  // "This is the meme I wanted" (issue 15): the marks form the scope's query set for the eval gate.
  const r = await api("POST", "/api/v1/search/marks", {query: button.dataset.query, meme_id: memeOf(button).dataset.id});
  if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
  button.setAttribute("aria-pressed", "true");
  toast(t("js.marked_wanted"));
}

async function retryTask(button) {
  button.disabled = true;
  const r = await api("POST", `/api/v1/tasks/${button.dataset.task}/retry`);
  if (!r.ok) { button.disabled = false; toast(errorText(r.body, r.status), "error"); return; }
  toast(t("js.retry_queued"));
  afterTaskChange(button);
}

async function cancelTask(button) {
  button.disabled = true;
  const r = await api("POST", `/api/v1/tasks/${button.dataset.task}/cancel`);
  if (!r.ok) { button.disabled = false; toast(errorText(r.body, r.status), "error"); return; }
  toast(t("js.cancelled"));
  afterTaskChange(button);
}

function afterTaskChange(button) {
  if (button.dataset.reload) location.reload();
  else if (button.closest("#task-live") && window.htmx) {
    taskFocus = {task: button.dataset.task, action: button.dataset.action};  // back on this task's row
    htmx.trigger("#tasks-form", "submit");
  }
  else if (button.closest(".detail")) reloadDetail();
}

async function deleteMeme(button) {
  const article = button.closest(".detail");
  const r = await api("DELETE", `/api/v1/memes/${article.dataset.id}`);
  if (!r.ok && r.status !== 404) { toast(errorText(r.body, r.status), "error"); return; }
  toast(t("js.deleted"));
  if (dialog.open) {
    $$(`.card[data-id="${article.dataset.id}"]`).forEach((el) => el.remove());
    lastOpener = null;
    dialog.close();
  } else {
    location.href = BASE + "/library";
  }
}

// The meme's text (issue 43): corrected in place; null restores what OCR read. The detail is read again
// (the name may follow the text).
function toggleText(box, on) {
  const form = $(".text-form", box);
  form.hidden = !on;
  $(".text-view", box).hidden = on;
  $(".form-error", form).textContent = "";
  if (on) $("textarea", form).focus();
  else { const start = $("[data-action=text-start]", box); if (start) start.focus(); }
}

async function saveText(article, text, form) {
  const r = await api("PATCH", `/api/v1/memes/${article.dataset.id}`, {text},
                      {"If-Match": article.dataset.revision});
  if (!r.ok) {
    if (form) $(".form-error", form).textContent = errorText(r.body, r.status);
    else toast(errorText(r.body, r.status), "error");
    return;
  }
  toast(t("js.text_saved"));
  reloadDetail();
}

// The trash page: restore or delete one for good; empty it all.
async function trashAction(button, method, suffix, done) {
  const item = button.closest(".trash-item");
  const r = await api(method, `/api/v1/trash/${item.dataset.id}${suffix}`);
  if (!r.ok && r.status !== 404) { toast(errorText(r.body, r.status), "error"); return; }
  toast(t(done));
  item.remove();
  if (!$(".trash-item")) location.reload();
}

async function emptyTrash() {
  const r = await api("DELETE", "/api/v1/trash");
  if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
  toast(t("js.purged"));
  location.reload();
}

async function deleteCollection() {
  const head = $("[data-collection]");
  const r = await api("DELETE", `/api/v1/collections/${head.dataset.collection}`);
  if (!r.ok && r.status !== 404) { toast(errorText(r.body, r.status), "error"); return; }
  location.href = BASE + "/collections";
}

async function removeMember(button) {
  const card = memeOf(button);
  const r = await api("DELETE", `/api/v1/collections/${button.dataset.collection}/items/${card.dataset.id}`);
  if (!r.ok && r.status !== 404) { toast(errorText(r.body, r.status), "error"); return; }
  card.remove();
  toast(t("js.removed_from_collection"));
}

// Phones: the header's nav folds behind the menu button (CSS shows it below 720 px only); without
// this script the nav stays a row of links that scrolls sideways.
function toggleNav(open) {
  const bar = $(".topbar");
  const button = $("[data-action=toggle-nav]", bar);
  if (!bar || !button) return;
  bar.classList.toggle("nav-open", open);
  button.setAttribute("aria-expanded", String(open));
  if (open) { const first = $("#site-nav a", bar); if (first) first.focus(); }
}
(() => {
  const button = $("[data-action=toggle-nav]");
  if (!button) return;
  button.hidden = false;
  button.closest(".topbar").classList.add("has-nav-toggle");
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && button.getAttribute("aria-expanded") === "true") { toggleNav(false); button.focus(); }
  });
})();

document.addEventListener("click", (e) => {
  const el = e.target.closest("[data-action]");
  if (!el) return;
  const action = el.dataset.action;
  if (action === "open-detail") {
    if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
    e.preventDefault();
    openDetail(el.getAttribute("href"), el);
    return;
  }
  const holder = memeOf(el);
  const id = holder && holder.dataset.id;
  switch (action) {
    case "copy-image": copyImage(holder).then((ok) => { if (ok) reportChoice(holder, "copy"); }); break;
    case "share": shareMeme(holder); break;
    case "copy-link": mediaLink(id, holder).then(copyText).then((ok) => toast(ok ? t("js.copied_link") : t("js.copy_failed"), ok ? "ok" : "error")); break;
    case "close-dialog": dialog.close(); break;
    case "toggle-nav": toggleNav(el.getAttribute("aria-expanded") !== "true"); break;
    case "rename-start": toggleRename(el.closest("[data-component=rename]"), true); break;
    case "rename-cancel": toggleRename(el.closest("[data-component=rename]"), false); break;
    case "confirm-start": toggleConfirm(el.closest("[data-component=confirm]"), true); break;
    case "confirm-cancel": toggleConfirm(el.closest("[data-component=confirm]"), false); break;
    case "delete-meme": deleteMeme(el); break;
    case "text-start": toggleText(el.closest("[data-component=text-edit]"), true); break;
    case "text-cancel": toggleText(el.closest("[data-component=text-edit]"), false); break;
    case "text-revert": saveText(el.closest(".detail"), null, null); break;
    case "trash-restore": trashAction(el, "POST", "/restore", "js.restored"); break;
    case "trash-purge": trashAction(el, "DELETE", "", "js.purged"); break;
    case "trash-empty": emptyTrash(); break;
    case "delete-collection": deleteCollection(); break;
    case "remove-member": removeMember(el); break;
    case "retry-task": retryTask(el); break;
    case "cancel-task": cancelTask(el); break;
    case "mark-wanted": markWanted(el); break;
    case "feedback-learning": feedbackLearning(el); break;
    case "feedback-clear": feedbackClear(el); break;
    case "feedback-forget": feedbackForget(el); break;
    case "pick-image": $("#image-file").click(); break;
    case "select-all": selectAll(); break;
    case "bulk-retry": bulkRetry(); break;
    case "bulk-add": bulkAdd(); break;
    case "bulk-delete": bulkDelete(); break;
    case "select-none": selectNone(); break;
    case "bulk-tag-add": bulkTags("add"); break;
    case "bulk-tag-remove": bulkTags("remove"); break;
    case "bulk-zip": bulkZip(el); break;
    case "sign-out": fetch(BASE + "/api/v1/auth/logout", {method: "POST"}).then(() => { location.href = BASE + "/login"; }); break;
    default: break;
  }
});

// ------------------------------------------------------------------ search page

// Search as you type: a search starts once typing pauses for SEARCH_DEBOUNCE_MS (Enter, a filter or the
// box's clear button start it at once); starting one aborts the one in flight, whose answer is for text
// typed past, so a tab has one search at a time. An `overloaded` answer (503) is asked again after its
// Retry-After; any other failure shows an error with a retry button in the results area.
const SEARCH_DEBOUNCE_MS = 250;
const SEARCH_BUSY_RETRIES = 5;

function searchPage() {
  const q = $("#q");
  const results = $("#results");
  const form = $("#search-form");
  let timer = null;
  let inflight = null;  // the AbortController of the search in flight
  let inflightKey = null;  // and its query string
  let busyTries = 0;

  function params() {
    const p = new URLSearchParams(new FormData(form));
    for (const [k, v] of [...p]) if (!v) p.delete(k);
    return p;
  }

  function schedule(delay = SEARCH_DEBOUNCE_MS) {
    clearTimeout(timer);
    timer = setTimeout(() => search(), delay);
  }

  function show(html, p) {
    results.innerHTML = html;
    if (window.htmx) htmx.process(results);
    preselectLastCollection(results);
    results.dispatchEvent(new CustomEvent("mewdex:results", {bubbles: true, detail: {query: p.get("q") || ""}}));
  }

  function failed(message) {
    const box = document.createElement("div");
    box.className = "state error";
    box.setAttribute("role", "alert");
    const title = document.createElement("h2");
    title.textContent = t("js.search_failed_title");
    const text = document.createElement("p");
    text.textContent = message;
    const again = document.createElement("button");
    again.type = "button";
    again.dataset.action = "retry-search";
    again.textContent = t("js.retry");
    const note = document.createElement("p");
    note.className = "retry-note";
    const row = document.createElement("p");
    row.append(again);
    box.append(title, text, note, row);
    results.replaceChildren(box);
    results.dispatchEvent(new CustomEvent("mewdex:results", {bubbles: true, detail: {error: true}}));
  }

  async function search({retry = false} = {}) {
    clearTimeout(timer);
    if (!retry) busyTries = 0;
    const p = params();
    const key = p.toString();
    if (inflight && inflightKey === key && !retry) return;  // this very search is already on its way
    if (inflight) inflight.abort();
    const controller = new AbortController();
    inflight = controller;
    inflightKey = key;
    results.setAttribute("aria-busy", "true");
    let resp;
    let body = "";
    try {
      resp = await fetch(`${BASE}/ui/search?${key}`, {signal: controller.signal, headers: {"Accept": "text/html"}});
      body = await resp.text();
    } catch (e) {
      if (controller.signal.aborted) return;  // typed past: the newer search owns the results area
      inflight = null;
      results.removeAttribute("aria-busy");
      failed(t("js.offline"));
      return;
    }
    if (inflight !== controller) return;
    inflight = null;
    results.removeAttribute("aria-busy");
    const html = (resp.headers.get("Content-Type") || "").startsWith("text/html");
    if (resp.ok || html) {
      show(body, p);
      shownKey = resp.ok ? key : null;
      history.replaceState(null, "", key ? `${BASE}/?${key}` : BASE + "/");
    } else {
      let data = null;
      try { data = JSON.parse(body); } catch (e) { /* not JSON */ }
      failed(errorText(data, resp.status));
      shownKey = null;
    }
    if (resp.status === 503 && busyTries < SEARCH_BUSY_RETRIES) {
      busyTries++;
      const seconds = Math.max(1, parseInt(resp.headers.get("Retry-After"), 10) || 1);
      const note = $(".retry-note", results);
      if (note) note.textContent = t("js.search_retrying", {seconds});
      timer = setTimeout(() => { if (params().toString() === key) search({retry: true}); }, seconds * 1000);
    }
  }
  let shownKey = params().toString();  // the search the results area shows (null: an error)

  q.addEventListener("input", (e) => {
    if (e.isComposing) return;  // an IME is still composing: search once the text is committed
    if (params().toString() === shownKey && !inflight) { clearTimeout(timer); return; }
    schedule();
  });
  q.addEventListener("compositionend", () => schedule());
  q.addEventListener("search", () => { if (!q.value) search(); });  // the box's clear button
  form.addEventListener("change", (e) => { if (e.target !== q) search(); });  // a filter
  form.addEventListener("submit", (e) => { e.preventDefault(); search(); });
  results.addEventListener("click", (e) => {
    const el = e.target.closest("[data-action=retry-search], [data-action=example-search]");
    if (!el || e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
    e.preventDefault();
    if (el.dataset.action === "example-search") { q.value = el.dataset.query; q.focus(); }
    search();
  });
  // Enter in the search box opens the first result (as the hint says) once the results shown are for
  // this text (the server marks them with data-query); otherwise it runs the search now.
  q.addEventListener("keydown", (e) => {
    if (e.key !== "Enter" || e.isComposing) return;
    const first = $(`#results .card a[href^='${BASE}/memes/']`);
    const shown = $("#results .result-meta")?.dataset.query;
    e.preventDefault();
    if (first && shown === q.value.trim() && !inflight) {
      first.click();
    } else {
      search();
    }
  });

  async function searchByImage(file) {
    if (!file || !file.type.startsWith("image/")) { toast(t("js.not_an_image"), "error"); return; }
    const data = new FormData();
    data.append("file", file);
    if (form.collection.value) data.append("collection", form.collection.value);
    if (form.animated.checked) data.append("animated", "true");
    clearTimeout(timer);
    if (inflight) { inflight.abort(); inflight = null; }  // the picture replaces any text search
    results.setAttribute("aria-busy", "true");
    try {
      const resp = await fetch(BASE + "/ui/search/image", {method: "POST", body: data});
      show(await resp.text(), new URLSearchParams());
      shownKey = null;
    } catch (e) {
      toast(t("js.offline"), "error");
    } finally {
      results.removeAttribute("aria-busy");
    }
    q.value = "";
  }

  $("#image-file").addEventListener("change", (e) => searchByImage(e.target.files[0]));
  const overlay = $(".drop-overlay");
  let depth = 0;
  document.addEventListener("dragenter", (e) => { if (e.dataTransfer.types.includes("Files")) { depth++; overlay.hidden = false; } });
  document.addEventListener("dragleave", () => { depth = Math.max(0, depth - 1); if (!depth) overlay.hidden = true; });
  document.addEventListener("dragover", (e) => e.preventDefault());
  document.addEventListener("drop", (e) => {
    e.preventDefault();
    depth = 0;
    overlay.hidden = true;
    if (e.dataTransfer.files.length) searchByImage(e.dataTransfer.files[0]);
  });
  document.addEventListener("paste", (e) => {
    const file = [...(e.clipboardData?.files || [])].find((f) => f.type.startsWith("image/"));
    if (file) { e.preventDefault(); searchByImage(file); }
  });
  if (q && !q.value) q.focus();
}

// ------------------------------------------------------------------ library page

const selected = new Set();

function syncSelection() {
  $$("input[data-action=select]").forEach((box) => {
    box.checked = selected.has(box.value);
    box.closest(".card").classList.toggle("is-selected", box.checked);
  });
  $("#selection-count").textContent = t("js.selected", {n: selected.size});
  $("#selection-bar").classList.toggle("has-selection", selected.size > 0);
  $$("[data-action=bulk-retry], [data-action=bulk-add], [data-action=bulk-tag-add], [data-action=bulk-tag-remove], " +
     "[data-action=bulk-zip], [data-action=select-none], #selection-bar [data-action=confirm-start]")
    .forEach((b) => { b.disabled = selected.size === 0; });
}

function selectNone() {
  selected.clear();
  syncSelection();
}

function selectAll() {
  const boxes = $$("input[data-action=select]");
  const all = boxes.every((b) => selected.has(b.value));
  boxes.forEach((b) => (all ? selected.delete(b.value) : selected.add(b.value)));
  syncSelection();
}

function refreshLibrary() { if (window.htmx) htmx.trigger("#library-form", "submit"); }

async function bulkRetry() {
  const r = await api("POST", "/api/v1/processing", {meme_ids: [...selected], mode: "normal"});
  if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
  toast(t("js.bulk_retry_done", {n: selected.size}));
  refreshLibrary();
}

async function bulkAdd() {
  const collection = $("#bulk-collection").value;
  if (!collection) { toast(t("js.choose_collection"), "error"); $("#bulk-collection").focus(); return; }
  const r = await api("POST", `/api/v1/collections/${collection}/items`, {meme_ids: [...selected]});
  if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
  rememberCollection(collection);
  toast(t("js.bulk_add_done", {n: selected.size}));
}

// Tag the selection (issue 43): the names typed (comma-separated) added to or taken from every selected
// meme, all or nothing (POST /api/v1/memes/tags); the cards show their new chips after the refresh.
async function bulkTags(mode) {
  const input = $("#bulk-tags");
  const names = input.value.split(/[,，、]/).map((s) => s.trim()).filter(Boolean);
  if (!names.length) { toast(t("js.bulk_tags_none"), "error"); input.focus(); return; }
  const r = await api("POST", "/api/v1/memes/tags", {ids: [...selected], [mode]: names});
  if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
  toast(t(mode === "add" ? "js.bulk_tags_added" : "js.bulk_tags_removed", {n: selected.size}));
  input.value = "";
  refreshLibrary();
}

// Download the selection as one ZIP (POST /api/v1/memes/zip): the answer saved under the name it gives.
async function bulkZip(button) {
  button.disabled = true;
  toast(t("js.bulk_zip_preparing"));
  let resp;
  try {
    resp = await fetch(`${BASE}/api/v1/memes/zip`, {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({ids: [...selected]}),
    });
  } catch (e) {
    resp = null;
  }
  button.disabled = selected.size === 0;
  if (!resp || !resp.ok) {
    const body = resp ? await resp.json().catch(() => null) : null;
    toast(errorText(body, resp ? resp.status : 0), "error");
    return;
  }
  const header = resp.headers.get("Content-Disposition") || "";
  const match = header.match(/filename\*=UTF-8''([^;]+)/);
  const url = URL.createObjectURL(await resp.blob());
  const link = document.createElement("a");
  link.href = url;
  link.download = match ? decodeURIComponent(match[1]) : "mewdex.zip";
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

async function bulkDelete() {
  let failed = 0;
  for (const id of [...selected]) {
    const r = await api("DELETE", `/api/v1/memes/${id}`);
    if (r.ok || r.status === 404) selected.delete(id); else failed++;
  }
  toggleConfirm($("#selection-bar [data-component=confirm]"), false);
  toast(failed ? t("js.bulk_delete_failed", {n: failed}) : t("js.deleted"), failed ? "error" : "ok");
  syncSelection();
  refreshLibrary();
}

function libraryPage() {
  // Keys: A selects the page (again: clears it), Escape clears the selection, Enter on a card's checkbox
  // ticks it (as Space does); Enter in the tag box adds the tags.
  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || e.isComposing || dialog.open) return;
    if (e.target.matches("input[data-action=select]") && e.key === "Enter") { e.preventDefault(); e.target.click(); return; }
    if (e.target.id === "bulk-tags" && e.key === "Enter") { e.preventDefault(); if (selected.size) bulkTags("add"); return; }
    if (e.target.closest("input:not([type=checkbox]):not([type=radio]), textarea, select, [contenteditable]")) return;
    if (e.key === "a" || e.key === "A") { e.preventDefault(); selectAll(); }
    else if (e.key === "Escape" && selected.size) { e.preventDefault(); selectNone(); }
  });
  document.addEventListener("change", (e) => {
    if (!e.target.matches("input[data-action=select]")) return;
    if (e.target.checked) selected.add(e.target.value); else selected.delete(e.target.value);
    syncSelection();
  });
  document.body.addEventListener("htmx:afterSwap", (e) => {
    if (e.detail.target.id !== "library-items") return;
    const params = new URLSearchParams(new FormData($("#library-form")));
    const page = new URL(e.detail.requestConfig?.path || "", location.origin).searchParams.get("page");
    if (page) params.set("page", page);
    for (const [k, v] of [...params]) if (!v) params.delete(k);
    history.replaceState(null, "", `${BASE}/library?${params}`);
    syncSelection();
  });
  syncSelection();
}

// ------------------------------------------------------------------ upload page

const UPLOAD_CONCURRENCY = 2;
const SHARED_CACHE = "mewdex-shared";  // where static/sw.js keeps the files of a share

function fileSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(0)} KB`;
  return `${(bytes / 1048576).toFixed(1)} MB`;
}

const SHARED_OWNER = "/shared-owner";  // in SHARED_CACHE: the account a share was first shown to

// The files of the last share, as the service worker keeps them, for ``account`` (the signed-in
// account's id, "" with no accounts). A share belongs to the first account it is shown to (whoever
// shared it signs in to see it): it is marked so here, and for any other account it is dropped unseen,
// so a proposal left pending on a shared browser never reaches whoever signs in next.
async function sharedFiles(account) {
  const cache = await caches.open(SHARED_CACHE);
  const owner = await cache.match(SHARED_OWNER);
  if (owner && (await owner.text()) !== account) {
    await caches.delete(SHARED_CACHE);
    return [];
  }
  const files = [];
  for (const request of await cache.keys()) {
    if (new URL(request.url).pathname === SHARED_OWNER) continue;
    const resp = await cache.match(request);
    if (!resp) continue;
    const blob = await resp.blob();
    let name = "shared";
    try { name = decodeURIComponent(resp.headers.get("X-Filename") || "shared"); } catch (e) { /* a malformed name */ }
    files.push(new File([blob], name, {type: blob.type}));
  }
  if (files.length && !owner) await cache.put(SHARED_OWNER, new Response(account));
  return files;
}

// Whether an event is the person's own action (a real click or key press, not a script's).
function byThePerson(event) {
  return event.isTrusted && (!navigator.userActivation || navigator.userActivation.isActive);
}

// How long a proposal's Upload stays disabled after the page is seen (shown, or back in front after the
// window was hidden or lost focus): a click aimed at another page (a site that asks for a double click
// and swaps mewdex in under the pointer between the two) lands on nothing. Browsers' own security
// prompts wait the same way.
const PROPOSAL_ARM_MS = 1000;

// Enables ``button`` only after the page has been visible and in front for PROPOSAL_ARM_MS; disables it
// again whenever the window is hidden or loses focus. Returns the function that stops watching.
function armWhenSeen(button) {
  let timer = null;
  function disarm() {
    clearTimeout(timer);
    timer = null;
    button.disabled = true;
  }
  function arm() {
    disarm();
    if (document.visibilityState === "visible") timer = setTimeout(() => { button.disabled = false; }, PROPOSAL_ARM_MS);
  }
  const onVisibility = () => (document.visibilityState === "visible" ? arm() : disarm());
  window.addEventListener("blur", disarm);
  window.addEventListener("focus", arm);
  document.addEventListener("visibilitychange", onVisibility);
  arm();
  return () => {
    clearTimeout(timer);
    window.removeEventListener("blur", disarm);
    window.removeEventListener("focus", arm);
    document.removeEventListener("visibilitychange", onVisibility);
    button.disabled = false;
  };
}

// Shows the shared files as a proposal (#shared-proposal); ``upload(files)`` runs only when the person
// presses Upload (a trusted click, once the page has been seen: armWhenSeen). Upload and Discard both
// clear what the service worker holds.
function sharedProposal(files, upload) {
  const panel = $("#shared-proposal");
  const list = $("#shared-files");
  const urls = [];
  list.replaceChildren();
  for (const file of files) {
    const li = document.createElement("li");
    li.className = "shared-file";
    if (/^image\//.test(file.type)) {
      const img = document.createElement("img");
      img.className = "mini";
      img.alt = "";
      img.src = URL.createObjectURL(file);
      urls.push(img.src);
      li.append(img);
    } else {
      const none = document.createElement("span");
      none.className = "mini no-thumb";
      none.textContent = "?";
      li.append(none);
    }
    const name = document.createElement("span");
    name.className = "file-name";
    name.textContent = file.name;
    const size = document.createElement("span");
    size.className = "file-size";
    size.textContent = fileSize(file.size);
    li.append(name, size);
    list.append(li);
  }
  const total = files.reduce((sum, f) => sum + f.size, 0);
  $("#shared-count").textContent = t("js.shared_count", {n: files.length, size: fileSize(total)});
  panel.hidden = false;
  const uploadButton = $("[data-action=shared-upload]", panel);
  const discardButton = $("[data-action=shared-discard]", panel);
  const stopArming = armWhenSeen(uploadButton);

  async function settle() {
    stopArming();
    panel.hidden = true;
    uploadButton.onclick = discardButton.onclick = null;
    urls.forEach((u) => URL.revokeObjectURL(u));
    list.replaceChildren();
    try { await caches.delete(SHARED_CACHE); } catch (e) { /* nothing kept, or storage unavailable */ }
  }
  uploadButton.onclick = async (e) => {
    if (!byThePerson(e) || uploadButton.disabled) return;
    await settle();
    upload(files);
  };
  discardButton.onclick = async (e) => {
    if (!byThePerson(e)) return;
    await settle();
    $("#upload-summary").textContent = t("js.shared_discarded");
  };
}

function uploadPage() {
  const form = $("#upload-form");
  const input = $("#upload-files");
  const drop = $("#upload-drop");
  const list = $("#upload-list");
  const maxBytes = Number(form.dataset.maxBytes);
  const queue = [];
  const totals = {created: 0, duplicate: 0, rejected: 0};
  let active = 0;

  function summary() { $("#upload-summary").textContent = t("js.upload_summary", totals); }

  function row(file) {
    const li = document.createElement("li");
    li.className = "upload-item st-queued";
    li.innerHTML = '<span class="file-name"></span><span class="file-size"></span><progress max="100" value="0"></progress><span class="file-result"></span>';
    $(".file-name", li).textContent = file.name;
    $(".file-size", li).textContent = fileSize(file.size);
    $(".file-result", li).textContent = t("status.queued");
    list.append(li);
    return li;
  }

  function finish(li, item) {
    li.className = `upload-item st-${item.status}`;
    li.dataset.status = item.status;
    // A rejected file's bar is removed (a full bar reads as success); the row says "rejected" instead.
    if (item.status === "rejected") $("progress", li)?.remove();
    else $("progress", li).value = 100;
    const result = $(".file-result", li);
    result.replaceChildren();
    if (item.status === "rejected") {
      result.textContent = `${t("status.rejected")}: ${errorText({error: item.error})}`;
    } else {
      const link = document.createElement("a");
      const meme = item.meme || {};
      link.href = `${BASE}/memes/${meme.id}`;
      link.textContent = `${t(`status.${item.status}`)}: ${meme.display_name || ""}`;
      result.append(link);
    }
    totals[item.status] = (totals[item.status] || 0) + 1;
    summary();
  }

  function send(file, li) {
    active++;
    const data = new FormData();
    data.append("files", file, file.name);
    if (form.auto_name.checked) data.append("auto_name", "true");
    if (form.collection_id.value) data.append("collection_id", form.collection_id.value);
    const xhr = new XMLHttpRequest();
    xhr.open("POST", BASE + "/api/v1/memes");
    const token = window.mewdexCsrfToken ? window.mewdexCsrfToken() : "";
    if (token) xhr.setRequestHeader("X-CSRF-Token", token);
    li.className = "upload-item st-running";
    $(".file-result", li).textContent = t("js.uploading");
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) $("progress", li).value = Math.round((e.loaded / e.total) * 100); };
    xhr.onload = () => {
      if (xhr.status === 429) {  // the processing queue is full: wait as told, then send this file again
        const seconds = parseInt(xhr.getResponseHeader("Retry-After"), 10) || 5;
        $(".file-result", li).textContent = t("js.queue_full_retry", {seconds});
        active = Math.max(0, active - 1);
        setTimeout(() => send(file, li), seconds * 1000);
        return;
      }
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch (e) { /* not JSON */ }
      const items = body && (body.results || body.items || (Array.isArray(body) ? body : null));
      if (items && items.length) finish(li, items[0]);
      else finish(li, {status: "rejected", error: body && body.error ? body.error : {message: t("js.failed_status", {status: xhr.status})}});
      next();
    };
    xhr.onerror = () => { finish(li, {status: "rejected", error: {message: t("js.offline")}}); next(); };
    xhr.send(data);
  }

  function next() {
    active = Math.max(0, active - 1);
    pump();
  }

  function pump() {
    while (active < UPLOAD_CONCURRENCY && queue.length) {
      const [file, li] = queue.shift();
      send(file, li);
    }
  }

  function add(files) {
    for (const file of files) {
      const li = row(file);
      if (file.size > maxBytes) finish(li, {status: "rejected", error: {code: "image_too_large"}});
      else queue.push([file, li]);
    }
    // Each file is one request so each gets its own progress and result; a few run at once.
    pump();
  }

  // Pictures shared to the installed app (Web Share Target): the service worker left them in Cache
  // Storage (SHARED_CACHE) and sent the browser here, with ?shared=N after a share. Anything may have
  // sent them (the share sheet, or a page on another site posting a form to /share-target), so they
  // are a proposal: shown with their names, sizes and thumbnails, uploaded through the normal path
  // only when the person presses Upload (a trusted click with user activation), or discarded. Either
  // way the service worker's copy is cleared. Proposed files stay until then (a reload shows them again),
  // for the account they were first shown to only (sharedFiles).
  async function receiveShared() {
    const shared = new URLSearchParams(location.search).get("shared");
    if (shared !== null) history.replaceState(null, "", BASE + "/upload");
    if (shared === "unavailable" || shared === "failed" || !("caches" in window)) {
      if (shared !== null) $("#upload-summary").textContent = t(shared === "failed" ? "js.shared_failed" : "js.shared_unavailable");
      return;
    }
    const files = await sharedFiles($("#shared-proposal").dataset.account || "");
    if (files.length) sharedProposal(files, add);
    else if (shared !== null) $("#upload-summary").textContent = t("js.shared_none");
  }
  receiveShared();

  input.addEventListener("change", () => { add([...input.files]); input.value = ""; });
  drop.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); input.click(); } });
  ["dragenter", "dragover"].forEach((ev) => drop.addEventListener(ev, (e) => { e.preventDefault(); drop.classList.add("over"); }));
  ["dragleave", "drop"].forEach((ev) => drop.addEventListener(ev, () => drop.classList.remove("over")));
  drop.addEventListener("drop", (e) => { e.preventDefault(); add([...e.dataTransfer.files]); });
  document.addEventListener("paste", (e) => { if (e.clipboardData?.files.length) add([...e.clipboardData.files]); });
}

// The task list polls every 2 s while "live" is ticked (the check lives here, not in an hx-trigger
// filter: the Content-Security-Policy allows no eval). The poll waits while the keyboard focus is in the
// list (on a Retry or Cancel button), so a refresh never takes it away; any other swap (a filter, after
// Retry, a poll after a mouse click) puts the focus back on the same task's row.
document.body.addEventListener("htmx:beforeRequest", (e) => {
  const live = document.getElementById("tasks-live");
  const list = document.getElementById("task-live");
  if (!e.detail.elt || e.detail.elt !== list) return;
  const el = document.activeElement;
  const keyboardFocusInside = el && list.contains(el) && el.matches(":focus-visible");
  if ((live && !live.checked) || keyboardFocusInside) e.preventDefault();
});
let taskFocus = null;
document.body.addEventListener("htmx:beforeSwap", (e) => {
  const list = document.getElementById("task-live");
  if (!list || e.detail.target !== list) return;
  const el = document.activeElement;
  const row = el && list.contains(el) ? el.closest("[data-task]") : null;
  if (row) taskFocus = {task: row.dataset.task, action: el.dataset.action || null};
});
document.body.addEventListener("htmx:afterSwap", (e) => {
  if (!taskFocus || e.detail.target.id !== "task-live") return;
  const row = $(`tr[data-task="${CSS.escape(taskFocus.task)}"]`, e.detail.target);
  const target = row && ($(`[data-action="${taskFocus.action}"]`, row) || $("button, a", row));
  taskFocus = null;
  if (target) target.focus();
});

// ------------------------------------------------------------------ start

// The installable app's service worker (static/sw.js: the shell when offline, the share target).
if ("serviceWorker" in navigator && window.isSecureContext) {
  navigator.serviceWorker.register(BASE + "/sw.js").catch(() => { /* the site works without it */ });
}

const pages = {search: searchPage, library: libraryPage, upload: uploadPage};
(pages[document.body.dataset.page] || (() => {}))();
preselectLastCollection();
document.body.addEventListener("htmx:afterSwap", (e) => preselectLastCollection(e.detail.target));
// A select marked data-autosubmit (the collections page's sort) submits its GET form when changed.
document.addEventListener("change", (e) => {
  if (e.target.matches && e.target.matches("select[data-autosubmit]")) e.target.form.requestSubmit();
});
