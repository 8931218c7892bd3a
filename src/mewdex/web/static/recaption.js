// Re-caption (改字, issue 44) on the meme's detail (page and dialog; partials/meme_detail.html) and in "Make a
// meme" on the search page (partials/make_meme.html: the template is chosen there, form.dataset.meme): the preview
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

// The meme the form re-captions (its data-meme: the detail's meme, or the template chosen in "Make a meme").
const recaptionMeme = (form) => form.dataset.meme;
const STYLE_FIELDS = ["color", "outline", "font_size", "place"];  // "place": only "Make a meme" has it

// The caption and its style as the preview's query string (empty style fields: as the old text).
function recaptionQuery(form) {
  const p = new URLSearchParams({text: form.text.value});
  for (const name of STYLE_FIELDS) if (form[name] && form[name].value) p.set(name, form[name].value);
  return `${recaptionMeme(form)}?${p}`;
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
  form.setAttribute("aria-busy", "true");
  $("[data-recaption-status]", form).textContent = t("js.recaption_rendering");
  let resp;
  let blob = null;
  let body = null;
  try {
    const [id, query] = key.split("?");
    resp = await fetch(`${BASE}/media/${id}/recaption?${query}`, {signal: controller.signal});
    if (resp.ok) blob = await resp.blob();
    else body = await resp.json().catch(() => null);
  } catch (e) {
    if (controller.signal.aborted) return;  // typed past: the newer preview owns the box
    resp = {status: 0};
  }
  if (state.controller !== controller) return;
  state.controller = null;
  if (!blob && body?.error?.code === "no_text_boxes" && form.place && !form.place.value) {
    form.place.value = "bottom";  // a text-free template: the caption goes at the bottom, over the picture
    recaptionPreview(form);
    return;
  }
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
  if (form.place && form.place.value) body.place = form.place.value;
  const id = recaptionMeme(form);
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
  const caption = form.text.value.trim().replace(/[\\/:*?"<>|\s]+/g, " ").trim().slice(0, 40);
  return `${form.dataset.name || "meme"} - ${caption}${EXTENSIONS[blob.type] || ".png"}`;
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

// "Make a meme" on the search page (partials/make_meme.html): a search for a template by meaning
// (POST /api/v1/search, one per template group), its results as buttons; the one picked is the form's meme.
function makeTemplateButton(hit) {
  const li = document.createElement("li");
  const button = document.createElement("button");
  button.type = "button";
  button.className = "make-template";
  button.dataset.makeTemplate = hit.id;
  button.dataset.name = hit.display_name;
  button.setAttribute("aria-pressed", "false");
  button.title = hit.display_name;
  const img = document.createElement("img");
  img.src = `${BASE}/media/${hit.id}/thumbnail`;
  img.alt = hit.display_name;
  img.loading = "lazy";
  button.append(img);
  li.append(button);
  return li;
}

document.addEventListener("submit", async (e) => {
  const search = e.target.closest("form[data-make-search]");
  if (!search) return;
  e.preventDefault();
  const box = search.closest("[data-component=make]");
  const query = search.q.value.trim();
  if (!query) { search.q.focus(); return; }
  const status = $("[data-make-status]", box);
  status.textContent = t("js.make_searching");
  const r = await api("POST", "/api/v1/search", {query, n_results: 12, fold_variants: true});
  if (!r.ok) { status.textContent = errorText(r.body, r.status); return; }
  const hits = r.body.results || [];
  $("[data-make-templates]", box).replaceChildren(...hits.map(makeTemplateButton));
  status.textContent = hits.length ? t("js.make_pick") : t("js.make_none");
});

document.addEventListener("click", (e) => {
  const button = e.target.closest("[data-make-template]");
  if (!button) return;
  const box = button.closest("[data-component=make]");
  $$("[data-make-template]", box).forEach((b) => b.setAttribute("aria-pressed", String(b === button)));
  const form = $("form[data-recaption-form]", box);
  form.dataset.meme = button.dataset.makeTemplate;
  form.dataset.name = button.dataset.name;
  form.place.value = "";  // where the template's own text is; a text-free one switches to the bottom
  form.hidden = false;
  form.text.focus();
  if (form.text.value.trim()) recaptionPreview(form);
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
