// Tags (issue 43): the detail page's tag chips (add, remove) through PATCH /api/v1/memes/{id} {"tags"},
// the chips redrawn from the answer (no reload); the tags page's rename/merge (PATCH /api/v1/tags/{name}).
// Uses app.js's api, t, toast, errorText, $ and $$ (loaded before this file).
"use strict";

// The search text of one tag: tag:NAME, quoted when the name has a space (search/tags.py reads both).
function tagQuery(tag) { return /\s/.test(tag) ? `tag:"${tag}"` : `tag:${tag}`; }

function tagChip(tag) {
  const li = document.createElement("li");
  li.dataset.tag = tag;
  const link = document.createElement("a");
  link.href = `${BASE}/?q=${encodeURIComponent(tagQuery(tag))}`;
  link.textContent = tag;
  const remove = document.createElement("button");
  remove.type = "button";
  remove.className = "chip-remove";
  remove.dataset.tagAction = "remove";
  remove.setAttribute("aria-label", t("tags.remove_of", {tag}));
  remove.title = t("tags.remove_of", {tag});
  remove.textContent = "✕";
  li.append(link, remove);
  return li;
}

function drawTags(box, tags) {
  $("[data-tag-list]", box).replaceChildren(...tags.map(tagChip));
  $("[data-tags-none]", box).hidden = tags.length > 0;
  // the same meme's card on the page behind the dialog shows them too
  const id = box.closest("[data-id]").dataset.id;
  $$(`.card[data-id="${id}"] .card-tags`).forEach((list) => {
    list.replaceChildren(...tags.map((tag) => {
      const li = document.createElement("li");
      const a = document.createElement("a");
      a.href = `${BASE}/?q=${encodeURIComponent(tagQuery(tag))}`;
      a.textContent = tag;
      li.append(a);
      return li;
    }));
  });
}

async function saveTags(box, tags) {
  const id = box.closest("[data-id]").dataset.id;
  const r = await api("PATCH", `/api/v1/memes/${id}`, {tags});
  const error = $(".form-error", box);
  if (!r.ok) { error.textContent = errorText(r.body, r.status); return false; }
  error.textContent = "";
  drawTags(box, r.body.tags || []);
  toast(t("js.tags_saved"));
  return true;
}

const currentTags = (box) => $$("[data-tag-list] li", box).map((li) => li.dataset.tag);

document.addEventListener("submit", async (e) => {
  const form = e.target.closest("form[data-tags-form]");
  if (form) {
    e.preventDefault();
    const box = form.closest("[data-component=tags]");
    const added = form.tags.value.split(/[,，、]/).map((s) => s.trim()).filter(Boolean);
    if (!added.length) return;
    if (await saveTags(box, [...currentTags(box), ...added])) { form.reset(); form.tags.focus(); }
    return;
  }
  const rename = e.target.closest("form[data-tag-rename]");
  if (rename) {
    e.preventDefault();
    const r = await api("PATCH", `/api/v1/tags/${encodeURIComponent(rename.dataset.tagRename)}`, {name: rename.name.value.trim()});
    if (!r.ok) { $(".form-error", rename).textContent = errorText(r.body, r.status); return; }
    toast(t(r.body.merged ? "js.tag_merged" : "js.tag_renamed", {name: r.body.name}));
    location.reload();
  }
});

// A suggested tag (partials/meme_tags.html): one click adds it; its chip goes, the row with the last one.
document.addEventListener("click", async (e) => {
  const button = e.target.closest("[data-tag-action=accept]");
  if (!button) return;
  const box = button.closest("[data-component=tags]");
  button.disabled = true;
  if (!(await saveTags(box, [...currentTags(box), button.dataset.tag]))) { button.disabled = false; return; }
  const row = button.closest("[data-tag-suggestions]");
  button.closest("li").remove();
  if (!$("li", row)) row.remove();
});

document.addEventListener("click", (e) => {
  const button = e.target.closest("[data-tag-action=remove]");
  if (!button) return;
  const box = button.closest("[data-component=tags]");
  const gone = button.closest("li").dataset.tag;
  saveTags(box, currentTags(box).filter((tag) => tag !== gone)).then((ok) => {
    if (ok) { const input = $("input[name=tags]", box); if (input) input.focus(); }
  });
});
