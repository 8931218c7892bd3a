"""Learning from feedback (issue 33): what a person marked, copied, downloaded, shared, sent, kept
or rejected after a search, kept per scope, and the feedback leg that lifts those memes for later
queries of the same meaning.

Events (``search_feedback_events``) are written by the paths that see a choice — a ✓ mark
(:mod:`mewdex.search.marks`), a download from a result (``/media/{id}?q=…``), the assistant's result
lists (kept when the conversation moves on, rejected with "换一个"/"another"), and the buttons that
call ``POST /api/v1/feedback`` — through :func:`record`, the one writing function. Each distinct query
of a scope is embedded once per active text model (``search_feedback_queries``; the vectors come from
the search's query cache, :mod:`mewdex.search.query_vectors`).

The leg (:func:`leg`): the scope's past queries nearest to this one — the same query first (its folded
key), then the past queries of the same meaning (issue 45): up to :data:`NEIGHBOURS` nearest by each
text model's per-model HNSW index (USE and e5, both multilingual), kept when their cosines combined
(:data:`BOTH`) reach a threshold calibrated on hand-made rewordings, translations and related queries
(bench/transfer_pairs.jsonl), so a ✓ for "打工人下班累瘫了" helps "exhausted office worker after work" and
not "打工人上班摸鱼" — and their events give each meme ``Σ similarity × kind weight × recency`` (:data:`KIND_WEIGHTS`,
half-life :data:`HALF_LIFE_DAYS`). The search service fuses it (:func:`mewdex.search.service.search`):
a lift of at most :data:`LIFT` fused-score units, saturating with the count; a strong lexical or
exact-phrase match is never buried by lifts from other queries' feedback (it stays second at worst).

A rejection ("换一个"/"another" in the assistant's chat) means "not this one now" (issue 45): the
conversation moves on from it by itself (:mod:`mewdex.assistant.retrieval`); here it is kept apart
(``LegResult.rejected``, half-life :data:`REJECT_HALF_LIFE_DAYS`) and only the assistant's own later
searches read it, as a push down of at most :data:`REJECT_PENALTY` that never touches a strong
lexical match. It never removes a meme, and the search page, the API and MCP never read it.

A scope with learning off (:func:`set_learning`) writes no events and reads none.
"""

from __future__ import annotations

import math
import threading
import time
import unicodedata
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast
from uuid import UUID

import numpy as np
from sqlalchemy import CursorResult, and_, delete, func, or_, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.db.models import Meme, ScopeContext, utcnow
from mewdex.db.models.search_feedback import (
    FEEDBACK_KINDS,
    FEEDBACK_SOURCES,
    SearchFeedbackEvent,
    SearchFeedbackQuery,
    SearchFeedbackSetting,
)
from mewdex.dto.cursor import decode_cursor, encode_cursor
from mewdex.dto.errors import DomainError
from mewdex.dto.search import SearchFilters
from mewdex.inference.errors import BackendUnavailable
from mewdex.library import listing
from mewdex.library.listing import exists_sql
from mewdex.search import generations, vector_index
from mewdex.search import text as search_text
from mewdex.search.query_vectors import embedder_of, query_embedding
from mewdex.search.vector import exact_or_hnsw, hnsw_settings

KINDS = FEEDBACK_KINDS
SOURCES = FEEDBACK_SOURCES
MAX_QUERY = 500
TABLE = "search_feedback_queries"

