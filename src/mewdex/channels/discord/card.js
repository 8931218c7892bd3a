// The Discord card of the Channels page: connect the application by its bot token, register the
// commands, choose the channel for scheduled memes (the link code is the page's generic bind-code
// button). Strings come from the page's catalogue; every change goes through /api/v1/channels/discord.
"use strict";
(() => {
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-action='discord-commands']");
    if (!button) return;
    button.disabled = true;
    const r = await api("POST", "/api/v1/channels/discord/commands");
    button.disabled = false;
    if (!r.ok) return toast(errorText(r.body, r.status), "bad");
    toast(t("js.discord_commands_registered"));
    setTimeout(() => location.reload(), 600);
  });

  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("[data-channel-form='discord-connect'], [data-channel-form='discord-channel']");
    if (!form) return;
    event.preventDefault();
    const error = $(".form-error", form);
    error.textContent = "";
    const r = form.dataset.channelForm === "discord-connect"
      ? await api("PUT", "/api/v1/channels/discord", {bot_token: form.elements.bot_token.value.trim()})
      : await api("PUT", "/api/v1/channels/discord/channel", {channel_id: form.elements.channel_id.value.trim() || null});
    if (!r.ok) { error.textContent = errorText(r.body, r.status); return; }
    form.reset();
    toast(t(form.dataset.channelForm === "discord-connect" ? "js.discord_connected" : "js.discord_channel_saved"));
    setTimeout(() => location.reload(), 600);
  });
})();
