// The chat page (/chat): conversations and messages through /api/v1/conversations, replies streamed
// over SSE (fetch + a stream reader). Uses app.js's helpers (t, api, toast, errorText); copy image /
// copy link buttons are handled by app.js's click handler (data-action on a [data-id] card).
// Everything from the server is put in the page as text (textContent), never as HTML.
"use strict";

(() => {
  const root = document.getElementById("chat");
  if (!root) return;
  const el = (id) => document.getElementById(id);
  const list = el("chat-list"), log = el("chat-log"), input = el("chat-input"), form = el("chat-form");
  const send = el("chat-send"), stop = el("chat-stop"), file = el("chat-file"), title = el("chat-title");
  const search = el("chat-search"), trash = el("chat-trash");
  let current = root.dataset.conversation || null;
  let pendingImage = null;
  let streaming = false;

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

  function icon(name) {
    const tpl = document.getElementById(`chat-icon-${name}`);
    return tpl ? tpl.content.cloneNode(true) : document.createTextNode("");
  }

  function withIcon(n, name) { n.append(icon(name)); return n; }

  // ---------------------------------------------------------------- conversation list

  async function loadList() {
    const params = new URLSearchParams();
    if (search.value.trim()) params.set("q", search.value.trim());
    if (trash.checked) params.set("deleted", "true");
    const r = await api("GET", `/api/v1/conversations?${params}`);
    list.replaceChildren();
    if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
    if (!r.body.items.length) list.append(node("li", {class: "chat-list-empty"}, t("js.chat_none")));
    for (const c of r.body.items) {
      const li = node("li", {"data-conversation": c.id, class: c.id === current ? "is-current" : ""});
      const open = node("button", {type: "button", class: "chat-open", title: c.name}, c.name);
      open.addEventListener("click", () => (trash.checked ? null : openConversation(c.id)));
      li.append(open);
      if (trash.checked) {
        const restore = node("button", {type: "button", class: "chat-restore"}, t("js.chat_restore"));
        restore.addEventListener("click", () => restoreConversation(c.id));
        li.append(restore);
      } else {
        const rename = node("button", {type: "button", class: "icon chat-rename", title: t("js.chat_rename"),
                                       "aria-label": t("js.chat_rename")}, "✎");
        rename.addEventListener("click", () => renameConversation(c));
        const del = withIcon(node("button", {type: "button", class: "icon chat-delete", title: t("js.chat_delete"),
                                             "aria-label": t("js.chat_delete")}), "remove");
        del.addEventListener("click", () => deleteConversation(c.id));
        li.append(rename, del);
      }
      list.append(li);
    }
  }

  async function renameConversation(c) {
    const name = window.prompt(t("js.chat_rename_prompt"), c.name);
    if (name === null || !name.trim()) return;
    const r = await api("PATCH", `/api/v1/conversations/${c.id}`, {name});
    if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
    if (c.id === current) title.textContent = r.body.name;
    loadList();
  }

  async function deleteConversation(id) {
    const r = await api("DELETE", `/api/v1/conversations/${id}`);
    if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
    toast(t("js.chat_deleted"));
    if (id === current) newChat();
    loadList();
  }

  async function restoreConversation(id) {
    const r = await api("POST", `/api/v1/conversations/${id}/restore`);
    if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
    toast(t("js.chat_restored"));
    trash.checked = false;
    await loadList();
    openConversation(id);
  }

  function newChat() {
    current = null;
    history.replaceState(null, "", BASE + "/chat");
    title.textContent = document.title.split(" · ")[0];
    log.replaceChildren(el("chat-empty") || node("li"));
    input.focus();
    $$("li.is-current", list).forEach((li) => li.classList.remove("is-current"));
  }

  async function openConversation(id) {
    const [c, m] = await Promise.all([api("GET", `/api/v1/conversations/${id}`),
                                      api("GET", `/api/v1/conversations/${id}/messages?limit=100`)]);
    if (!c.ok || !m.ok) { toast(errorText((c.ok ? m : c).body, (c.ok ? m : c).status), "error"); return; }
    current = id;
    history.replaceState(null, "", `${BASE}/chat?c=${id}`);
    title.textContent = c.body.name;
    log.replaceChildren();
    for (const msg of m.body.items) renderMessage(msg);
    $$("li[data-conversation]", list).forEach((li) => li.classList.toggle("is-current", li.dataset.conversation === id));
    toggleSide(false);
    scrollDown();
  }

  // Phones (CSS folds the list below 700 px): the toggle opens and closes it; opening a conversation closes it.
  const sideToggle = el("chat-side-toggle");
  function toggleSide(open) {
    root.classList.toggle("side-open", open);
    sideToggle.setAttribute("aria-expanded", String(open));
  }
  sideToggle.hidden = false;
  root.classList.add("has-side-toggle");
  sideToggle.addEventListener("click", () => toggleSide(!root.classList.contains("side-open")));

  // ---------------------------------------------------------------- messages

  function scrollDown() { log.lastElementChild?.scrollIntoView({block: "end"}); }

  function bubble(role) {
    el("chat-empty")?.remove();
    const li = node("li", {class: `chat-msg chat-${role}`});
    li.append(node("span", {class: "chat-who"}, role === "user" ? t("js.chat_you") : t("js.chat_assistant")));
    const text = node("p", {class: "chat-text"});
    const cards = node("ul", {class: "chat-cards"});
    li.append(text, cards);
    log.append(li);
    return {li, text, cards};
  }

  function card(m) {
    const li = node("li", {class: "card chat-card", "data-id": m.meme_id, "data-name": m.display_name});
    if (m.media_url !== `/media/${m.meme_id}`) li.dataset.src = m.media_url;  // a shared collection's meme
    const a = node("a", {class: "card-open", href: BASE + m.page_url, target: "_blank", rel: "noopener"});
    a.append(node("img", {src: BASE + m.thumbnail_url, alt: m.display_name, loading: "lazy", decoding: "async"}));
    a.append(node("span", {class: "name"}, m.display_name));
    const actions = node("div", {class: "card-actions"});
    actions.append(
      withIcon(node("button", {type: "button", "data-action": "copy-image", title: t("js.copy_image"),
                               "aria-label": t("js.copy_image")}), "copy"),
      withIcon(node("button", {type: "button", "data-action": "copy-link", title: t("js.copy_link"),
                               "aria-label": t("js.copy_link")}), "link"),
      withIcon(node("button", {type: "button", "data-action": "share", title: t("js.share"),
                               "aria-label": t("js.share")}), "share"),
      // download="" keeps the server's file name (Content-Disposition: name and extension)
      withIcon(node("a", {href: `${BASE}${m.media_url}?download=1`, download: "", title: t("js.download"),
                          "aria-label": t("js.download")}), "download"),
    );
    li.append(a, actions);
    return li;
  }

  function renderMessage(msg) {
    const b = bubble(msg.role === "user" ? "user" : "assistant");
    b.text.textContent = msg.content;
    if (msg.attachments && msg.attachments.length) b.li.append(node("span", {class: "chat-note"}, t("js.chat_image_attached")));
    for (const m of msg.memes || []) b.cards.append(card(m));
    return b;
  }

  function setStreaming(on) {
    streaming = on;
    send.hidden = on;
    stop.hidden = !on;
    if (on) stop.focus(); else input.focus();
  }

  function parseEvents(buffer, onEvent) {
    let idx;
    while ((idx = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, idx);
      buffer = buffer.slice(idx + 2);
      let name = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) name = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (data) onEvent(name, JSON.parse(data));
    }
    return buffer;
  }

  async function sendMessage() {
    if (streaming) return;
    const content = input.value.trim();
    if (!content && !pendingImage) return;
    if (!current) {
      const r = await api("POST", "/api/v1/conversations", {});
      if (!r.ok) { toast(errorText(r.body, r.status), "error"); return; }
      current = r.body.id;
      history.replaceState(null, "", `${BASE}/chat?c=${current}`);
    }
    let body, headers = {Accept: "text/event-stream"};
    if (pendingImage) {
      body = new FormData();
      body.append("file", pendingImage, pendingImage.name || "image.png");
      body.append("content", content);
    } else {
      body = JSON.stringify({content});
      headers["Content-Type"] = "application/json";
    }
    input.value = "";
    clearImage();
    setStreaming(true);
    let reply = null;
    try {
      const resp = await fetch(`${BASE}/api/v1/conversations/${current}/messages`, {method: "POST", headers, body});
      if (!resp.ok || !resp.body) {
        let data = null;
        try { data = await resp.json(); } catch (e) { /* not JSON */ }
        toast(errorText(data, resp.status), "error");
        return;
      }
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buffer = parseEvents(buffer + decoder.decode(value, {stream: true}), (name, data) => {
          if (name === "message") {
            renderMessage(data);
            // A chat model may search for a while before its first word: show that it is working.
            reply = bubble("assistant");
            reply.li.classList.add("is-working");
          } else if (name === "delta") {
            reply = reply || bubble("assistant");
            reply.li.classList.remove("is-working");
            reply.text.textContent += data.text;
          } else if (name === "meme") {
            reply = reply || bubble("assistant");
            reply.li.classList.remove("is-working");
            reply.cards.append(card(data));
          } else if (name === "error") {
            toast(errorText({error: data}, 422), "error");
          } else if (name === "done") {
            if (data.run_status === "cancelled") {
              (reply || bubble("assistant")).li.append(node("span", {class: "chat-note"}, t("js.chat_stopped")));
            }
          }
          scrollDown();
        });
      }
    } catch (e) {
      toast(t("js.offline"), "error");
    } finally {
      if (reply) {
        reply.li.classList.remove("is-working");
        if (!reply.text.textContent && !reply.cards.children.length && !reply.li.querySelector(".chat-note")) reply.li.remove();
      }
      setStreaming(false);
      loadList();
      fetch(`${BASE}/api/v1/conversations/${current}`).then((r) => r.json()).then((c) => { if (c.name) title.textContent = c.name; })
        .catch(() => {});
    }
  }

  async function stopReply() {
    if (!current) return;
    const r = await api("POST", `/api/v1/conversations/${current}/cancel`);
    if (!r.ok && r.status !== 409) toast(errorText(r.body, r.status), "error");
  }

  // ---------------------------------------------------------------- attachments

  function setImage(f) {
    if (!f || !f.type.startsWith("image/")) return;
    pendingImage = f;
    const img = el("chat-attachment-img");
    if (img.src) URL.revokeObjectURL(img.src);
    img.src = URL.createObjectURL(f);
    img.alt = f.name || "";
    el("chat-attachment").hidden = false;
  }

  function clearImage() {
    pendingImage = null;
    file.value = "";
    el("chat-attachment").hidden = true;
  }

  // ---------------------------------------------------------------- wiring

  form.addEventListener("submit", (e) => { e.preventDefault(); sendMessage(); });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); sendMessage(); }
  });
  input.addEventListener("paste", (e) => {
    const f = [...(e.clipboardData?.files || [])].find((x) => x.type.startsWith("image/"));
    if (f) { e.preventDefault(); setImage(f); }
  });
  stop.addEventListener("click", stopReply);
  el("chat-attach").addEventListener("click", () => file.click());
  file.addEventListener("change", () => setImage(file.files[0]));
  el("chat-attachment-remove").addEventListener("click", clearImage);
  el("chat-attachment-remove").setAttribute("aria-label", t("js.chat_remove_image"));
  el("chat-new").addEventListener("click", newChat);
  let searchTimer = null;
  search.addEventListener("input", () => { clearTimeout(searchTimer); searchTimer = setTimeout(loadList, 200); });
  trash.addEventListener("change", loadList);

  loadList();
  if (current) openConversation(current);
  input.focus();
})();