#: How much one event of a kind says for the meme (a rejection is counted apart: ``LegResult.rejected``).
KIND_WEIGHTS: dict[str, float] = {
    "mark": 1.0,
    "send": 1.0,
    "share": 0.8,
    "copy": 0.6,
    "download": 0.5,
    "kept": 0.3,
}
#: An event's weight halves every this many days.
HALF_LIFE_DAYS = 120.0
#: A rejection's weight halves every this many days: "not this one now" fades fast.
REJECT_HALF_LIFE_DAYS = 7.0
#: The most rejections take off a meme's fused score in the assistant's searches (RRF with k = 5: a
#: meme ranked 1st by every leg has 0.58, 3rd 0.44, 10th 0.23), saturating with the count: about two
#: places near the top, never a removal; a strong lexical match is never pushed (``fuse_feedback``).
REJECT_PENALTY = 0.1
#: A scope with at most this many past queries (of the model) is scanned exactly; more go through the
#: HNSW index. Lower than the memes' :data:`~mewdex.search.vector.EXACT_SCAN_ROWS`: the leg has a cost
#: budget of its own (bench/feedback.py, 10,000 events over 3,000 queries: the leg alone 13.0 → 3.1 ms
#: p50, added to the fused search p95 +11.2 → +2.1 ms).
EXACT_QUERY_ROWS = 1000
#: Past queries read per search (nearest by the preferred model), besides the same query.
NEIGHBOURS = 16
#: Events read per past query (newest first).
EVENTS_PER_QUERY = 50
#: The text legs whose model embeds past queries, in order of preference. With both, a past query is
#: matched by :data:`BOTH`: their cosines combined; with one, by that model's cosine alone (a fallback).
MODEL_LEGS = ("use", "e5")
#: Both encoders together: a past query's similarity is ``Σ MODEL_WEIGHTS[leg] × cosine`` (1 for the same
#: text), plus :data:`CROSS_LANGUAGE_CREDIT` when one of the two is written in Han
#: characters and the other is not (:func:`mewdex.search.text.has_han`).
BOTH = "both"
#: Measured on bench/transfer_pairs.jsonl (each development query reworded and translated by hand, with
#: three related-but-different queries): e5 separates a same-language rewording from a related query
#: better than USE (whose cosines spread wide: rewordings 0.33–0.87, related queries up to 0.77), USE
#: separates a translation from a query of other words better; the mix beats either alone on both
#: (threshold set on the first half, share of the second half's partners matched: same language, with a
#: tenth of related queries let through, USE 0.65, e5 0.60, the mix 0.75; other language, with none
#: let through, 0.50, 0.35, 0.85).
MODEL_WEIGHTS = {"use": 0.25, "e5": 0.75}
#: Both encoders put a translation lower than a same-language rewording of the same meaning (combined,
#: all 40 pairs: translations 0.72–0.87, related queries in the other language 0.60–0.76; same language:
#: rewordings 0.73–0.94, related queries 0.60–0.91): the gap of the two thresholds calibrated on the
#: pairs' first half (bench/feedback.py, ``calibrate``), so one threshold serves both.
CROSS_LANGUAGE_CREDIT = 0.062
#: The similarity below which a past query is not "the same meaning": for :data:`BOTH`, calibrated on
#: the first half of bench/transfer_pairs.jsonl (same language: above all but a tenth of the related
#: queries — some differ from the query in one word, "开心地接受邀请" / "婉拒别人的邀请"; other language:
#: above every related query). Held-out half: 16/20 rewordings, 18/20 translations and 6/60 related
#: queries match (USE ≥ 0.54 alone: 17, 17, 6); over all 40 pairs 30, 38 and 10/120 (USE alone: 34, 36,
#: 15/120). One model alone: USE puts unrelated pairs at ≤ 0.539; e5's cosines crowd together.
MIN_SIMILARITY = {BOTH: 0.818, "use": 0.54, "e5": 0.93}
#: The similarity at which a past query would count nothing: a neighbour counts (sim − floor) / (1 − floor).
SIMILARITY_FLOOR = {BOTH: 0.7, "use": 0.45, "e5": 0.9}
#: The similarity from which a past query is the same request reworded: only such a lift may pass a
#: strong lexical match (see ``fuse_feedback``).
REWORDED_SIMILARITY = {BOTH: 0.86, "use": 0.6, "e5": 0.96}
#: The most the leg adds to a meme's fused score (RRF with k = 5: a meme first in every leg has 0.58).
LIFT = 1.5
#: Net feedback for this very query from which a result counts as chosen (``high`` confidence): a
#: download or more; a meme only kept from an assistant's answer is not.
CHOSEN = 0.5


class FeedbackError(DomainError):
    """``query_empty`` / ``query_too_long`` / ``feedback_kind_invalid`` / ``feedback_source_invalid``
    (422), ``not_found`` (404: no such meme in the scope)."""


