"""Web UI benchmark: time from a keystroke in the search box to rendered results, in a real browser.

Starts ``mewdex serve`` (no worker threads) on a data dir holding the processed corpus
(``--data-dir``, e.g. the one bench/quality.py printed; without it the corpus is imported and
processed first), opens the search page in headless Chromium (Debian's ``/usr/bin/chromium``
through Playwright) and, for every dev query and known caption, types its last character as a
real key press after setting the rest silently. The time runs in the page from that ``keydown`` to
the first animation frame after HTMX swapped the new results in: debounce, request, server-side
search and rendering included. Prints p50/p95/max (target: p95 ≤ 300 ms).

Run: .venv/bin/python bench/ui.py [--data-dir DIR] [--rounds 2] [--limit N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import corpus
from search_latency import bench_queries, serve

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

INSTRUMENT = """() => {
  window.__lat = [];
  window.__t0 = null;
  document.addEventListener("keydown", () => { window.__t0 = performance.now(); }, true);
  document.body.addEventListener("htmx:afterSwap", (e) => {
    if (e.detail.target.id !== "results" || window.__t0 === null) return;
    const t0 = window.__t0;
    window.__t0 = null;
    requestAnimationFrame(() => window.__lat.push(performance.now() - t0));
  });
}"""


def measure(url: str, queries: list[str], rounds: int) -> list[float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url + "/")
        page.evaluate(INSTRUMENT)
        box = page.locator("#q")
        for query in queries[:5]:  # warm-up: models and caches
            box.fill(query)
            page.wait_for_selector("#results .result-meta, #results .state")
        expected = 0
        for _ in range(rounds):
            for query in queries:
                if len(query) < 2:
                    continue
                page.evaluate("v => { const q = document.getElementById('q'); q.value = v; }", query[:-1])
                box.focus()
                page.keyboard.press("End")
                expected = page.evaluate("window.__lat.length") + 1
                page.keyboard.type(query[-1])
                page.wait_for_function("n => window.__lat.length >= n", arg=expected, timeout=30_000)
        timings = page.evaluate("window.__lat")
        browser.close()
    return sorted(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="only the first N queries (0 = all)")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        sys.exit("chromium not found: make browser")
    data_dir = corpus.use_data_dir(args.data_dir)
    if args.data_dir is None:
        corpus.prepare()
    queries = bench_queries()
    if args.limit:
        queries = queries[: args.limit]
    with serve(data_dir) as url:
        timings = measure(url, queries, args.rounds)
    p95 = timings[int(0.95 * (len(timings) - 1))]
    print(
        f"{len(timings)} keystroke→rendered results over {len(queries)} queries: "
        f"p50 {statistics.median(timings):.0f} ms, p95 {p95:.0f} ms, max {timings[-1]:.0f} ms "
        f"(the 50 ms debounce included; target p95 ≤ 300 ms)"
    )


if __name__ == "__main__":
    main()
