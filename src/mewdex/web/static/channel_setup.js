// The Channels page's QQ (OneBot) and WeCom blocks: connect a QQ bot (its token shown once; the card
// then says it waits for the bot, polling the bindings until the bot connects), the WeCom app (admin)
// and a member's bind code, and the bind code of any channel that binds by one.
"use strict";
(() => {
  const section = (el) => el.closest("[data-channel]");

  document.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-action]");
    if (!button) return;
    const box = section(button);
    if (button.dataset.action === "copy-onebot-token") {
      if (await copyText($(".onebot-token", box).textContent)) toast(t("js.channel_secret_copied"));
    } else if (button.dataset.action === "wecom-link") {
      button.disabled = true;
      const r = await api("POST", "/api/v1/channels/wecom/link");
      button.disabled = false;
      if (!r.ok) return toast(errorText(r.body, r.status), "bad");
      $(".wecom-code code", box).textContent = r.body.code;
      $(".wecom-code", box).hidden = false;
    } else if (button.dataset.action === "bind-code") {  // any channel that binds by a code
      button.disabled = true;
      const r = await api("POST", `/api/v1/channels/${encodeURIComponent(box.dataset.channel)}/code`);
      button.disabled = false;
      if (!r.ok) return toast(errorText(r.body, r.status), "bad");
      $(".bind-code code", box).textContent = r.body.code;
      $(".bind-code", box).hidden = false;
    }
  });

  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("[data-channel-form='onebot-bind'], [data-channel-form='wecom-app']");
    if (!form) return;
    event.preventDefault();
    const error = $(".form-error", form);
    error.textContent = "";
    const box = section(form);
    if (form.dataset.channelForm === "onebot-bind") {
      const owner = form.elements.owner_qq.value.trim();
      const r = await api("POST", "/api/v1/channels/onebot", {mode: "ws", owner_qq: owner || null});
      if (!r.ok) { error.textContent = errorText(r.body, r.status); return; }
      $(".onebot-ws", box).textContent = r.body.ws_url;
      $(".onebot-token", box).textContent = r.body.access_token;
      $(".onebot-secret", box).hidden = false;
      waitForBot(box);
      return;
    }
    const body = {corp_id: form.elements.corp_id.value.trim(), agent_id: Number(form.elements.agent_id.value)};
    for (const name of ["secret", "token", "encoding_aes_key"]) {
      const value = form.elements[name].value.trim();
      if (value) body[name] = value;
    }
    const r = await api("PUT", "/api/v1/channels/wecom/app", body);
    if (!r.ok) { error.textContent = errorText(r.body, r.status); return; }
    toast(t("js.channel_wecom_saved"));
    setTimeout(() => location.reload(), 600);
  });

  // After Connect (or on a page whose QQ bot is not connected): "waiting for the bot to connect" until
  // the binding says connected (every ONEBOT_POLL_MS; stops when connected, unlinked or after an hour).
  const ONEBOT_POLL_MS = 3000;
  let waiting = null;
  function waitForBot(box) {
    const wait = $(".onebot-wait", box);
    const done = $(".onebot-connected", box);
    wait.textContent = t("js.onebot_waiting");
    wait.hidden = false;
    done.hidden = true;
    if (waiting) clearTimeout(waiting);
    const until = Date.now() + 3600 * 1000;
    const tick = async () => {
      waiting = null;
      const r = await api("GET", "/api/v1/channels");
      const b = r.ok ? r.body.bindings.find((x) => x.channel === "onebot" && x.status === "active") : null;
      if (r.ok && !b) { wait.hidden = true; return; }  // unlinked meanwhile
      if (b && b.config.connected) {
        wait.hidden = true;
        done.textContent = t("js.onebot_connected", {qq: b.identity || ""});
        done.hidden = false;
        return;
      }
      if (Date.now() < until) waiting = setTimeout(tick, ONEBOT_POLL_MS);
    };
    waiting = setTimeout(tick, ONEBOT_POLL_MS);
  }
  const onebotBox = document.querySelector("[data-channel='onebot']");
  if (onebotBox && $(".onebot-wait", onebotBox) && !$(".onebot-wait", onebotBox).hidden) waitForBot(onebotBox);

  // The admin's WeCom form shows what is stored (never a secret) and the callback URL to enter.
  const admin = document.querySelector("[data-channel-form='wecom-app']");
  if (admin) {
    api("GET", "/api/v1/channels/wecom/app").then((r) => {
      if (!r.ok) return;
      $(".wecom-callback", section(admin)).textContent = r.body.callback_url;
      if (r.body.configured) {
        admin.elements.corp_id.value = r.body.corp_id;
        admin.elements.agent_id.value = r.body.agent_id;
      }
    });
  }
})();