@dataclass
class LegResult:
    """The leg's answer for one query: ``net`` feedback per meme (choices: ≥ 0, it lifts), ``rejected``
    (per meme, its rejections' weight: similarity × recency at :data:`REJECT_HALF_LIFE_DAYS`), ``exact``
    (memes with feedback for this very query), ``why`` (the query a lifted meme was chosen for, as
    typed) and ``took_ms``."""

    net: dict[UUID, float] = field(default_factory=dict)
    rejected: dict[UUID, float] = field(default_factory=dict)
    exact: set[UUID] = field(default_factory=set)
    why: dict[UUID, str] = field(default_factory=dict)
    took_ms: float = 0.0
    #: per meme, the similarity weight of the closest past query that chose it (1 for this very query)
    closest: dict[UUID, float] = field(default_factory=dict)
    #: the weight from which a past query is this same request reworded (:data:`REWORDED_SIMILARITY`)
    reworded_at: float = 1.0

    @property
    def empty(self) -> bool:
        return not self.net and not self.rejected


def fold_key(query: str) -> str:
    """A query as feedback and marks compare it: NFKC, case-folded, runs of spaces as one."""
    return " ".join(unicodedata.normalize("NFKC", query).casefold().split())


def normalise(query: str) -> tuple[str, str]:
    """``(text, key)``: the query as stored (spaces collapsed, medium words such as "表情包" / "meme"
    removed as search removes them) and its folded comparison key. Raises ``FeedbackError``
    ``query_empty`` / ``query_too_long``."""
    raw = " ".join(str(query or "").split())
    if not raw:
        raise FeedbackError("query_empty", "the query is empty")
    if len(raw) > MAX_QUERY:
        raise FeedbackError("query_too_long", f"the query is over {MAX_QUERY} characters")
    return raw, fold_key(search_text.clean_query(raw))


# ---------------------------------------------------------------------------------------- settings


def learning_enabled(session: Session, scope_id: str) -> bool:
    """Whether the scope learns from feedback (on unless turned off)."""
    value = session.execute(
        select(SearchFeedbackSetting.learning_enabled).where(SearchFeedbackSetting.scope_id == scope_id)
    ).scalar_one_or_none()
    return True if value is None else bool(value)


def set_learning(session: Session, scope: ScopeContext, enabled: bool) -> bool:
    """Turn learning on or off for the scope (an account's own scope); returns the new value. Off: no
    event is written and search reads none; the stored events stay until :func:`clear`."""
    stmt = insert(SearchFeedbackSetting).values(scope_id=scope.scope_id, learning_enabled=enabled, updated_at=utcnow())
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["scope_id"], set_={"learning_enabled": enabled, "updated_at": stmt.excluded.updated_at}
        )
    )
    return enabled


# ----------------------------------------------------------------------------------------- writing


def record(
    session: Session,
    scope: ScopeContext,
    query: str,
    meme_id: UUID | str,
    kind: str,
    source: str,
    *,
    embed: bool = True,
) -> SearchFeedbackEvent | None:
    """Record that, for ``query``, the scope's user gave ``meme_id`` feedback ``kind`` (one of
    :data:`KINDS`) from ``source`` (one of :data:`SOURCES`). In the caller's transaction; None when
    the scope has learning off (nothing written).

    ``embed``: store the query's embedding for each active text model if it has none yet (from the
    query cache when a search just embedded it; otherwise the model runs here, ~10–50 ms on CPU). A
    model that cannot embed is skipped: the event still counts for the same query.

    Raises ``FeedbackError``: ``query_empty`` / ``query_too_long`` / ``feedback_kind_invalid`` /
    ``feedback_source_invalid`` (422), ``not_found`` (404: no such meme in the scope)."""
    if kind not in KINDS:
        raise FeedbackError("feedback_kind_invalid", f"kind must be one of {', '.join(KINDS)}")
    if source not in SOURCES:
        raise FeedbackError("feedback_source_invalid", f"source must be one of {', '.join(SOURCES)}")
    raw, key = normalise(query)
    found = listing.find(session, scope, meme_id)
    if found is None:
        raise FeedbackError("not_found", "meme not found")
    if not learning_enabled(session, scope.scope_id):
        return None
    event = SearchFeedbackEvent(
        event_id=uuid.uuid4(),
        scope_id=scope.scope_id,
        meme_id=found.id,
        query=raw,
        query_key=key,
        kind=kind,
        source=source,
        created_at=utcnow(),
    )
    session.add(event)
    session.flush()
    if embed:
        embed_query(session, scope.scope_id, raw, key)
    return event


