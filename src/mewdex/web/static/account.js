// The account page (/settings: language and time zone, API tokens, password, sign out everywhere), the
// admin page (/admin: sign-up switch, users, quotas, reset links, new accounts) and the reset page
// (/reset#<token>). Every change goes through the JSON API; lists come back as server-rendered fragments
// (htmx reloads them on the body events "tokens-changed" / "users-changed").
"use strict";
(() => {
  const el = (id) => document.getElementById(id);
  const refresh = (name) => htmx.trigger(document.body, name);
  const showError = (box, r) => { if (box) box.textContent = r ? errorText(r.body, r.status) : ""; };

  async function copyFrom(codeEl) {
    const text = codeEl.textContent;
    try { await navigator.clipboard.writeText(text); toast(t("js.copied")); } catch (e) {
      const range = document.createRange();
      range.selectNodeContents(codeEl);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      toast(t("js.copy_select"));
    }
  }

  // A form sends one request at a time: a double click must not make two tokens or two accounts (the
  // submit button is disabled until the answer is in).
  function onSubmit(form, handler) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (form.dataset.busy) return;
      const button = form.querySelector("button[type=submit]");
      form.dataset.busy = "1";
      if (button) button.disabled = true;
      try { await handler(event); } finally {
        delete form.dataset.busy;
        if (button) button.disabled = false;
      }
    });
  }

  // ------------------------------------------------------------ preferences (language, time zone)
  const prefs = el("prefs-form");
  if (prefs) {
    const tz = el("prefs-tz");
    const browserZone = window.mewdexTime.browserZone();
    const shown = el("prefs-browser-zone");
    if (shown) shown.textContent = browserZone;
    if (tz) {
      const list = el("prefs-zones");
      const all = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
      for (const z of all) list.append(Object.assign(document.createElement("option"), {value: z}));
      el("prefs-tz-browser").addEventListener("click", () => { tz.value = browserZone; });
    }
    prefs.addEventListener("submit", async (event) => {
      event.preventDefault();
      const language = prefs.language.value;
      const error = el("prefs-error");
      showError(error, null);
      if (prefs.dataset.account === "1") {
        const zone = tz.value.trim();
        const r = await api("PATCH", "/api/v1/me", {language, time_zone: zone || null});
        if (!r.ok) { showError(error, r); return; }
      }
      // The language cookie of this browser follows (the account's language goes to others at sign-in).
      location.href = `${BASE}/lang/${language}?next=${encodeURIComponent("/settings?saved=1")}`;
    });
    if (new URLSearchParams(location.search).get("saved")) toast(t("js.account_saved"));
  }

  // ------------------------------------------------------------ API tokens
  const tokenForm = el("token-form");
  if (tokenForm) {
    onSubmit(tokenForm, async () => {
      const scopes = Array.from(tokenForm.querySelectorAll("input[name=scope]:checked"), (c) => c.value);
      const days = tokenForm.expires_in_days.value;
      const r = await api("POST", "/api/v1/tokens", {
        name: tokenForm.name.value, scopes, expires_in_days: days ? parseInt(days, 10) : null});
      const error = el("token-error");
      if (!r.ok) { showError(error, r); return; }
      showError(error, null);
      el("token-value").textContent = r.body.token;  // shown this once: the server keeps only its hash
      el("token-new").hidden = false;
      tokenForm.reset();
      refresh("tokens-changed");
    });
    el("token-copy").addEventListener("click", () => copyFrom(el("token-value")));
    el("account-tokens").addEventListener("click", async (event) => {
      const button = event.target.closest("[data-action=revoke-token]");
      if (!button) return;
      if (!confirm(t("js.token_revoke_confirm", {name: button.dataset.name}))) return;
      const r = await api("DELETE", `/api/v1/tokens/${button.dataset.id}`);
      if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
      toast(t("js.token_revoked"));
      refresh("tokens-changed");
    });
  }

  // ------------------------------------------------------------ password, sessions
  const passwordForm = el("password-form");
  if (passwordForm) onSubmit(passwordForm, async () => {
    const error = el("password-error");
    if (passwordForm.new_password.value !== passwordForm.confirm_password.value) {
      error.textContent = t("js.passwords_differ");
      return;
    }
    const r = await api("POST", "/api/v1/auth/password", {
      current_password: passwordForm.current_password.value, new_password: passwordForm.new_password.value});
    if (!r.ok) { showError(error, r); return; }
    showError(error, null);
    passwordForm.reset();
    toast(t("js.password_changed"));
    refresh("tokens-changed");  // a password change revokes every token
  });
  const everywhere = el("sign-out-everywhere");
  if (everywhere) everywhere.addEventListener("click", async () => {
    if (!confirm(t("js.sign_out_everywhere_confirm"))) return;
    const r = await api("POST", "/api/v1/auth/logout-everywhere");
    if (!r.ok) { showError(el("sessions-error"), r); return; }
    location.href = BASE + "/login";
  });

  // ------------------------------------------------------------ reset page
  const resetForm = el("reset-form");
  if (resetForm) {
    // A mangled link (a stray "%") must not stop this script: the form would then be sent the browser's
    // way, with the new password in the address.
    let token = "";
    try { token = decodeURIComponent(location.hash.slice(1)); } catch (e) { token = ""; }
    // The token stays in this page only: the address bar loses it, so it is not kept in history.
    if (location.hash) history.replaceState(null, "", location.pathname);
    if (!token) el("reset-error").textContent = errorText({error: {code: "reset_link_invalid"}}, 410);
    onSubmit(resetForm, async () => {
      const error = el("reset-error");
      if (resetForm.new_password.value !== resetForm.confirm_password.value) {
        error.textContent = t("js.passwords_differ");
        return;
      }
      const r = await api("POST", "/api/v1/auth/reset", {token, new_password: resetForm.new_password.value});
      if (!r.ok) { showError(error, r); return; }
      resetForm.hidden = true;
      el("reset-done").hidden = false;
    });
  }

  // ------------------------------------------------------------ admin
  const toggle = el("signup-toggle");
  if (toggle) toggle.addEventListener("click", async () => {
    const open = toggle.dataset.enabled !== "true";
    const r = await api("PATCH", "/api/v1/admin/settings", {signup_enabled: open});
    if (!r.ok) { showError(el("signup-error"), r); return; }
    location.reload();
  });

  function showResetLink(email, link) {
    el("reset-link-title").textContent = t("js.reset_link_for", {email});
    el("reset-link-value").textContent = link.url;
    el("reset-link-box").hidden = false;
    el("reset-link-box").scrollIntoView({block: "nearest"});
  }
  const users = el("admin-users");
  if (users) {
    el("reset-link-copy").addEventListener("click", () => copyFrom(el("reset-link-value")));
    const number = (value, scale = 1) => (value.trim() === "" ? null : Math.round(parseFloat(value) * scale));
    users.addEventListener("click", async (event) => {
      const button = event.target.closest("button[data-action]");
      if (!button || button.disabled) return;
      button.disabled = true;  // one request per click: a second reset link would void the one shown
      try { await userAction(button); } finally { button.disabled = false; }
    });
    async function userAction(button) {
      const row = button.closest("[data-user]");
      const id = row.dataset.user, email = row.dataset.email;
      let r;
      if (button.dataset.action === "disable-user") {
        if (!confirm(t("js.user_disable_confirm", {email}))) return;
        r = await api("PATCH", `/api/v1/admin/users/${id}`, {disabled: true});
      } else if (button.dataset.action === "enable-user") {
        r = await api("PATCH", `/api/v1/admin/users/${id}`, {disabled: false});
      } else if (button.dataset.action === "delete-user") {
        if (!confirm(t("js.user_delete_confirm", {email}))) return;
        r = await api("DELETE", `/api/v1/admin/users/${id}`);
        if (r.ok) { showError(el("users-error"), null); toast(t("js.user_deleted", {email})); refresh("users-changed"); return; }
      } else if (button.dataset.action === "reset-link") {
        r = await api("POST", `/api/v1/admin/users/${id}/reset-link`);
        if (r.ok) { showResetLink(email, r.body); showError(el("users-error"), null); return; }
      } else return;
      if (!r.ok) { showError(el("users-error"), r); return; }
      showError(el("users-error"), null);
      toast(t("js.user_saved", {email}));
      refresh("users-changed");
    }
    users.addEventListener("submit", async (event) => {
      const form = event.target.closest("form[data-action=save-quota]");
      if (!form) return;
      event.preventDefault();
      const row = form.closest("[data-user]");
      const quota = {storage_bytes: number(form.storage_mb.value, 1048576), memes: number(form.memes.value),
                     analysis_cost_per_month: form.cost.value.trim() === "" ? null : parseFloat(form.cost.value)};
      const r = await api("PATCH", `/api/v1/admin/users/${row.dataset.user}`, {quota});
      if (!r.ok) { showError(el("users-error"), r); return; }
      showError(el("users-error"), null);
      toast(t("js.user_saved", {email: row.dataset.email}));
      refresh("users-changed");
    });
  }
  const createForm = el("create-user-form");
  if (createForm) onSubmit(createForm, async () => {
    const r = await api("POST", "/api/v1/admin/users", {
      email: createForm.email.value, name: createForm.name.value.trim() || null, role: createForm.role.value});
    if (!r.ok) { showError(el("create-user-error"), r); return; }
    showError(el("create-user-error"), null);
    createForm.reset();
    showResetLink(r.body.user.email, r.body.reset_link);
    refresh("users-changed");
  });
})();
