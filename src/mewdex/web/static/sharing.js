// A collection's sharing section (issue 43; collection.html, the owner's page): accounts by email with a
// role (PUT/DELETE /api/v1/collections/{id}/members/{email}) and public links with an expiry
// (POST/DELETE /api/v1/collections/{id}/links; a new link's URL is shown once, with a copy button).
// The lists are redrawn from the server's templates (<template data-member-template>, …) without a reload.
// Uses app.js's api, t, toast, errorText, copyText, $ and $$ (loaded before this file).
"use strict";

const shareBox = (el) => el.closest("[data-component=sharing]");
const sharePath = (box) => `/api/v1/collections/${encodeURIComponent(box.dataset.collection)}`;

function shareEmpty(box) {
  $("[data-members-none]", box).hidden = $$("[data-member-list] li", box).length > 0;
  $("[data-links-none]", box).hidden = $$("[data-link-list] li", box).length > 0;
}

function memberRow(box, member) {
  const li = $("[data-member-template]", box).content.firstElementChild.cloneNode(true);
  li.dataset.email = member.email;
  $(".share-what", li).textContent = member.email;
  const role = $("select", li);
  role.value = member.role;
  role.setAttribute("aria-label", role.dataset.label.replace("{email}", member.email));
  const remove = $("[data-share-action=remove-member]", li);
  remove.setAttribute("aria-label", remove.dataset.label.replace("{email}", member.email));
  return li;
}

function linkRow(box, link) {
  const li = $("[data-link-template]", box).content.firstElementChild.cloneNode(true);
  li.dataset.link = link.id;
  const time = $("time", li);
  time.setAttribute("datetime", link.expires_at);
  time.textContent = window.mewdexTime ? window.mewdexTime.format(link.expires_at) : link.expires_at;
  time.dataset.local = "1";
  $("[data-link-owner]", li).hidden = !link.show_owner;
  return li;
}

async function putMember(box, email, role) {
  return api("PUT", `${sharePath(box)}/members/${encodeURIComponent(email)}`, {role});
}

document.addEventListener("submit", async (e) => {
  const form = e.target.closest("form[data-share-form]");
  if (!form) return;
  e.preventDefault();
  const box = shareBox(form);
  const error = $(".form-error", form);
  const button = $("button[type=submit]", form);
  button.disabled = true;
  try {
    if (form.dataset.shareForm === "member") {
      const email = form.email.value.trim();
      const r = await putMember(box, email, form.role.value);
      if (!r.ok) {
        error.textContent = r.status === 404 ? t("js.share_no_account") : errorText(r.body, r.status);
        return;
      }
      error.textContent = "";
      const list = $("[data-member-list]", box);
      const old = $$("li", list).find((li) => li.dataset.email === r.body.email);
      const row = memberRow(box, r.body);
      if (old) old.replaceWith(row); else list.append(row);
      form.reset();
      toast(t("js.share_added", {email: r.body.email}));
    } else {
      const r = await api("POST", `${sharePath(box)}/links`,
        {expires_in_days: Number(form.days.value), show_owner: form.show_owner.checked});
      if (!r.ok) { error.textContent = errorText(r.body, r.status); return; }
      error.textContent = "";
      $("[data-link-list]", box).prepend(linkRow(box, r.body));
      const shown = $("[data-new-link]", box);
      $("[data-new-link-url]", shown).value = r.body.url;
      shown.dataset.link = r.body.id;
      shown.hidden = false;
      $("[data-new-link-url]", shown).select();
      toast(t("js.share_link_created"));
    }
    shareEmpty(box);
  } finally {
    button.disabled = false;
  }
});

document.addEventListener("change", async (e) => {
  const select = e.target.closest("[data-share-action=role]");
  if (!select) return;
  const box = shareBox(select);
  const email = select.closest("li").dataset.email;
  const r = await putMember(box, email, select.value);
  if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
  toast(t("js.share_role_saved", {email}));
});

document.addEventListener("click", async (e) => {
  const button = e.target.closest("[data-share-action]");
  if (!button || button.tagName === "SELECT") return;
  const box = shareBox(button);
  const action = button.dataset.shareAction;
  if (action === "copy-url") {
    const ok = await copyText($("[data-new-link-url]", box).value);
    toast(ok ? t("js.copied_link") : t("js.copy_failed"), ok ? "ok" : "error");
    return;
  }
  const li = button.closest("li");
  let r;
  if (action === "remove-member") {
    r = await api("DELETE", `${sharePath(box)}/members/${encodeURIComponent(li.dataset.email)}`);
  } else if (action === "delete-link") {
    r = await api("DELETE", `${sharePath(box)}/links/${encodeURIComponent(li.dataset.link)}`);
  } else {
    return;
  }
  if (!r.ok && r.status !== 404) { toast(errorText(r.body, r.status), "error"); return; }
  li.remove();
  const shown = $("[data-new-link]", box);
  if (action === "delete-link" && shown.dataset.link === li.dataset.link) shown.hidden = true;
  shareEmpty(box);
  toast(t(action === "remove-member" ? "js.share_removed" : "js.share_link_deleted"));
});

// A member's page of a collection shared with it (partials/collection_member.html): the "use in my chat
// answers" choice (PUT /api/v1/collections/{id}/membership) and, for an editor, adding a meme of its own
// library (POST /api/v1/collections/{id}/items: a copy lands in the owner's library; the page reloads to
// show it).
document.addEventListener("change", async (e) => {
  const box = e.target.closest("[data-component=membership]");
  if (!box || e.target.dataset.memberAction !== "use-in-chat") return;
  const on = e.target.checked;
  const r = await api("PUT", `${sharePath(box)}/membership`, {use_in_chat: on});
  if (!r.ok) {
    e.target.checked = !on;
    toast(errorText(r.body, r.status), "error");
    return;
  }
  toast(t(r.body.use_in_chat ? "js.member_chat_on" : "js.member_chat_off"));
});

document.addEventListener("click", async (e) => {
  const button = e.target.closest("[data-member-action=add]");
  if (!button) return;
  const box = button.closest("[data-component=member-add]");
  button.disabled = true;
  const r = await api("POST", `${sharePath(box)}/items`, {meme_ids: [button.dataset.meme]});
  if (!r.ok) {
    button.disabled = false;
    toast(errorText(r.body, r.status), "error");
    return;
  }
  toast(t("js.member_added"));
  setTimeout(() => window.location.reload(), 600);
});
