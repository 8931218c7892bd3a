// The generic channel card of the Channels page (channels/card.html): it runs what a channel's
// declared setup schema put in data-* attributes, naming no channel. A form (data-channel-form) or a
// button with data-method/data-path calls the API; on success data-done says what follows (a toast,
// a reveal filled from the answer, reset, reload) and data-poll asks again until a stop value; a
// copy button copies its reveal's value; data-fetch / data-load fill values when the page loads; a
// data-wait line says "waiting" until the channel's binding is connected. Strings come from the
// page's catalogue.
"use strict";
(() => {
  const section = (el) => el.closest("[data-channel]");
  const json = (el, name) => (el.dataset[name] ? JSON.parse(el.dataset[name]) : null);

  function fill(box, ref, body) {
    const holder = $(`.${CSS.escape(ref)}`, box);
    if (!holder) return null;
    for (const el of holder.querySelectorAll("[data-fill]")) {
      const value = body[el.dataset.fill];
      if (el.dataset.fillKind === "link") { el.href = value; el.textContent = value; }
      else if (el.dataset.fillKind === "svg") el.innerHTML = value;  // an SVG made by the server, not user content
      else if (el.dataset.fillKind !== "status") el.textContent = value ?? "";
    }
    holder.hidden = false;
    return holder;
  }

  async function poll(holder, spec, body) {
    const path = spec.path.replace(/\{(\w+)\}/g, (_m, key) => encodeURIComponent(body[key] ?? ""));
    const status = holder && $("[data-fill-kind='status']", holder);
    for (let i = 0; i < spec.tries; i++) {
      const r = await api("GET", path);
      if (!r.ok) { if (status) status.textContent = errorText(r.body, r.status); return; }
      const value = r.body[spec.field];
      if (status) status.textContent = t(`${spec.words}${value}`) || value;
      const stop = spec.stop[value];
      if (stop === "reload") { setTimeout(() => location.reload(), 800); return; }
      if (stop) return;
      await new Promise((done) => setTimeout(done, spec.every_ms));
    }
  }

  function answered(el, ref, body, form) {
    const box = section(el);
    const done = json(el, "done") || {};
    const holder = done.reveal ? fill(box, done.reveal, body) : null;
    if (form && done.reset) form.reset();
    if (done.toast) toast(t(done.toast));
    if (done.reload) setTimeout(() => location.reload(), 600);
    const spec = json(el, "poll");
    if (spec) poll(holder, spec, body);
    const line = $("[data-wait]", box);
    if (line && json(line, "wait").after === ref) wait(line, true);
  }

  // A live line (data-wait): asks the bindings until this channel's active one has the flag, then
  // says so (stops when it is gone, or after an hour).
  const timers = new WeakMap();
  function wait(line, fresh) {
    const spec = json(line, "wait");
    const channel = section(line).dataset.channel;
    const done = line.nextElementSibling;
    if (fresh) line.textContent = t(spec.waiting);
    line.hidden = false;
    done.hidden = true;
    clearTimeout(timers.get(line));
    const until = Date.now() + 3600_000;
    const tick = async () => {
      const r = await api("GET", "/api/v1/channels");
      const b = r.ok ? r.body.bindings.find((x) => x.channel === channel && x.status === "active") : null;
      if (r.ok && !b) { line.hidden = true; return; }  // unlinked meanwhile
      if (b && b.config[spec.flag]) {
        line.hidden = true;
        done.textContent = t(spec.done, {identity: b.identity || ""});
        done.hidden = false;
        return;
      }
      if (Date.now() < until) timers.set(line, setTimeout(tick, spec.every_ms));
    };
    timers.set(line, setTimeout(tick, spec.every_ms));
  }

  document.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-channel] button[data-path], [data-channel] button[data-copy]");
    if (!button) return;
    if (button.dataset.copy) {
      const value = $(`[data-fill='${CSS.escape(button.dataset.copy)}']`, button.parentElement);
      if (value && await copyText(value.textContent)) toast(t("js.channel_secret_copied"));
      return;
    }
    button.disabled = true;
    const r = await api(button.dataset.method, button.dataset.path, json(button, "body") ?? undefined);
    button.disabled = false;
    if (!r.ok) return toast(errorText(r.body, r.status), "bad");
    answered(button, button.dataset.action, r.body, null);
  });

  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("[data-channel] form[data-channel-form][data-path]");
    if (!form) return;
    event.preventDefault();
    const error = $(".form-error", form);
    error.textContent = "";
    const body = {...(json(form, "fixed") || {})};
    for (const box of form.querySelectorAll("[name][data-blank]")) {
      const value = box.value.trim();
      if (!value && box.dataset.blank === "omit") continue;
      body[box.name] = !value && box.dataset.blank === "null" ? null
        : "number" in box.dataset && value ? Number(value) : value;
    }
    const submit = $("button[type='submit']", form);
    submit.disabled = true;
    const r = await api(form.dataset.method, form.dataset.path, body);
    submit.disabled = false;
    if (!r.ok) { error.textContent = errorText(r.body, r.status); return; }
    answered(form, form.dataset.channelForm, r.body, form);
  });

  // Values the page fills when it loads (one request per path): a read-only value to copy, a form's
  // stored values (never a secret).
  for (const line of document.querySelectorAll("[data-channel] [data-wait]")) if (!line.hidden) wait(line, false);
  const loads = {};
  const load = (path) => (loads[path] ??= api("GET", path));
  for (const el of document.querySelectorAll("[data-channel] [data-fetch]")) {
    load(el.dataset.fetch).then((r) => { if (r.ok) el.textContent = r.body[el.dataset.fetchField] ?? ""; });
  }
  for (const form of document.querySelectorAll("[data-channel] form[data-load]")) {
    load(form.dataset.load).then((r) => {
      if (!r.ok) return;
      for (const box of form.querySelectorAll("[name]")) {
        const value = r.body[box.name];
        if (value !== null && value !== undefined && box.type !== "password") box.value = value;
      }
    });
  }
})();
