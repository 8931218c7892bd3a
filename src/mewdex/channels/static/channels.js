// The Channels settings page: revoke a binding, a linked chat's pool (the collection it answers from)
// and auto-save; each channel's card is the generic card's (channel_card.js).
// Every change goes through /api/v1/channels; strings come from the page's catalogue.
"use strict";
(() => {
  const section = (el) => el.closest("[data-channel]");

  document.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-action]");
    if (!button) return;
    const box = section(button);
    if (button.dataset.action === "revoke-channel") {
      if (!confirm(t("js.channel_revoke_confirm"))) return;
      const r = await api("DELETE", `/api/v1/channels/${encodeURIComponent(box.dataset.channel)}`);
      if (!r.ok) return toast(errorText(r.body, r.status), "bad");
      toast(t("js.channel_revoked"));
      setTimeout(() => location.reload(), 600);
    }
  });

  document.addEventListener("change", async (event) => {
    const control = event.target.closest("[data-setting]");
    if (!control) return;
    const channel = encodeURIComponent(section(control).dataset.channel);
    control.disabled = true;
    const r = control.dataset.setting === "pool"
      ? await api("PUT", `/api/v1/channels/${channel}/pool`, {collection_id: control.value || null})
      : await api("PUT", `/api/v1/channels/${channel}/save-all`, {save_all: control.checked});
    control.disabled = false;
    if (!r.ok) {
      if (control.type === "checkbox") control.checked = !control.checked;
      return toast(errorText(r.body, r.status), "bad");
    }
    toast(t(control.dataset.setting === "pool" ? "js.channel_pool_saved"
      : control.checked ? "js.channel_autosave_on" : "js.channel_autosave_off"));
  });
})();
