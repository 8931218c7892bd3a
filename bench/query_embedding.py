"""The query embedding inside search (issue 14): what e5 costs per token, beside USE, and how a fused
search fares with the query embedded inside the e5 leg (1 thread, or the query threads) or first
(what ``service.embed_queries`` does).

Runs in-process on a library that bench/scale.py grew (``--data-dir``; its large default scope and
the 100-meme ``bench-small`` scope), over the same queries as bench/scale.py, with the query cache
emptied before every search (the process's and the data dir's shared one). It also prints what
several queries cost in one engine call (the micro-batch of concurrent searches' queries). The
modes run one after another in the same process, so compare them as ratios; run with nothing else busy on the machine.

Run: .venv/bin/python bench/query_embedding.py --data-dir /tmp/scale [--rounds 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import corpus
from scale import SMALL_SCOPE, bench_queries, figures


def timed(fn, items) -> list[float]:
    out = []
    for item in items:
        t = time.perf_counter()
        fn(item)
        out.append((time.perf_counter() - t) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help="a library grown by bench/scale.py")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over the queries per mode (default 2)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    corpus.use_data_dir(args.data_dir)

    from mewdex.db.engine import get_sessionmaker
    from mewdex.db.models import ScopeContext
    from mewdex.inference import models
    from mewdex.library.scopes import default_scope
    from mewdex.runtime import prepare_database
    from mewdex.search import service

    prepare_database()
    queries = bench_queries()
    e5, use = models.text_embedder("e5"), models.text_embedder("use")
    e5.load()
    use.load()
    results: dict = {"queries": len(queries), "query_threads": e5.query_threads}

    # e5 per token: one text per length, on 1 thread and on the query threads.
    engine = e5._get()
    per_token = {}
    for threads in sorted({1, e5.query_threads}):
        saved, e5.query_threads = e5.query_threads, threads
        rows = []
        for text in ("cat", "cat keyboard sleeping", "distracted boyfriend looking at another girl while she is angry"):
            ms = sorted(timed(e5.embed_query, [f"{text} {i}" for i in range(20)]))
            rows.append({"tokens": engine.token_count(text, True), "p50_ms": round(ms[len(ms) // 2], 2)})
        e5.query_threads = saved
        per_token[threads] = rows
    results["e5_per_token"] = per_token
    tag = iter(range(10**9))  # every query text new: no cache on the engine's side either

    # Several queries in one engine call (what E5Embedder does with the queries of concurrent
    # searches): wall and CPU ms per query, on the query threads; 1 = a call per query.
    import time

    per_batch = {}
    for k in (1, 2, 4, 8):
        walls, cpus = [], []
        for r in range(12):
            texts = [f"{queries[(r * k + i) % len(queries)]} {next(tag)}" for i in range(k)]
            wall, cpu = time.perf_counter(), time.process_time()
            e5._embed_queries(engine, texts)
            walls.append((time.perf_counter() - wall) * 1000 / k)
            cpus.append((time.process_time() - cpu) * 1000 / k)
        per_batch[k] = {"ms_per_query": round(sorted(walls)[6], 2), "cpu_ms_per_query": round(sorted(cpus)[6], 2)}
    results["e5_batch"] = per_batch
    results["e5_alone"] = figures(timed(lambda q: e5.embed_query(f"{q} {next(tag)}"), queries))
    results["use_then_e5"] = figures(
        timed(lambda q: (use.embed_query(f"{q} {next(tag)}"), e5.embed_query(f"{q} {next(tag)}")), queries)
    )

    sessions = get_sessionmaker()
    scopes = {"large": default_scope().scope_id, "small": SMALL_SCOPE}
    first = service.embed_queries
    modes = {
        "inside the e5 leg, 1 thread": (lambda *a: None, 1),
        f"inside the e5 leg, {e5.query_threads} threads": (lambda *a: None, e5.query_threads),
        f"first, {e5.query_threads} threads": (first, e5.query_threads),
    }
    saved_threads = e5.query_threads
    results["fused"] = {}
    try:
        for mode, (embed, threads) in modes.items():
            service.embed_queries, e5.query_threads = embed, threads
            entry = {}
            for name, scope_id in scopes.items():

                def search(q: str, scope_id: str = scope_id) -> None:
                    service.forget_query_vectors()
                    with sessions.begin() as session:
                        service.search(session, ScopeContext(scope_id), q, 10)

                timed(search, queries[:5])  # warm
                entry[name] = figures(timed(search, queries * args.rounds))
            results["fused"][mode] = entry
    finally:
        service.embed_queries, e5.query_threads = first, saved_threads

    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{len(queries)} queries; e5 query threads {e5.query_threads}")
    for threads, rows in per_token.items():
        print(f"  e5 on {threads} thread(s): " + ", ".join(f"{r['tokens']} tokens {r['p50_ms']} ms" for r in rows))
    print(
        "  e5 queries per engine call → ms per query (CPU ms): "
        + ", ".join(f"{k}: {v['ms_per_query']} ({v['cpu_ms_per_query']})" for k, v in per_batch.items())
    )
    a, b = results["e5_alone"], results["use_then_e5"]
    print(
        f"  e5 query alone p50/p95 {a['p50_ms']:.1f}/{a['p95_ms']:.1f} ms;"
        f" USE then e5 {b['p50_ms']:.1f}/{b['p95_ms']:.1f}"
    )
    print(f"  {'fused search (embedding included)':40s} {'large p50/p95':>16s} {'100-meme p50/p95':>18s}")
    for mode, entry in results["fused"].items():
        big, small = entry["large"], entry["small"]
        print(
            f"  {mode:40s} {big['p50_ms']:7.1f} / {big['p95_ms']:<6.1f}"
            f" {small['p50_ms']:8.1f} / {small['p95_ms']:<6.1f}"
        )


if __name__ == "__main__":
    sys.exit(main())