def record_many(
    session: Session, scope: ScopeContext, query: str, meme_ids: list[UUID | str], kind: str, source: str
) -> int:
    """:func:`record` for several memes of one query (memes no longer in the scope are skipped);
    returns how many were written (0 with learning off or an empty query)."""
    written = 0
    for meme_id in meme_ids:
        try:
            if record(session, scope, query, meme_id, kind, source) is not None:
                written += 1
        except FeedbackError as exc:
            if exc.code in ("query_empty", "query_too_long"):
                return written
            continue  # a meme deleted since it was shown
    return written


def query_vectors(session: Session, scope_id: str, query: str) -> list[tuple[str, str, np.ndarray]]:
    """``[(leg, model, vector)]`` of ``query`` (cleaned as search cleans it) for each leg of
    :data:`MODEL_LEGS` whose active generation's model can embed it, in order of preference."""
    cleaned = search_text.clean_query(query)
    found = []
    for leg in MODEL_LEGS:
        generation = generations.cached_generation(session, scope_id, leg, remember_none=True)
        embedder = embedder_of(generation) if generation is not None else None
        if embedder is None:
            continue
        try:
            found.append((leg, generation.model, query_embedding(embedder, cleaned)))  # type: ignore[union-attr]
        except BackendUnavailable:
            continue
    return found


_indexed: set[tuple[str, int]] = set()
_indexed_lock = threading.Lock()


def embed_query(session: Session, scope_id: str, query: str, key: str) -> int:
    """Store ``query``'s embedding under ``key`` for each active text model that has none yet (and
    make sure the model's HNSW index exists); returns the rows written."""
    have = set(
        session.execute(
            select(SearchFeedbackQuery.model).where(
                SearchFeedbackQuery.scope_id == scope_id, SearchFeedbackQuery.query_key == key
            )
        ).scalars()
    )
    written = 0
    for _leg, model, vector in query_vectors(session, scope_id, query):
        if model in have:
            continue
        dims = int(vector.shape[0])
        with _indexed_lock:
            fresh = (model, dims) not in _indexed
        if fresh:
            vector_index.ensure_index(session, TABLE, model, dims)
            with _indexed_lock:
                _indexed.add((model, dims))
        session.execute(
            insert(SearchFeedbackQuery)
            .values(
                scope_id=scope_id,
                model=model,
                query_key=key,
                dimensions=dims,
                embedding=np.asarray(vector, dtype=np.float32),
                created_at=utcnow(),
            )
            .on_conflict_do_nothing()
        )
        written += 1
    return written


# ---------------------------------------------------------------------------- see, export, clear


def event_dict(e: SearchFeedbackEvent, display_name: str | None = None) -> dict[str, Any]:
    """One event as the API and the CLI show it; with ``display_name`` (the meme's name, from
    :func:`list_entries`) also the meme's ``display_name`` and ``thumbnail_url``."""
    shown = {
        "id": str(e.event_id),
        "query": e.query,
        "meme_id": str(e.meme_id),
        "kind": e.kind,
        "source": e.source,
        "created_at": e.created_at.isoformat(),
    }
    if display_name is not None:
        shown |= {"display_name": display_name, "thumbnail_url": f"/media/{e.meme_id}/thumbnail"}
    return shown


