// Connector pages (issue 15): every change through the connectors JSON API, then the page reloads to
// show the server's state. Uses app.js's api/toast/errorText/t (loaded before this file).
"use strict";
(() => {
  const after = (key) => { sessionStorage.setItem("mewdex-connectors-toast", key); location.reload(); };
  const pending = sessionStorage.getItem("mewdex-connectors-toast");
  if (pending) { sessionStorage.removeItem("mewdex-connectors-toast"); toast(t(pending)); }

  async function send(method, url, body, doneKey, control) {
    if (control) control.disabled = true;
    const r = await api(method, url, body);
    if (!r.ok) {
      if (control) control.disabled = false;
      toast(errorText(r.body, r.status), "error");
      return null;
    }
    if (doneKey) after(doneKey);
    return r;
  }

  function parseConfig(form) {
    const text = form.config.value.trim();
    if (!text) return {};
    try {
      const value = JSON.parse(text);
      if (value && typeof value === "object" && !Array.isArray(value)) return value;
    } catch (e) { /* falls through */ }
    toast(t("js.config_not_json"), "error");
    form.config.focus();
    return null;
  }

  function credentials(form) {
    const out = {};
    for (const input of form.querySelectorAll("input[name^='credential:']")) {
      if (input.value) out[input.name.slice("credential:".length)] = input.value;
    }
    return out;
  }

  const forms = {
    async connect(form) {
      const creds = {};
      for (const input of form.querySelectorAll("input[type=password]")) creds[input.name] = input.value;
      const button = form.querySelector("button[type=submit]");
      const r = await send("POST", "/api/v1/connectors/connections", {definition_id: form.dataset.definition, credentials: creds}, null, button);
      if (!r) return;
      after(r.body.state === "verified" ? "js.connector_verified" : "js.connector_failed");
    },
    async policy(form) {
      await send("PATCH", "/api/v1/analysis-policy", {
        vision: form.vision.checked, reverse_image_search: form.reverse_image_search.value, llm_enhance: form.llm_enhance.checked,
        llm_rerank: form.llm_rerank.checked,
      }, "js.saved", form.querySelector("button[type=submit]"));
    },
    async grant(form) {
      if (!form.user_id.value) return;
      await send("PUT", `/api/v1/admin/connectors/${form.dataset.definition}/grants/${form.user_id.value}`, undefined, "js.granted", form.querySelector("button"));
    },
    async patch(form) {
      const config = parseConfig(form);
      if (config === null) return;
      const body = {config, visibility: form.visibility.value, enabled: form.enabled.checked,
                    review_status: form.suspended.checked ? "suspended" : "active"};
      const creds = credentials(form);
      if (Object.keys(creds).length) body.credentials = creds;
      await send("PATCH", `/api/v1/admin/connectors/${form.dataset.definition}`, body, "js.saved", form.querySelector("button[type=submit]"));
    },
    async create(form) {
      const config = parseConfig(form);
      if (config === null) return;
      const body = {provider: form.provider.value, name: form.name.value, config, visibility: form.visibility.value};
      const field = (form.provider.selectedOptions[0].dataset.credentials || "").split(",")[0];
      if (form.platform_secret.value && field) body.credentials = {[field]: form.platform_secret.value};
      await send("POST", "/api/v1/admin/connectors", body, "js.connector_created", form.querySelector("button[type=submit]"));
    },
  };

  document.addEventListener("submit", (e) => {
    const form = e.target.closest("[data-connector-form]");
    if (!form) return;
    e.preventDefault();
    forms[form.dataset.connectorForm](form);
  });

  document.addEventListener("click", async (e) => {
    const el = e.target.closest("[data-connector-action]");
    if (!el) return;
    const action = el.dataset.connectorAction;
    if (action === "verify") {
      const r = await send("POST", `/api/v1/connectors/connections/${el.dataset.connection}/verify`, undefined, null, el);
      if (r) after(r.body.state === "verified" ? "js.connector_verified" : "js.connector_failed");
    } else if (action === "disconnect") {
      await send("DELETE", `/api/v1/connectors/connections/${el.dataset.connection}`, undefined, "js.connector_removed", el);
    } else if (action === "revoke") {
      await send("DELETE", `/api/v1/admin/connectors/${el.dataset.definition}/grants/${el.dataset.user}`, undefined, "js.revoked", el);
    }
  });
})();
