// The sign-in page (/login): sign in, sign up (when the admin opened it) and, on a new install, create the
// admin with the setup code. The browser's time zone goes along: an account without one takes it.
// Errors are the catalogue's words for the error code (errorText of app.js), in the page's language.
"use strict";
(() => {
  const form = document.getElementById("login-form");
  const next = form ? form.dataset.next || "/" : "/";
  const browserZone = () => { try { return Intl.DateTimeFormat().resolvedOptions().timeZone || null; } catch (e) { return null; } };
  if (form) form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const mode = form.dataset.mode === "setup" || (event.submitter && event.submitter.value === "signup") ? "signup" : "login";
    const error = document.getElementById("login-error");
    error.textContent = "";
    const body = {email: form.email.value, password: form.password.value, time_zone: browserZone()};
    if (mode === "signup") body.setup_code = form.setup_code ? form.setup_code.value.trim() || null : null;
    const r = await api("POST", `/api/v1/auth/${mode}`, body);
    if (r.ok) { location.href = BASE + next; return; }
    error.textContent = errorText(r.body, r.status);
  });
  const out = document.getElementById("logout");
  if (out) out.addEventListener("click", async () => {
    await fetch(BASE + "/api/v1/auth/logout", {method: "POST"});
    location.reload();
  });
})();
