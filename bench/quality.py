"""Retrieval-quality benchmark on the real corpus and its development queries.

Imports and processes the whole corpus into a fresh data dir (or reuses ``--data-dir`` when it
already holds it), then reports Recall@1/5/10 and MRR@10 overall, per ``lang`` and per ``type``
for the default (fused) search and for each leg alone, in the same run; and known-item search:
each vvquest caption (its file stem) as the query, the share found first.

R@k is the share of a query's relevant memes in the top k; Rcap@10 divides by min(|relevant|, 10)
instead; S@10 is the share of queries with any relevant meme in the top 10.

Run: .venv/bin/python bench/quality.py [--data-dir DIR]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import corpus

VARIANTS = {"default": None, "keyword": ("keyword",), "e5": ("e5",), "use": ("use",)}
KS = (1, 5, 10)
METRICS = ("R@1", "R@5", "R@10", "Rcap@10", "S@10", "MRR@10")


def evaluate(run, queries, mapping) -> dict:
    """Per query: relevant meme ids vs the ranked ids; aggregated recall@k and MRR@10."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for q in queries:
        relevant = {mapping[p] for p in q["relevant"] if p in mapping}
        ranked = run(q["query"])
        hit_ranks = [i for i, m in enumerate(ranked[:10], 1) if m in relevant]
        figures = {f"R@{k}": len(relevant & set(ranked[:k])) / len(relevant) for k in KS}
        # Capped recall: a query with 20 relevant memes can score 1.0 at 10 (BEIR's R_cap@k).
        figures["Rcap@10"] = len(relevant & set(ranked[:10])) / min(len(relevant), 10)
        figures["S@10"] = 1.0 if hit_ranks else 0.0
        figures["MRR@10"] = 1 / hit_ranks[0] if hit_ranks else 0.0
        for group in ("all", f"lang={q['lang']}", f"type={q['type']}"):
            groups[group].append(figures)
    return {
        g: {m: round(sum(f[m] for f in rows) / len(rows), 3) for m in rows[0]} | {"n": len(rows)}
        for g, rows in sorted(groups.items())
    }


def known_item(run, mapping) -> tuple[float, list[str]]:
    """Share of vvquest images found first when their file stem is the query; and the misses."""
    paths = sorted(p for p in mapping if p.startswith("vvquest/"))
    misses = []
    for path in paths:
        ranked = run(Path(path).stem)
        if not ranked or ranked[0] != mapping[path]:
            misses.append(path)
    return 1 - len(misses) / len(paths), misses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", help="reuse a data dir that already holds the processed corpus")
    args = parser.parse_args()
    data_dir = corpus.use_data_dir(args.data_dir)
    print(f"data dir: {data_dir}")
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline.status import status
    from mewdex.runtime import prepare_database
    from mewdex.search import service

    prepare_database()
    sessions, scope = get_sessionmaker(), default_scope()
    with sessions.begin() as session:
        if status(session, scope)["memes"] == 0:
            corpus.prepare()
    mapping = corpus.path_to_meme_ids()
    queries = corpus.dev_queries()

    def runner(legs):
        def run(query: str) -> list[str]:
            with sessions.begin() as session:
                kwargs = {} if legs is None else {"legs": legs}
                return [str(r.id) for r in service.search(session, scope, query, 10, **kwargs).results]

        return run

    print(f"{len(queries)} queries, {len(set(mapping.values()))} memes")
    results = {name: evaluate(runner(legs), queries, mapping) for name, legs in VARIANTS.items()}
    groups = list(results["default"])
    for group in groups:
        print(f"\n[{group}] n={results['default'][group]['n']}")
        print(f"  {'variant':10s} " + " ".join(f"{m:>7s}" for m in METRICS))
        for name in VARIANTS:
            row = results[name][group]
            print(f"  {name:10s} " + " ".join(f"{row[m]:7.3f}" for m in METRICS))
    best_leg = max(results[v]["all"]["MRR@10"] for v in VARIANTS if v != "default")
    print(
        f"\ndefault MRR@10 {results['default']['all']['MRR@10']:.3f} vs best single leg {best_leg:.3f} "
        f"(gap {results['default']['all']['MRR@10'] - best_leg:+.3f})"
    )
    share, misses = known_item(runner(None), mapping)
    print(f"known-item (vvquest file stem as query) found first: {share:.3f} ({len(misses)} misses)")
    for path in misses[:20]:
        print(f"  miss: {path}")


if __name__ == "__main__":
    main()
