// QQ's card: after Connect (or on a page whose QQ bot is not connected), "waiting for the bot to
// connect" until the binding says connected (every POLL_MS; stops when connected, unlinked or after
// an hour). The form and the token shown once are the generic card's (it says "answered" with an event).
"use strict";
(() => {
  const POLL_MS = 3000;
  let waiting = null;
  function waitForBot(box) {
    const wait = $(".onebot-wait", box);
    const done = $(".onebot-connected", box);
    wait.textContent = t("js.onebot_waiting");
    wait.hidden = false;
    done.hidden = true;
    clearTimeout(waiting);
    const until = Date.now() + 3600_000;
    const tick = async () => {
      const r = await api("GET", "/api/v1/channels");
      const b = r.ok ? r.body.bindings.find((x) => x.channel === "onebot" && x.status === "active") : null;
      if (r.ok && !b) { wait.hidden = true; return; }  // unlinked meanwhile
      if (b && b.config.connected) {
        wait.hidden = true;
        done.textContent = t("js.onebot_connected", {qq: b.identity || ""});
        done.hidden = false;
        return;
      }
      if (Date.now() < until) waiting = setTimeout(tick, POLL_MS);
    };
    waiting = setTimeout(tick, POLL_MS);
  }
  document.addEventListener("channel:answered", (event) => {
    if (event.detail.channel === "onebot" && event.detail.ref === "onebot-bind") waitForBot(event.target);
  });
  const box = document.querySelector("[data-channel='onebot']");
  if (box && $(".onebot-wait", box) && !$(".onebot-wait", box).hidden) waitForBot(box);
})();