def list_entries(
    session: Session, scope: ScopeContext, *, limit: int = 100, cursor: str | None = None
) -> tuple[list[tuple[SearchFeedbackEvent, str]], str | None]:
    """The scope's events, newest first, each with its meme's display name, and the cursor of the
    next page (None on the last; ``cursor`` is a page's): the account page's list of what was
    learned, ``GET /api/v1/feedback`` and ``mewdex feedback list``. Only the scope's own events
    (what :func:`delete_event` may forget). Raises :class:`~mewdex.dto.cursor.CursorInvalid`."""
    stmt = (
        select(SearchFeedbackEvent, Meme.display_name)
        .join(Meme, (Meme.scope_id == SearchFeedbackEvent.scope_id) & (Meme.id == SearchFeedbackEvent.meme_id))
        .where(SearchFeedbackEvent.scope_id == scope.scope_id)
    )
    if cursor:
        created, event_id = decode_cursor(cursor, (datetime, UUID))
        stmt = stmt.where(
            or_(
                SearchFeedbackEvent.created_at < created,
                and_(SearchFeedbackEvent.created_at == created, SearchFeedbackEvent.event_id > event_id),
            )
        )
    stmt = stmt.order_by(SearchFeedbackEvent.created_at.desc(), SearchFeedbackEvent.event_id).limit(limit + 1)
    rows = [(e, name) for e, name in session.execute(stmt).all()]
    page = rows[:limit]
    more = len(rows) > limit
    return page, encode_cursor([page[-1][0].created_at, page[-1][0].event_id]) if more else None


def summary(session: Session, scope: ScopeContext) -> dict[str, Any]:
    """``{"learning_enabled", "events", "queries", "by_kind": {kind: n}}`` of the scope."""
    rows = session.execute(
        select(SearchFeedbackEvent.kind, func.count())
        .where(SearchFeedbackEvent.scope_id == scope.scope_id)
        .group_by(SearchFeedbackEvent.kind)
    ).all()
    queries = session.execute(
        select(func.count(func.distinct(SearchFeedbackEvent.query_key))).where(
            SearchFeedbackEvent.scope_id == scope.scope_id
        )
    ).scalar_one()
    by_kind = {k: 0 for k in KINDS} | {k: int(n) for k, n in rows}
    return {
        "learning_enabled": learning_enabled(session, scope.scope_id),
        "events": sum(by_kind.values()),
        "queries": int(queries),
        "by_kind": by_kind,
    }


def export(session: Session, scope: ScopeContext, batch: int = 1000) -> Iterator[dict[str, Any]]:
    """Every event of the scope, oldest first, as :func:`event_dict` (read in batches)."""
    after: tuple[datetime, UUID] | None = None
    while True:
        stmt = select(SearchFeedbackEvent).where(SearchFeedbackEvent.scope_id == scope.scope_id)
        if after is not None:
            stmt = stmt.where(
                (SearchFeedbackEvent.created_at > after[0])
                | ((SearchFeedbackEvent.created_at == after[0]) & (SearchFeedbackEvent.event_id > after[1]))
            )
        rows = list(
            session.execute(
                stmt.order_by(SearchFeedbackEvent.created_at, SearchFeedbackEvent.event_id).limit(batch)
            ).scalars()
        )
        yield from (event_dict(e) for e in rows)
        if len(rows) < batch:
            return
        after = (rows[-1].created_at, rows[-1].event_id)


#: The kinds that say a meme was used, counted by :func:`popular` ("sent or copied"): sent from a chat,
#: shared, copied, downloaded. A mark, a kept or a rejected result is a judgement, not a use.
POPULAR_KINDS = ("send", "share", "copy", "download")
#: The longest window :func:`popular` reads, in days.
POPULAR_MAX_DAYS = 90


