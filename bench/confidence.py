"""Calibration of search confidence (``mewdex.search.confidence``) on the dev queries.

The query's label is the best confidence of its first results (:func:`mewdex.search.confidence.query_label`:
the one rule the chat and the search page both ask; ``low`` is "no strong match").
For each label this prints, over the dev queries, how many queries get it and its precision: how often
the first result is one of the query's labelled relevant memes (a lower bound: an unlabelled meme may
fit too); and how many correct first results get ``low`` (a correct first result under a "nothing
matches" sentence). Then the nonsense strings' labels (they should be ``low``), and, per result of the
top 10, the precision of each confidence level.

``--dump FILE`` also writes each query's top 10 with the features the rule reads (fused score, keyword
hit, exact phrase) and whether each is relevant, for calibrating the thresholds offline.

Run: .venv/bin/python bench/confidence.py [--data-dir DIR] [--dump FILE]
(the corpus as bench/quality.py prepares it: a fresh data dir imports and processes all of it first)
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
LABELS = ("high", "medium", "low")
PAGE = 20  # the search page's results (web.routers.search_pages.SEARCH_RESULTS)


def label_of(levels: list) -> str:
    """The query's label by the rule the chat and the page use; before issue 45 (no ``query_label``)
    the rule was "no strong match" (``low`` here) when no result of the page was ``high``."""
    from mewdex.search import confidence

    if hasattr(confidence, "query_label"):
        return confidence.query_label(levels) or "low"
    return "high" if confidence.strong_match(levels) else "low"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", help="a data dir that holds the processed corpus (else a fresh one)")
    parser.add_argument("--dump", help="write each query's top 10 and its features (JSON) to this file")
    args = parser.parse_args()
    corpus.use_data_dir(args.data_dir)
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline.status import status
    from mewdex.runtime import prepare_database
    from mewdex.search import keyword, service
    from mewdex.search import text as search_text

    prepare_database()
    sessions, scope = get_sessionmaker(), default_scope()
    with sessions.begin() as session:
        if status(session, scope)["memes"] == 0:
            corpus.prepare()
    mapping = corpus.path_to_meme_ids()
    queries = corpus.dev_queries()
    queries += [{"query": q, "relevant": [], "type": "nonsense", "lang": "-"} for q in NONSENSE]
    levels: dict[str, list[bool]] = defaultdict(list)
    by_label: dict[str, dict[str, list[bool]]] = {"dev": defaultdict(list), "nonsense": defaultdict(list)}
    dumped = []
    for q in queries:
        relevant = {mapping[p] for p in q["relevant"] if p in mapping}
        with sessions.begin() as session:
            page = service.search(session, scope, q["query"], PAGE, learn=False).results
            lexical = keyword.search(
                session, scope.scope_id, search_text.clean_query(q["query"]), service.CANDIDATES, None
            )
        group = "nonsense" if q["type"] == "nonsense" else "dev"
        label = label_of([r.confidence for r in page])
        results = page[:10]
        by_label[group][label].append(bool(results) and results[0].id in relevant)
        if group == "dev":
            for r in results:
                levels[r.confidence or "none"].append(r.id in relevant)
        hits = {str(h.meme_id): h.phrase for h in lexical}
        dumped.append(
            {
                "query": q["query"],
                "type": q["type"],
                "lang": q["lang"],
                "label": label,
                "top": [
                    {
                        "score": r.score,
                        "keyword": r.id in hits,
                        "phrase": bool(hits.get(r.id)),
                        "relevant": r.id in relevant,
                        "confidence": r.confidence,
                    }
                    for r in results
                ],
            }
        )
    dev = by_label["dev"]
    n_dev = sum(len(v) for v in dev.values())
    print(f"the query's label (the rule the chat and the page ask) on {n_dev} dev queries")
    print("  precision = how often the first result is a labelled relevant meme (a lower bound)")
    for label in LABELS:
        rows = dev.get(label, [])
        precision = f"{sum(rows) / len(rows):.2f}" if rows else "  - "
        words = ' ("no strong match")' if label == "low" else ""
        print(f"  {label:7s} queries={len(rows):3d} precision={precision}{words}")
    correct = sum(sum(v) for v in dev.values())
    print(f"  correct first results: {correct}/{n_dev}; under 'no strong match': {sum(dev.get('low', []))}")
    nonsense = by_label["nonsense"]
    print(
        f"nonsense: {len(nonsense.get('low', []))}/{sum(len(v) for v in nonsense.values())} labelled low "
        f"({', '.join(f'{k} {len(v)}' for k, v in sorted(nonsense.items()))})"
    )
    print("dev top-10 results by confidence (precision = labelled relevant share, a lower bound)")
    for level in LABELS:
        rows = levels.get(level, [])
        print(f"  {level:7s} n={len(rows):4d} precision={sum(rows) / max(1, len(rows)):.2f}")
    if args.dump:
        with open(args.dump, "w", encoding="utf-8") as f:
            json.dump(dumped, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
