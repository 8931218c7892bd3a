// The schedules page (/schedules): a cron builder with presets (every weekday / week / day at a
// time) or the raw expression, the zone (the account's, else the browser's, by default), the next five runs from
// /api/v1/schedules/preview while editing, the jobs with pause / resume / delete, and a job's run
// history. Uses app.js's helpers (t, api, toast, errorText); server text goes in as textContent only.
"use strict";

(() => {
  const root = document.getElementById("schedules");
  if (!root) return;
  const el = (id) => document.getElementById(id);
  const form = el("sched-form"), preset = el("sched-preset"), day = el("sched-day"), time = el("sched-time");
  const cronInput = el("sched-cron"), tz = el("sched-tz"), next = el("sched-next");
  const previewError = el("sched-preview-error"), description = el("sched-description");
  const list = el("sched-list"), empty = el("sched-empty");
  let previewTimer = null, previewSeq = 0, shownJob = null;

  function node(tag, attrs = {}, text) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") n.className = v;
      else if (k.includes("-")) n.setAttribute(k, v);
      else n[k] = v;
    }
    if (text !== undefined) n.textContent = text;
    return n;
  }

  // ---------------------------------------------------------------- builder

  function fromPreset() {
    const [hh, mm] = (time.value || "09:00").split(":").map((x) => String(parseInt(x, 10)));
    const dow = {weekdays: "1-5", weekly: day.value, daily: "*"}[preset.value];
    if (dow !== undefined) cronInput.value = `${mm} ${hh} * * ${dow}`;
    showFields();
    schedulePreview();
  }

  function showFields() {
    el("sched-day-label").hidden = preset.value !== "weekly";
    el("sched-time-label").hidden = preset.value === "custom";
  }

  // The raw expression typed by hand: show the matching preset when there is one, else "custom".
  function toPreset() {
    const m = cronInput.value.trim().split(/\s+/);
    const simple = m.length === 5 && /^\d+$/.test(m[0]) && /^\d+$/.test(m[1]) && m[2] === "*" && m[3] === "*";
    if (simple && ["1-5", "*"].includes(m[4])) preset.value = m[4] === "*" ? "daily" : "weekdays";
    else if (simple && /^[0-6]$/.test(m[4])) { preset.value = "weekly"; day.value = m[4]; }
    else preset.value = "custom";
    if (simple) time.value = `${m[1].padStart(2, "0")}:${m[0].padStart(2, "0")}`;
    showFields();
    schedulePreview();
  }

  function schedulePreview() {
    clearTimeout(previewTimer);
    previewTimer = setTimeout(preview, 200);
  }

  async function preview() {
    const seq = ++previewSeq;
    const params = new URLSearchParams({cron: cronInput.value.trim(), tz: tz.value.trim(), count: "5"});
    const r = await api("GET", `/api/v1/schedules/preview?${params}`);
    if (seq !== previewSeq) return;  // a later edit answered first
    next.replaceChildren();
    if (!r.ok) {
      previewError.hidden = false;
      const detail = r.body && r.body.error && r.body.error.message;
      previewError.textContent = errorText(r.body, r.status) + (detail && !errorText(r.body, r.status).includes(detail) ? ` (${detail})` : "");
      description.textContent = "";
      return;
    }
    previewError.hidden = true;
    // cronsim's description is English only: shown on the English page
    const english = document.documentElement.lang === "en";
    description.textContent = english && r.body.description ? `· ${r.body.description}` : "";
    for (const run of r.body.runs) next.append(runItem(run, r.body.tz));
  }

  // A run's wall time in the schedule's own zone, in the page's language (a weekday in Chinese on the
  // Chinese page); the API's local_display is English.
  const wallTime = (run, zone) => {
    const part = (options) => window.mewdexTime.format(run.utc, {timeZone: zone, ...options});
    return [part({weekday: "short"}), part({year: "numeric", month: "2-digit", day: "2-digit"}),
            part({hour: "2-digit", minute: "2-digit", hourCycle: "h23"})].join(" ");
  };

  function runItem(run, zone) {
    const li = node("li", {class: "sched-run"});
    li.append(node("strong", {}, wallTime(run, zone)), " ",
              node("span", {class: "muted"}, `${zone} (UTC${run.utc_offset}) · ${run.utc.slice(0, 16).replace("T", " ")} UTC`));
    return li;
  }

  function zones() {
    const local = window.mewdexTime.zone();  // the account's zone, else the browser's
    if (local) tz.value = local;
    const all = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
    const list = el("sched-zones");
    for (const z of all) list.append(node("option", {value: z}));
  }

  // Delivery targets: the caller's active channel bindings (a chat app, a webhook, …), when there are any.
  async function loadChannels() {
    const r = await api("GET", "/api/v1/channels");
    if (!r.ok || !r.body.bindings) return;
    const select = el("sched-notify");
    for (const b of r.body.bindings) {
      if (b.status === "active") select.append(node("option", {value: b.channel}, b.channel));
    }
  }

  // ---------------------------------------------------------------- jobs

  function stateText(job) {
    if (job.enabled) return t("js.sched_enabled");
    return job.disabled_reason ? t("js.sched_disabled", {reason: job.disabled_reason}) : t("js.sched_paused");
  }

  async function loadJobs() {
    const r = await api("GET", "/api/v1/schedules");
    list.replaceChildren();
    if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
    empty.hidden = r.body.items.length > 0;
    for (const job of r.body.items) list.append(jobItem(job));
  }

  function jobItem(job) {
    const li = node("li", {class: `sched-job${job.enabled ? "" : " is-off"}`, "data-job": job.id});
    const head = node("div", {class: "sched-job-head"});
    head.append(node("strong", {}, job.name), " ", node("code", {}, job.cron), " ", node("span", {class: "muted"}, job.tz));
    const meta = node("div", {class: "sched-job-meta"});
    meta.append(node("span", {}, `${t("js.sched_prompt")}: ${job.prompt}`));
    if (job.notify) meta.append(node("span", {}, t("js.sched_sends_to", {target: job.notify.channel || job.notify.type})));
    if (job.enabled) {
      meta.append(node("span", {class: "sched-job-next"},
        t("js.sched_next", {local: wallTime(job.next_run, job.tz), utc: job.next_run.utc.slice(11, 16)})));
    }
    meta.append(node("span", {class: "sched-state"}, stateText(job)));
    if (job.last_status) meta.append(node("span", {}, t("js.sched_last", {status: t(`status.${job.last_status}`)})));
    const actions = node("div", {class: "sched-actions"});
    const toggle = node("button", {type: "button"}, job.enabled ? t("js.sched_pause") : t("js.sched_resume"));
    toggle.addEventListener("click", () => change(job, job.enabled ? "pause" : "resume"));
    const runs = node("button", {type: "button"}, t("js.sched_runs"));
    runs.addEventListener("click", () => showRuns(job));
    const del = node("button", {type: "button", class: "danger"}, t("js.sched_delete"));
    del.addEventListener("click", () => remove(job));
    actions.append(toggle, runs, del);
    li.append(head, meta, actions);
    return li;
  }

  async function change(job, action) {
    const r = await api("POST", `/api/v1/schedules/${job.id}/${action}`);
    if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
    loadJobs();
  }

  async function remove(job) {
    if (!window.confirm(t("js.sched_delete_confirm", {name: job.name}))) return;
    const r = await api("DELETE", `/api/v1/schedules/${job.id}`);
    if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
    toast(t("js.sched_deleted"));
    if (shownJob === job.id) el("sched-runs").hidden = true;
    loadJobs();
  }

  async function showRuns(job) {
    const r = await api("GET", `/api/v1/schedules/${job.id}/runs`);
    if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
    shownJob = job.id;
    el("sched-runs").hidden = false;
    el("sched-runs-name").textContent = `· ${job.name}`;
    const body = el("sched-runs-body");
    body.replaceChildren();
    if (!r.body.items.length) {
      const tr = node("tr");
      tr.append(node("td", {colSpan: 5, class: "muted"}, t("js.sched_no_runs")));
      body.append(tr);
    }
    for (const run of r.body.items) {
      const tr = node("tr", {"data-status": run.status});
      let detail = run.reason || (run.error_code ? `${run.error_code}: ${run.error || ""}` : "");
      if (run.coalesced) detail = `${t("js.sched_coalesced", {n: run.coalesced})} ${detail}`;
      const detailCell = node("td", {}, detail);
      if (run.conversation_id) {
        detailCell.append(" ", node("a", {href: `${BASE}/chat?c=${run.conversation_id}`}, t("js.sched_conversation")));
      }
      tr.append(node("td", {}, wallTime(run.slot, job.tz)), node("td", {}, run.slot.utc.slice(0, 16).replace("T", " ")),
                node("td", {}, t(`status.${run.status}`)), node("td", {}, t(`js.sched_delivery_${run.delivery_status}`)),
                detailCell);
      body.append(tr);
    }
    el("sched-runs").scrollIntoView({block: "nearest"});
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {
      name: el("sched-name").value.trim(), prompt: el("sched-prompt").value.trim(),
      cron: cronInput.value.trim(), tz: tz.value.trim(), mode: el("sched-mode").value,
    };
    const channel = el("sched-notify").value;
    if (channel) body.notify = {type: "channel", channel};
    const r = await api("POST", "/api/v1/schedules", body);
    if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
    toast(t("js.sched_created", {name: r.body.name}));
    el("sched-name").value = "";
    el("sched-prompt").value = "";
    loadJobs();
  });

  preset.addEventListener("change", fromPreset);
  day.addEventListener("change", fromPreset);
  time.addEventListener("input", fromPreset);
  cronInput.addEventListener("input", toPreset);
  tz.addEventListener("input", schedulePreview);
  zones();
  day.value = "1";
  showFields();
  preview();
  loadJobs();
  loadChannels();
})();
