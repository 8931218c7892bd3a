// The Channels settings page: link Telegram, the admin's Telegram bot token (saved sealed; used at
// once), add a webhook (its secret shown once), revoke a binding.
// Every change goes through /api/v1/channels; strings come from the page's catalogue.
"use strict";
(() => {
  const section = (el) => el.closest("[data-channel]");

  document.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-action]");
    if (!button) return;
    const box = section(button);
    if (button.dataset.action === "telegram-link") {
      button.disabled = true;
      const r = await api("POST", "/api/v1/channels/telegram/link");
      button.disabled = false;
      if (!r.ok) return toast(errorText(r.body, r.status), "bad");
      const holder = $(".telegram-link", box);
      const a = $("a", holder);
      a.href = r.body.url;
      a.textContent = r.body.url;
      holder.hidden = false;
    } else if (button.dataset.action === "revoke-channel") {
      if (!confirm(t("js.channel_revoke_confirm"))) return;
      const r = await api("DELETE", `/api/v1/channels/${encodeURIComponent(box.dataset.channel)}`);
      if (!r.ok) return toast(errorText(r.body, r.status), "bad");
      toast(t("js.channel_revoked"));
      setTimeout(() => location.reload(), 600);
    } else if (button.dataset.action === "telegram-token-remove") {
      const r = await api("PUT", "/api/v1/channels/telegram/token", {token: null});
      if (!r.ok) return toast(errorText(r.body, r.status), "bad");
      toast(t("js.telegram_token_removed"));
      setTimeout(() => location.reload(), 600);
    } else if (button.dataset.action === "copy-secret") {
      if (await copyText($(".webhook-secret code", box).textContent)) toast(t("js.channel_secret_copied"));
    }
  });

  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("[data-channel-form='webhook-create'], [data-channel-form='telegram-token']");
    if (!form) return;
    event.preventDefault();
    const error = $(".form-error", form);
    error.textContent = "";
    if (form.dataset.channelForm === "telegram-token") {
      const r = await api("PUT", "/api/v1/channels/telegram/token", {token: form.elements.token.value.trim()});
      if (!r.ok) { error.textContent = errorText(r.body, r.status); return; }
      form.reset();
      toast(t("js.telegram_token_saved"));
      setTimeout(() => location.reload(), 600);
      return;
    }
    const r = await api("POST", "/api/v1/channels/webhook", {url: form.elements.url.value.trim()});
    if (!r.ok) { error.textContent = errorText(r.body, r.status); return; }
    const box = section(form);
    $(".webhook-secret code", box).textContent = r.body.secret;
    $(".webhook-secret", box).hidden = false;
    form.reset();
    toast(t("js.channel_webhook_saved"));
  });
})();