def popular(session: Session, scope: ScopeContext, *, days: int = 7, limit: int = 12) -> list[tuple[UUID, int]]:
    """The scope's most used memes of the last ``days`` days (1–:data:`POPULAR_MAX_DAYS`): ``[(meme_id,
    uses)]``, most used first (ties: the most recently used first), at most ``limit``; uses are the
    scope's own events of :data:`POPULAR_KINDS` in the window. Live memes only
    (:func:`mewdex.library.live.live`: a trashed meme never appears). One statement; empty for a
    scope with learning off (it writes no events)."""
    days = max(1, min(int(days), POPULAR_MAX_DAYS))
    uses = func.count().label("uses")
    rows = session.execute(
        select(SearchFeedbackEvent.meme_id, uses)
        .join(Meme, (Meme.scope_id == SearchFeedbackEvent.scope_id) & (Meme.id == SearchFeedbackEvent.meme_id))
        .where(
            SearchFeedbackEvent.scope_id == scope.scope_id,
            SearchFeedbackEvent.kind.in_(POPULAR_KINDS),
            SearchFeedbackEvent.created_at >= utcnow() - timedelta(days=days),
            listing.live(),
        )
        .group_by(SearchFeedbackEvent.meme_id)
        .order_by(uses.desc(), func.max(SearchFeedbackEvent.created_at).desc(), SearchFeedbackEvent.meme_id)
        .limit(max(1, int(limit)))
    ).all()
    return [(meme_id, int(n)) for meme_id, n in rows]


def clear(session: Session, scope: ScopeContext) -> int:
    """Delete every event of the scope and its stored query embeddings; returns the events deleted.
    From the next search on, nothing of it counts."""
    result = cast(
        CursorResult[Any],
        session.execute(delete(SearchFeedbackEvent).where(SearchFeedbackEvent.scope_id == scope.scope_id)),
    )
    session.execute(delete(SearchFeedbackQuery).where(SearchFeedbackQuery.scope_id == scope.scope_id))
    return int(result.rowcount or 0)


def delete_event(session: Session, scope: ScopeContext, event_id: UUID) -> bool:
    """Delete one event of the scope (and its query's embeddings when it was the query's last);
    False when there is none with that id."""
    key = session.execute(
        delete(SearchFeedbackEvent)
        .where(SearchFeedbackEvent.scope_id == scope.scope_id, SearchFeedbackEvent.event_id == event_id)
        .returning(SearchFeedbackEvent.query_key)
    ).scalar_one_or_none()
    if key is None:
        return False
    _forget_unused_query(session, scope.scope_id, key)
    return True


def forget(session: Session, scope: ScopeContext, query: str, meme_id: UUID, kind: str) -> int:
    """Delete the scope's events of ``kind`` for (``query``, ``meme_id``): what removing a mark
    withdraws. Returns the events deleted."""
    try:
        _raw, key = normalise(query)
    except FeedbackError:
        return 0
    result = cast(
        CursorResult[Any],
        session.execute(
            delete(SearchFeedbackEvent).where(
                SearchFeedbackEvent.scope_id == scope.scope_id,
                SearchFeedbackEvent.query_key == key,
                SearchFeedbackEvent.meme_id == meme_id,
                SearchFeedbackEvent.kind == kind,
            )
        ),
    )
    _forget_unused_query(session, scope.scope_id, key)
    return int(result.rowcount or 0)


def _forget_unused_query(session: Session, scope_id: str, key: str) -> None:
    session.execute(
        text(
            "DELETE FROM search_feedback_queries q WHERE q.scope_id = :s AND q.query_key = :k"
            " AND NOT EXISTS (SELECT 1 FROM search_feedback_events e WHERE e.scope_id = :s AND e.query_key = :k)"
        ),
        {"s": scope_id, "k": key},
    )


# ------------------------------------------------------------------------------------------- leg

_LEG_HEAD = """
    WITH enabled AS (
        SELECT coalesce((SELECT learning_enabled FROM search_feedback_settings WHERE scope_id = :scope), true) AS on_
    ),
    near AS (
        SELECT CAST(:key AS text) AS query_key, 1.0::float8 AS sim{neighbours}
    ),
    best AS (SELECT query_key, max(sim) AS sim FROM near GROUP BY query_key)
    SELECT e.meme_id, e.kind, e.query, extract(epoch FROM now() - e.created_at) AS age, best.sim,
           best.query_key = :key AS exact
    FROM best CROSS JOIN enabled
    CROSS JOIN LATERAL (
        SELECT meme_id, kind, query, created_at FROM search_feedback_events e
        WHERE e.scope_id = :scope AND e.query_key = best.query_key{filters}
        ORDER BY created_at DESC LIMIT :per_query
    ) e
    WHERE enabled.on_ AND (best.sim >= :min_sim OR best.query_key = :key)
    """
