"""The eval gate (issue 15, point 7): a new generation of a vector leg becomes active only if, on
the scope's query set, it loses no more than ``eval_gate_margin`` of Recall@10 or MRR@10 against
the active generation; otherwise the switch is refused (the generation stays ``ready``: complete,
kept up to date, not searched) unless forced (``mewdex search activate GENERATION --force``).

The query set: the scope's "meme I wanted" marks (:func:`mewdex.search.marks.query_set`) plus the
file ``MEWDEX_EVAL_QUERIES`` when set. Each generation is measured alone (its leg only, no fusion),
with queries embedded by its own model. Nothing to compare — no query whose memes are in the scope,
no active generation, or the active one's model cannot embed queries any more — passes, and the
result says why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.models import Meme, SearchGeneration
from mewdex.search import generations, marks, vector

log = logging.getLogger(__name__)
K = 10
Embed = Callable[[str], np.ndarray]


def query_set(session: Session, scope_id: str) -> list[dict[str, Any]]:
    """The scope's marks plus ``MEWDEX_EVAL_QUERIES`` (module doc); a file that cannot be read is
    logged and left out."""
    rows = marks.query_set(session, scope_id)
    path = get_settings().eval_queries
    if path:
        from mewdex.search.evaluation import load_queries

        try:
            rows += load_queries(Path(path))
        except (OSError, ValueError) as exc:
            log.warning("search: MEWDEX_EVAL_QUERIES is not usable: %s", exc)
    return rows


def _resolve(session: Session, scope_id: str, queries: list[dict[str, Any]]) -> list[tuple[str, set[str]]]:
    """``[(query, {wanted meme ids})]`` of the queries with at least one of their memes in the scope."""
    by_sha = {
        sha: str(i) for i, sha in session.execute(select(Meme.id, Meme.sha256).where(Meme.scope_id == scope_id)).all()
    }
    known = set(by_sha.values())
    out = []
    for row in queries:
        wanted = {str(i) for i in row.get("ids") or [] if str(i) in known}
        wanted |= {by_sha[s] for s in row.get("sha256") or [] if s in by_sha}
        if wanted and isinstance(row.get("query"), str) and row["query"].strip():
            out.append((row["query"][:500], wanted))
    return out


def gate_queries(session: Session, scope_id: str) -> list[str]:
    """The query texts the gate will embed for ``scope_id`` (embed them before the switch's
    transaction: an outside call never runs inside it)."""
    return sorted({query for query, _ in _resolve(session, scope_id, query_set(session, scope_id))})


def generation_quality(
    session: Session, generation: SearchGeneration, leg: str, resolved: list[tuple[str, set[str]]], embed: Embed
) -> dict[str, float]:
    """Recall@10 and MRR@10 of ``generation`` searched alone, queries embedded with ``embed``."""
    recall = mrr = 0.0
    for query, wanted in resolved:
        hits = vector.search(
            session, generation.scope_id, leg, np.asarray(embed(query), dtype=np.float32), K, generation=generation
        )
        found = [rank for rank, hit in enumerate(hits[:K], 1) if str(hit.meme_id) in wanted]
        recall += len(found) / min(len(wanted), K)
        mrr += 1.0 / found[0] if found else 0.0
    n = len(resolved)
    return {"recall_at_10": round(recall / n, 4), "mrr_at_10": round(mrr / n, 4)}


def check(
    session: Session,
    candidate: SearchGeneration,
    leg: str,
    *,
    current: SearchGeneration | None,
    embed_candidate: Embed,
    embed_current: Embed | None,
    force: bool = False,
) -> dict[str, Any]:
    """Whether ``candidate`` may replace ``current`` as ``leg``'s active generation:
    ``{"passed", "forced", "reason", "queries", "margin", "current", "candidate"}`` (the qualities
    are ``{"recall_at_10", "mrr_at_10"}`` or None when not measured). ``reason``: ``better`` |
    ``within_margin`` | ``worse`` | ``no_queries`` | ``no_active`` | ``active_model_unavailable``."""
    margin = get_settings().eval_gate_margin
    result: dict[str, Any] = {
        "passed": True,
        "forced": False,
        "reason": "",
        "queries": 0,
        "margin": margin,
        "current": None,
        "candidate": None,
    }
    resolved = _resolve(session, candidate.scope_id, query_set(session, candidate.scope_id))
    result["queries"] = len(resolved)
    if current is None or current.id == candidate.id:
        result["reason"] = "no_active"
        return result
    if not resolved:
        result["reason"] = "no_queries"
        return result
    if embed_current is None:
        result["reason"] = "active_model_unavailable"
        result["candidate"] = generation_quality(session, candidate, leg, resolved, embed_candidate)
        return result
    now = generation_quality(session, current, leg, resolved, embed_current)
    new = generation_quality(session, candidate, leg, resolved, embed_candidate)
    result["current"], result["candidate"] = now, new
    losses = [now[k] - new[k] for k in ("recall_at_10", "mrr_at_10")]
    if max(losses) > margin:
        result["passed"], result["reason"] = False, "worse"
    else:
        result["reason"] = "better" if min(losses) < 0 or max(losses) < 0 else "within_margin"
    if not result["passed"] and force:
        result["passed"], result["forced"] = True, True
    log.info(
        "search: eval gate for %s generation %s of scope %s: %s (%s → %s on %d queries)",
        leg,
        candidate.id,
        candidate.scope_id,
        "passed" if result["passed"] else "refused",
        now,
        new,
        len(resolved),
    )
    return result


generations.set_gate(check)
