// Re-caption (改字, issue 44) on the meme's detail (page and dialog; partials/meme_detail.html): the preview
// follows the text as it is typed (GET /media/{id}/recaption, nothing stored; RECAPTION_DEBOUNCE_MS after
// the last key, the request in flight aborted by a newer one), "Save as new meme" posts
// POST /api/v1/memes/{id}/recaption and opens the new meme (its toast shown there), Copy and Download take
// the preview as it is, without saving. Errors (no_text_boxes, caption_too_long, ...) show under the box.
// Uses app.js's api, t, toast, errorText, asPng, EXTENSIONS, $ and $$ (loaded before this file).
"use strict";

const RECAPTION_DEBOUNCE_MS = 350;
const PENDING_TOAST = "mewdex.toast";  // sessionStorage: a toast to show on the next page (after a save)
const recaptionState = new WeakMap();  // form -> {timer, controller, key, blob, url}

function recaptionStateOf(form) {
  if (!recaptionState.has(form)) recaptionState.set(form, {timer: null, controller: null, key: null, blob: null, url: null});
  return recaptionState.get(form);
}

// The caption and its style as the preview's query string (empty style fields: as the old text).
function recaptionQuery(form) {
  const p = new URLSearchParams({text: form.text.value});
  for (const name of ["color", "outline", "font_size"]) if (form[name].value) p.set(name, form[name].value);
  return p.toString();
}

function recaptionReady(form, ready) {
  $$("button[type=submit], [data-recaption-action]", form).forEach((b) => { b.disabled = !ready; });
}

function recaptionClear(form, message = "") {
  const state = recaptionStateOf(form);
  if (state.controller) state.controller.abort();
  state.controller = null;
  state.key = null;
  state.blob = null;
  $(".recaption-preview", form).hidden = true;
  $("[data-recaption-status]", form).textContent = "";
  $(".form-error", form).textContent = message;
  form.removeAttribute("aria-busy");
  recaptionReady(form, false);
}

async function recaptionPreview(form) {
  const state = recaptionStateOf(form);
  clearTimeout(state.timer);
  if (!form.text.value.trim()) { recaptionClear(form); return; }
  const key = recaptionQuery(form);
  if (key === state.key || (state.controller && state.controller.key === key)) return;
  if (state.controller) state.controller.abort();
  const controller = new AbortController();
  controller.key = key;
  state.controller = controller;
  const id = form.closest(".detail").dataset.id;
  form.setAttribute("aria-busy", "true");
  $("[data-recaption-status]", form).textContent = t("js.recaption_rendering");
  let resp;
  let blob = null;
  let body = null;
  try {
    resp = await fetch(`${BASE}/media/${id}/recaption?${key}`, {signal: controller.signal});
    if (resp.ok) blob = await resp.blob();
    else body = await resp.json().catch(() => null);
  } catch (e) {
    if (controller.signal.aborted) return;  // typed past: the newer preview owns the box
    resp = {status: 0};
  }
  if (state.controller !== controller) return;
  state.controller = null;
  if (!blob) { recaptionClear(form, errorText(body, resp.status)); return; }
  state.key = key;
  state.blob = blob;
  if (state.url) URL.revokeObjectURL(state.url);
  state.url = URL.createObjectURL(blob);
  $("[data-recaption-preview]", form).src = state.url;
  $(".recaption-preview", form).hidden = false;
  $("[data-recaption-status]", form).textContent = t("js.recaption_preview_ready");
  $(".form-error", form).textContent = "";
  form.removeAttribute("aria-busy");
  recaptionReady(form, true);
}

function recaptionSchedule(form) {
  const state = recaptionStateOf(form);
  clearTimeout(state.timer);
  state.timer = setTimeout(() => recaptionPreview(form), RECAPTION_DEBOUNCE_MS);
}

async function recaptionSave(form) {
  const text = form.text.value.trim();
  if (!text) { form.text.focus(); return; }
  const body = {text: form.text.value};
  if (form.color.value) body.color = form.color.value;
  if (form.outline.value) body.outline = form.outline.value;
  if (form.font_size.value) body.font_size = Number(form.font_size.value);
  const id = form.closest(".detail").dataset.id;
  const button = $("button[type=submit]", form);
  button.disabled = true;
  $("[data-recaption-status]", form).textContent = t("js.recaption_saving");
  const r = await api("POST", `/api/v1/memes/${id}/recaption`, body);
  button.disabled = false;
  $("[data-recaption-status]", form).textContent = "";
  if (!r.ok) { $(".form-error", form).textContent = errorText(r.body, r.status); return; }
  try {
    sessionStorage.setItem(PENDING_TOAST, t(r.status === 201 ? "js.recaption_saved" : "js.recaption_saved_existing"));
  } catch (e) { /* storage off: no toast on the next page */ }
  location.assign(`${BASE}/memes/${r.body.id}`);
}

function recaptionFileName(form, blob) {
  const article = form.closest(".detail");
  const caption = form.text.value.trim().replace(/[\\/:*?"<>|\s]+/g, " ").trim().slice(0, 40);
  return `${article.dataset.name || "meme"} - ${caption}${EXTENSIONS[blob.type] || ".png"}`;
}

async function recaptionCopy(form) {
  const blob = recaptionStateOf(form).blob;
  if (!blob) return;
  try {
    await navigator.clipboard.write([new ClipboardItem({"image/png": await asPng(blob)})]);
    toast(t("js.copied_image"));
  } catch (e) {
    toast(t("js.copy_image_failed"), "error");
  }
}

function recaptionDownload(form) {
  const state = recaptionStateOf(form);
  if (!state.blob) return;
  const link = document.createElement("a");
  link.href = state.url;
  link.download = recaptionFileName(form, state.blob);
  document.body.append(link);
  link.click();
  link.remove();
}

document.addEventListener("input", (e) => {
  const form = e.target.closest("form[data-recaption-form]");
  if (!form || e.isComposing) return;  // an IME still composing: the preview waits for the text
  recaptionSchedule(form);
});
document.addEventListener("compositionend", (e) => {
  const form = e.target.closest && e.target.closest("form[data-recaption-form]");
  if (form) recaptionSchedule(form);
});
document.addEventListener("change", (e) => {
  const form = e.target.closest("form[data-recaption-form]");
  if (form && e.target.matches("select")) recaptionPreview(form);  // a style: at once
});
document.addEventListener("submit", (e) => {
  const form = e.target.closest("form[data-recaption-form]");
  if (!form) return;
  e.preventDefault();
  recaptionSave(form);
});
// Ctrl+Enter (⌘+Enter) in the caption saves; Enter alone starts a new line (one line per text block).
document.addEventListener("keydown", (e) => {
  const form = e.target.closest && e.target.closest("form[data-recaption-form]");
  if (!form || e.key !== "Enter" || !(e.ctrlKey || e.metaKey) || e.isComposing) return;
  e.preventDefault();
  form.requestSubmit();
});
document.addEventListener("click", (e) => {
  const button = e.target.closest("[data-recaption-action]");
  if (!button) return;
  const form = button.closest("form[data-recaption-form]");
  if (button.dataset.recaptionAction === "copy") recaptionCopy(form);
  else if (button.dataset.recaptionAction === "download") recaptionDownload(form);
});

// The toast a save left for this page (the new meme's).
(() => {
  let message = null;
  try {
    message = sessionStorage.getItem(PENDING_TOAST);
    sessionStorage.removeItem(PENDING_TOAST);
  } catch (e) { return; }
  if (message) toast(message);
})();