_NEIGHBOURS = """
        UNION ALL
        SELECT query_key, 1 - {exact} FROM ({nearest}) n"""
#: Both encoders: the past queries nearest by either model, each with its combined similarity
#: (:data:`MODEL_WEIGHTS`, :data:`CROSS_LANGUAGE_CREDIT`); one a model has no vector for counts nothing.
_BOTH_NEIGHBOURS = """
        UNION ALL
        SELECT c.query_key, {combined}
               + CASE WHEN (c.query_key ~ :han) <> :query_han THEN :cross_credit ELSE 0 END
        FROM ({candidates}) c"""
_MODEL_COSINE = (
    ":weight_{m} * (SELECT 1 - {exact} FROM search_feedback_queries p WHERE p.scope_id = :scope"
    " AND p.model = :model_{m} AND p.dimensions = :dims_{m} AND p.query_key = c.query_key)"
)
#: The scope's past queries of the model, nearest first (an exact scan of a scope with few of them).
_PAST_QUERIES = (
    "SELECT query_key, embedding FROM search_feedback_queries"
    " WHERE scope_id = :scope AND model = :model{m} AND dimensions = :dims{m}"
)

Vector = tuple[str, str, np.ndarray]


def leg(
    session: Session,
    scope_id: str,
    query: str,
    vector: Vector | list[Vector] | None = None,
    filters: SearchFilters | None = None,
) -> LegResult:
    """The feedback leg for ``query`` (as searched) in the scope: one statement (plus the HNSW
    settings for the transaction when vectors look up neighbours). ``vector``: the query's
    ``(leg, model, embedding)`` for one model, or the list :func:`query_vectors` gives — with both
    :data:`MODEL_LEGS`, past queries match by :data:`BOTH` (their cosines combined, calibrated on
    bench/transfer_pairs.jsonl), with one by that model alone; with none only this very query counts.
    ``filters`` keep only the memes that pass them (as the other legs). Empty with learning off or no
    feedback."""
    started = time.perf_counter()
    key = fold_key(search_text.clean_query(" ".join(query.split())))
    params: dict[str, Any] = {"scope": scope_id, "key": key, "per_query": EVENTS_PER_QUERY}
    vectors = [vector] if isinstance(vector, tuple) else list(vector or [])
    by_leg = {v[0]: v for v in vectors if v[0] in MODEL_LEGS}
    neighbours = ""
    leg_name = "exact"
    if all(m in by_leg for m in MODEL_LEGS):
        leg_name = BOTH
        nearest, cosines = [], []
        for m in MODEL_LEGS:
            _leg, model, q = by_leg[m]
            dims = int(q.shape[0])
            nearest.append(
                exact_or_hnsw(
                    _PAST_QUERIES.format(m=f"_{m}"),
                    vector_index.exact_distance_sql(dims, f"query_{m}"),
                    vector_index.distance_sql(dims, f"query_{m}"),
                    f"search_feedback_queries WHERE scope_id = :scope AND model = :model_{m}",
                    limit="neighbours",
                )
            )
            cosines.append(_MODEL_COSINE.format(m=m, exact=vector_index.exact_distance_sql(dims, f"query_{m}")))
            params |= {
                f"model_{m}": model,
                f"dims_{m}": dims,
                f"query_{m}": np.asarray(q, dtype=np.float32),
                f"weight_{m}": MODEL_WEIGHTS[m],
            }
        candidates = " UNION ".join(f"SELECT query_key FROM ({n}) n{i}" for i, n in enumerate(nearest))
        neighbours = _BOTH_NEIGHBOURS.format(combined="\n             + ".join(cosines), candidates=candidates)
        params |= {
            "han": search_text.HAN_PATTERN,
            "query_han": search_text.has_han(key),
            "cross_credit": CROSS_LANGUAGE_CREDIT,
        }
    elif vectors:
        leg_name, model, q = vectors[0]
        dims = int(q.shape[0])
        exact = vector_index.exact_distance_sql(dims)
        nearest_one = exact_or_hnsw(
            _PAST_QUERIES.format(m=""),
            exact,
            vector_index.distance_sql(dims),
            "search_feedback_queries WHERE scope_id = :scope AND model = :model",
            limit="neighbours",
        )
        neighbours = _NEIGHBOURS.format(exact=exact, nearest=nearest_one)
        params |= {"model": model, "dims": dims, "query": np.asarray(q, dtype=np.float32)}
    if neighbours:
        params |= {"neighbours": NEIGHBOURS, "exact_rows": EXACT_QUERY_ROWS}
        hnsw_settings(session, max(40, NEIGHBOURS))
    params["min_sim"] = MIN_SIMILARITY.get(leg_name, 1.0)
    keeps, filter_params = exists_sql(filters, "e.meme_id")
    params |= filter_params
    rows = session.execute(text(_LEG_HEAD.format(neighbours=neighbours, filters=keeps)), params).all()
    floor = SIMILARITY_FLOOR.get(leg_name, 0.0)
    result = score(rows, params["min_sim"], floor)
    result.reworded_at = similarity_weight(REWORDED_SIMILARITY.get(leg_name, 1.0), 0.0, False, floor)
    result.took_ms = (time.perf_counter() - started) * 1000
    return result


