// Search as you type (debounced) against POST /api/v1/search.
const q = document.getElementById("q");
const results = document.getElementById("results");
const statusLine = document.getElementById("status");
let timer = null;
let seq = 0;

function card(r) {
  const a = document.createElement("a");
  a.href = r.media_url;
  a.target = "_blank";
  const img = document.createElement("img");
  img.src = `/media/${r.id}/thumbnail`;
  img.alt = r.display_name;
  img.loading = "lazy";
  const p = document.createElement("p");
  p.textContent = r.display_name;
  a.append(img, p);
  const div = document.createElement("div");
  div.className = "card";
  div.append(a);
  return div;
}

async function run() {
  const query = q.value.trim();
  const mine = ++seq;
  if (!query) { results.replaceChildren(); statusLine.textContent = ""; return; }
  try {
    const resp = await fetch("/api/v1/search", {
      method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({query, n_results: 30}),
    });
    const body = await resp.json();
    if (mine !== seq) return;
    if (!resp.ok) { statusLine.textContent = body.error ? body.error.message : "search failed"; return; }
    results.replaceChildren(...body.results.map(card));
    statusLine.textContent = body.results.length
      ? `${body.results.length} results · ${body.took_ms} ms`
      : "没有结果 · no results — try other words, or import memes with `mewdex import FOLDER`";
  } catch (e) {
    statusLine.textContent = "the server cannot be reached";
  }
}

q.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(run, 150); });
document.addEventListener("keydown", (e) => { if (e.key === "/" && document.activeElement !== q) { e.preventDefault(); q.focus(); } });
