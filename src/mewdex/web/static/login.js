"use strict";
(() => {
  const form = document.getElementById("login-form");
  const next = form ? form.dataset.next || "/" : "/";
  if (form) form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const mode = event.submitter && event.submitter.value === "signup" ? "signup" : "login";
    const resp = await fetch(`/api/v1/auth/${mode}`, {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({email: form.email.value, password: form.password.value,
        setup_code: form.setup_code ? form.setup_code.value : null})});
    if (resp.ok) { location.href = next; return; }
    let message = String(resp.status);
    try { message = (await resp.json()).error.message; } catch (e) { /* not JSON */ }
    document.getElementById("login-error").textContent = message;
  });
  const out = document.getElementById("logout");
  if (out) out.addEventListener("click", async () => {
    await fetch("/api/v1/auth/logout", {method: "POST"});
    location.reload();
  });
})();