def pair_similarity(cosines: dict[str, float], han_a: bool, han_b: bool) -> float:
    """The :data:`BOTH` similarity of two queries from their cosines per leg of :data:`MODEL_LEGS` and
    whether each is written with Han characters: what :func:`leg` computes in SQL (the benches
    calibrate and check it with this)."""
    return sum(MODEL_WEIGHTS[m] * cosines[m] for m in MODEL_LEGS) + (CROSS_LANGUAGE_CREDIT if han_a != han_b else 0.0)


def similarity_weight(sim: float, min_sim: float, exact: bool, floor: float = 0.0) -> float:
    """How much a past query counts for this one: 1 for the same query; 0 below ``min_sim``; else
    the cosine's place between ``floor`` and 1."""
    if exact:
        return 1.0
    if sim < min_sim:
        return 0.0
    return max(0.0, min(1.0, (sim - floor) / max(1e-6, 1.0 - floor)))


def score(rows, min_sim: float, floor: float = 0.0) -> LegResult:
    """Net feedback per meme from ``(meme_id, kind, query, age_seconds, sim, exact)`` rows; rejections
    go to ``rejected`` (their own, shorter half-life), never into ``net``."""
    result = LegResult()
    best_why: dict[UUID, float] = {}
    for meme_id, kind, query, age, sim, exact in rows:
        w = similarity_weight(float(sim), min_sim, bool(exact), floor)
        if w <= 0:
            continue
        days = max(0.0, float(age)) / 86400.0
        if exact:
            result.exact.add(meme_id)
        if kind == "rejected":
            result.rejected[meme_id] = result.rejected.get(meme_id, 0.0) + w * 0.5 ** (days / REJECT_HALF_LIFE_DAYS)
            continue
        contribution = w * KIND_WEIGHTS.get(kind, 0.0) * 0.5 ** (days / HALF_LIFE_DAYS)
        result.net[meme_id] = result.net.get(meme_id, 0.0) + contribution
        if contribution > 0:
            result.closest[meme_id] = max(result.closest.get(meme_id, 0.0), w)
        if contribution > best_why.get(meme_id, 0.0):
            best_why[meme_id] = contribution
            result.why[meme_id] = query
    return result


def lift(net: float) -> float:
    """The fused-score change for a meme's net feedback: ± :data:`LIFT` at most, saturating with the
    count (tanh)."""
    return LIFT * math.tanh(net)


def penalty(rejected: float) -> float:
    """The fused-score cut for a meme's rejection weight: :data:`REJECT_PENALTY` at most (tanh)."""
    return REJECT_PENALTY * math.tanh(max(0.0, rejected))


def why_text(query: str) -> str:
    """The result's explanation: ``you picked this for 'query'``."""
    return f"you picked this for '{query}'"
