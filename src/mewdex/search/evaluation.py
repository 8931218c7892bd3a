"""Retrieval quality of a scope's search on a query set: Recall@10 and MRR@10.

A query set is JSON lines ``{"query": str, "ids": [meme id, …]}`` and/or ``"sha256": [hex, …]``
(the memes that should be found; either identifies them). :func:`load_queries` reads one;
:func:`evaluate` runs each query through :func:`mewdex.search.service.search` with the given legs
(the scope's active generations) and returns ``{"queries", "evaluated", "recall_at_10",
"mrr_at_10", "skipped"}``; a query none of whose memes is in the scope is skipped (counted).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from mewdex.db.models import Meme, ScopeContext

K = 10


def load_queries(path: Path) -> list[dict[str, Any]]:
    """The query set in ``path`` (JSON lines; blank lines ignored). Raises ValueError naming the line."""
    queries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise ValueError(f"line {number} is not JSON") from None
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("query"), str)
            or not (row.get("ids") or row.get("sha256"))
        ):
            raise ValueError(f"line {number} needs a query and ids or sha256")
        queries.append(row)
    return queries


def evaluate(
    session: Session, scope: ScopeContext, queries: list[dict[str, Any]], legs: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """Recall@10 and MRR@10 of the scope's search over ``queries`` (module doc)."""
    from mewdex.search.service import LEGS, search

    by_sha = {
        sha: str(i)
        for i, sha in session.execute(select(Meme.id, Meme.sha256).where(Meme.scope_id == scope.scope_id)).all()
    }
    known = set(by_sha.values())
    recall = mrr = 0.0
    evaluated = skipped = 0
    for row in queries:
        wanted = {str(i) for i in row.get("ids") or [] if str(i) in known}
        wanted |= {by_sha[s] for s in row.get("sha256") or [] if s in by_sha}
        if not wanted:
            skipped += 1
            continue
        hits = [str(h.id) for h in search(session, scope, row["query"][:500], n_results=K, legs=legs or LEGS).results]
        found = [rank for rank, meme_id in enumerate(hits[:K], 1) if meme_id in wanted]
        recall += len(found) / min(len(wanted), K)
        mrr += 1.0 / found[0] if found else 0.0
        evaluated += 1
    return {
        "queries": len(queries),
        "evaluated": evaluated,
        "skipped": skipped,
        "recall_at_10": round(recall / evaluated, 4) if evaluated else None,
        "mrr_at_10": round(mrr / evaluated, 4) if evaluated else None,
    }


def recall_at_k(approximate: list[list], exact: list[list], k: int = K) -> float:
    """Mean over queries of |approximate[:k] ∩ exact[:k]| / |exact[:k]| (an index's recall against an
    exact scan; 1.0 for no queries, a query whose exact list is empty counts 1.0)."""
    if not exact:
        return 1.0
    pairs = zip(approximate, exact, strict=True)
    shares = [len(set(a[:k]) & set(e[:k])) / len(e[:k]) if e[:k] else 1.0 for a, e in pairs]
    return sum(shares) / len(shares)


def distance_recall_at_k(
    approximate: list[list[float]], exact: list[list[float]], k: int = K, epsilon: float = 1e-3
) -> float:
    """Recall that counts ties as found (ANN-benchmarks' definition): per query, the share of the
    approximate top ``k`` whose similarity is at least the exact ``k``-th similarity minus ``epsilon``,
    over ``len(exact[:k])``. Inputs are similarities (cosine; best first), not ids: where many
    near-equal neighbours compete for the last places (clones, one folder's memes), an index that
    returns equally near ones is not missing anything, which :func:`recall_at_k` would count as
    misses. 1.0 for no queries; a query whose exact list is empty counts 1.0."""
    if not exact:
        return 1.0
    shares = []
    for a, e in zip(approximate, exact, strict=True):
        e = e[:k]
        if not e:
            shares.append(1.0)
            continue
        threshold = min(e) - epsilon
        shares.append(min(sum(1 for s in a[:k] if s >= threshold), len(e)) / len(e))
    return sum(shares) / len(shares)
