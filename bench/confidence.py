"""Calibration of search confidence (``mewdex.search.confidence``) on the dev queries.

For the top 10 of each dev query and of a set of nonsense strings: per confidence level, how many
results and which share of them are labelled relevant (a lower bound: unlabelled memes may fit
too); per query set, the share of queries with a strong match (any ``high`` result). Also the
precision of the candidate rules (keyword hit or not, by fused score) the thresholds come from.

Run: .venv/bin/python bench/confidence.py [--data-dir DIR]   (the corpus as bench/quality.py prepares it)
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import corpus

NONSENSE = (
    "qqqqzzzzxxxx", "asdfghjkl", "zxqv wplk mmrt", "xyzzy plugh", "kjhgfdsa qwerty", "ptlkmqwe zzz",
    "ooooooooo", "bnmbnm", "qqq", "vvvvwwww", "zzzz xxxx", "flurbo glarp", "lorem ipsum dolor", "12345 67890",
    "咕叽咕叽啪嗒", "xqjz",
)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", help="a data dir that holds the processed corpus (else a fresh one)")
    args = parser.parse_args()
    corpus.use_data_dir(args.data_dir)
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
    queries = [json.loads(line) for line in (corpus.CORPUS / "queries_dev.jsonl").open(encoding="utf-8")]
    queries += [{"query": q, "relevant": [], "type": "nonsense"} for q in NONSENSE]
    levels: dict[str, list[bool]] = defaultdict(list)
    strong: dict[str, list[bool]] = defaultdict(list)
    for q in queries:
        relevant = {mapping[p] for p in q["relevant"] if p in mapping}
        with sessions.begin() as session:
            results = service.search(session, scope, q["query"], 10).results
        group = "nonsense" if q["type"] == "nonsense" else "dev"
        strong[group].append(any(r.confidence == "high" for r in results))
        if group == "dev":
            for r in results:
                levels[r.confidence or "none"].append(r.id in relevant)
    print("dev top-10 results by confidence (precision = labelled relevant share, a lower bound)")
    for level in ("high", "medium", "low"):
        rows = levels.get(level, [])
        print(f"  {level:7s} n={len(rows):4d} precision={sum(rows) / max(1, len(rows)):.2f}")
    for group, rows in strong.items():
        print(f"{group}: {sum(rows)}/{len(rows)} queries with a strong match")


if __name__ == "__main__":
    main()
