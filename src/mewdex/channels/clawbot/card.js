// The WeChat ClawBot card of the Channels page: the login QR (an SVG the server makes), polled until
// the person confirms in WeChat (then the page reloads, the chat linked) or it expires. Strings come
// from the page's catalogue; every call goes through /api/v1/channels/clawbot.
"use strict";
(() => {
  async function pollLogin(box, qrcode) {
    const status = $(".clawbot-status", box);
    for (let i = 0; i < 120; i++) {
      const r = await api("GET", `/api/v1/channels/clawbot/login/${encodeURIComponent(qrcode)}`);
      if (!r.ok) { status.textContent = errorText(r.body, r.status); return; }
      status.textContent = t(`js.clawbot_${r.body.status}`) || r.body.status;
      if (r.body.status === "confirmed") { setTimeout(() => location.reload(), 800); return; }
      if (r.body.status === "expired") return;
      await new Promise((done) => setTimeout(done, 2000));
    }
  }

  document.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-action='clawbot-login']");
    if (!button) return;
    const box = button.closest("[data-channel]");
    button.disabled = true;
    const r = await api("POST", "/api/v1/channels/clawbot/login");
    button.disabled = false;
    if (!r.ok) return toast(errorText(r.body, r.status), "bad");
    const holder = $(".clawbot-qr", box);
    $(".qr", holder).innerHTML = r.body.qr_svg;  // an SVG made by the server (segno), not user content
    holder.hidden = false;
    pollLogin(box, r.body.qrcode);
  });
})();
