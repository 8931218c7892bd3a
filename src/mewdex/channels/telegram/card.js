// The Telegram card of the Channels page: the link to the bot (a one-time start link), the admin's
// bot token (saved sealed; used at once) and removing it. Strings come from the page's catalogue;
// every change goes through /api/v1/channels/telegram.
"use strict";
(() => {
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-action='telegram-link'], [data-action='telegram-token-remove']");
    if (!button) return;
    if (button.dataset.action === "telegram-link") {
      button.disabled = true;
      const r = await api("POST", "/api/v1/channels/telegram/link");
      button.disabled = false;
      if (!r.ok) return toast(errorText(r.body, r.status), "bad");
      const holder = $(".telegram-link", button.closest("[data-channel]"));
      const a = $("a", holder);
      a.href = r.body.url;
      a.textContent = r.body.url;
      holder.hidden = false;
      return;
    }
    const r = await api("PUT", "/api/v1/channels/telegram/token", {token: null});
    if (!r.ok) return toast(errorText(r.body, r.status), "bad");
    toast(t("js.telegram_token_removed"));
    setTimeout(() => location.reload(), 600);
  });

  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("[data-channel-form='telegram-token']");
    if (!form) return;
    event.preventDefault();
    const error = $(".form-error", form);
    error.textContent = "";
    const r = await api("PUT", "/api/v1/channels/telegram/token", {token: form.elements.token.value.trim()});
    if (!r.ok) { error.textContent = errorText(r.body, r.status); return; }
    form.reset();
    toast(t("js.telegram_token_saved"));
    setTimeout(() => location.reload(), 600);
  });
})();
