"""Hybrid search: keyword leg + vector legs fused by reciprocal rank; exact phrases first."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import cast
from uuid import UUID

from sqlalchemy import String, Uuid, select
from sqlalchemy import text as sql_text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from mewdex import telemetry
from mewdex.config import get_settings
from mewdex.db import replica
from mewdex.db.engine import get_search_sessionmaker
from mewdex.db.models import Meme, MemeCollectionItem, ScopeContext
from mewdex.db.pools import SEARCH_LEGS
from mewdex.dto.errors import DomainError
from mewdex.dto.search import (
    MAX_QUERY_CHARS as MAX_QUERY_CHARS,  # re-exported: the pages and the CLI check it
)
from mewdex.dto.search import SearchFilters, SearchHit, SearchResults
from mewdex.inference.errors import BackendUnavailable
from mewdex.library.listing import filtered_memes, live, live_ids, meme_ref
from mewdex.library.live import ANY_IDS, LIVE_SQL, id_list
from mewdex.search import feedback, generations, keyword, steps, tags, text, variants, vector
from mewdex.search.confidence import HIGH_MIN_SCORE, confidence
from mewdex.search.fusion import rrf
from mewdex.search.query_vectors import QUERY_CACHE_SIZE as QUERY_CACHE_SIZE
from mewdex.search.query_vectors import _query_cache as _query_cache  # the benches clear it
from mewdex.search.query_vectors import embedder_of as _embedder_of
from mewdex.search.query_vectors import forget_query_vectors as forget_query_vectors  # the benches call it
from mewdex.search.query_vectors import query_embedding as query_embedding

LEGS = ("keyword", "e5", "use")
CANDIDATES = 100
# Measured on the dev queries (bench/lab_text_recipe.py): a small k and USE weighted up fuse best.
RRF_K = 5.0
LEG_WEIGHTS = {"keyword": 0.5, "e5": 1.0, "use": 2.0}
# "More like the exact match" (issue 33): when the query is a caption a meme shows (an exact-phrase hit),
# that meme's meaning is a better query for the memes that say the same in other words than the typed
# characters (pseudo-relevance feedback on the one hit that is sure). Without it, a caption that only
# shares characters with the query ("原神-我派蒙大字不识一个" for "一个字我都不信") outranks one that says the
# same thing in other words ("我根本不信这个东西"): USE matches characters. USE's ranking of the memes nearest
# to the exact match's own caption vector joins the fusion with USE's weight, as ``use~like``; the exact
# matches keep their own scores (their order among themselves stays the typed query's). Only USE: its
# caption-to-caption neighbours are the same meaning (e5's crowd: its nearest captions to 一个字我都不信 were
# unrelated, and adding them moved nothing), and each leg costs one more vector statement after the legs.
# Measured with bench/quality.py: no development query is an exact caption, so their figures are
# unchanged, and so is known-item search (0.988); the caption query's same-meaning meme moves 7th → 2nd.
LIKE_FIELDS = {"use": ("name_ocr", "name")}
#: Memes read from each caption-meaning ranking (its weight past the first few is small: RRF_K = 5).
LIKE_CANDIDATES = 30
LIKE_SUFFIX = "~like"
assert len(LEGS) == SEARCH_LEGS  # the legs' connection pool is sized for them


class Overloaded(DomainError):
    """``overloaded`` (503, ``Retry-After``): every search slot stayed busy for ``search_wait_seconds``."""

    code = "overloaded"


@dataclass
class SearchResponse:
    results: list[SearchHit]
    took_ms: float
    legs: dict[str, int] = field(default_factory=dict)
    degraded: list[str] = field(default_factory=list)
    feedback_ms: float | None = None  # the feedback leg's own time (bench/feedback.py)

    def to_dto(self) -> SearchResults:
        return SearchResults(results=self.results, took_ms=round(self.took_ms, 1))

    def as_dict(self) -> dict:
        """``{"results": [SearchHit], "took_ms"}`` (the JSON of ``POST /api/v1/search``)."""
        return self.to_dto().model_dump()


def search(
    session: Session,
    scope: ScopeContext,
    query: str,
    n_results: int = 10,
    legs: tuple[str, ...] = LEGS,
    *,
    filters: SearchFilters | None = None,
    offset: int = 0,
    fold_variants: bool = False,
    learn: bool = True,
    penalise_rejected: bool = False,
    metered: bool = True,
    shared: bool = False,
) -> SearchResponse:
    """Search the scope for ``query`` (1–500 chars); ``legs`` picks the legs (default all, fused).
    ``tag:NAME`` / ``-tag:NAME`` words in it (:func:`mewdex.search.tags.parse_query`; every surface
    searches through here) keep only memes with / without that tag, in every leg's SQL, the other words
    ranking within them; a query of only such words lists the memes they keep, newest first.
    ``fold_variants`` keeps only the best-ranked meme of each template group ("show 1 per template",
    :mod:`mewdex.search.variants`).

    ``learn``: fuse the feedback leg (:mod:`mewdex.search.feedback`: what the scope's user chose
    before for queries of this meaning; a lifted hit says ``why``). It is read on the caller's
    ``session`` while the other legs run, and is off for a scope with learning off. Rejections
    ("another") never remove a meme and change nothing here unless ``penalise_rejected`` (the
    assistant's chat, for the person who said it): then they push a meme down by at most
    ``feedback.REJECT_PENALTY``, fading in days, and never a strong lexical match.

    ``metered``: False runs none of the optional steps (:mod:`mewdex.search.steps`: query rewriting,
    rerank, extra legs), which call the scope owner's providers and spend its budget — the search of
    a guest in a chat (someone other than the binding's owner), who never spends it.

    ``filters`` narrow every leg inside its SQL (so a kept meme ranks as it would among all, and
    a filter never empties a page that has matches further down); ``offset`` skips that many of
    the fused ranking (``offset + n_results`` ≤ :data:`CANDIDATES`).

    The legs run concurrently, each on a connection of the search-leg pool (never the pool the
    caller's ``session`` came from: waiting for a second connection of that pool while holding one
    deadlocks under load). At most ``search_concurrency`` searches run at once per process; one that
    waited ``search_wait_seconds`` for a slot raises :class:`Overloaded`. A vector leg whose embedding
    backend is unavailable is skipped (listed in ``degraded``); keyword search keeps working.

    ``shared``: a search identical to one running now in this process (same scope and arguments)
    waits for that one's answer instead of running again (each caller gets a copy; an error reaches
    them all) — for callers whose ``session`` holds no writes of their own (the search routes).
    """
    if not shared:
        return _gated(session, scope, query, n_results, legs, filters, offset, fold_variants, learn,
                      penalise_rejected, metered)  # fmt: skip
    key = (scope.scope_id, query, n_results, legs, filters.model_dump_json() if filters else None, offset,
           fold_variants, learn, penalise_rejected, metered)  # fmt: skip
    with _running_lock:
        running = _running.get(key)
        if running is None:
            mine: Future[SearchResponse] = Future()
            _running[key] = mine
    if running is not None:
        telemetry.SEARCHES_SHARED.inc()
        return _copy(running.result())
    try:
        found = _gated(session, scope, query, n_results, legs, filters, offset, fold_variants, learn,
                       penalise_rejected, metered)  # fmt: skip
    except BaseException as exc:
        mine.set_exception(exc)
        raise
    else:
        mine.set_result(found)
        return _copy(found)
    finally:
        with _running_lock:
            _running.pop(key, None)


#: Searches of ``search(shared=True)`` running now in this process, by their arguments.
_running: dict[tuple, Future[SearchResponse]] = {}
_running_lock = threading.Lock()


def _copy(response: SearchResponse) -> SearchResponse:
    """A caller's own copy of a shared answer (callers change their hits, e.g. a member's media URLs)."""
    return replace(response, results=[hit.model_copy() for hit in response.results], legs=dict(response.legs),
                   degraded=list(response.degraded))  # fmt: skip


def _gated(
    session: Session,
    scope: ScopeContext,
    query: str,
    n_results: int,
    legs: tuple[str, ...],
    filters: SearchFilters | None,
    offset: int,
    fold_variants: bool,
    learn: bool,
    penalise_rejected: bool,
    metered: bool,
) -> SearchResponse:
    """:func:`search` in one of the process's search slots (:class:`Overloaded` after waiting
    ``search_wait_seconds`` for one)."""
    gate, executor = _slots()
    if not gate.acquire(timeout=get_settings().search_wait_seconds):
        raise Overloaded(message="too many searches at once; try again in a moment", headers={"Retry-After": "1"})
    try:
        return _search(
            session, scope, query, n_results, legs, executor, filters, offset, fold_variants, learn, penalise_rejected,
            metered,
        )  # fmt: skip
    finally:
        gate.release()


def search_collection(
    session: Session,
    owner: ScopeContext,
    collection_id: UUID,
    query: str,
    n_results: int = 10,
    *,
    filters: SearchFilters | None = None,
    offset: int = 0,
    fold_variants: bool = False,
    member: bool = False,
) -> SearchResponse:
    """:func:`search` inside one collection of ``owner``'s scope (who may search it is the caller's
    check: :func:`mewdex.library.sharing.access`): ``filters`` with the collection as its only
    ``collection_ids``, every hit checked to be one of the collection's live memes. ``member``: a
    caller other than the owner (a member of the collection, a public link): nothing is learned into
    or read from the owner's feedback and no metered step spends the owner's providers."""
    kept = (filters or SearchFilters()).model_copy(update={"collection_ids": [str(collection_id)]})
    found = search(
        session,
        owner,
        query,
        n_results,
        filters=kept,
        offset=offset,
        fold_variants=fold_variants,
        learn=not member,
        metered=not member,
    )
    inside = {
        str(m)
        for m in session.execute(
            select(MemeCollectionItem.meme_id)
            .join(Meme, (Meme.scope_id == MemeCollectionItem.scope_id) & (Meme.id == MemeCollectionItem.meme_id))
            .where(
                MemeCollectionItem.scope_id == owner.scope_id,
                MemeCollectionItem.collection_id == collection_id,
                live(),
            )
        ).scalars()
    }
    found.results = [hit for hit in found.results if hit.id in inside]
    return found


def _search(
    session: Session,
    scope: ScopeContext,
    query: str,
    n_results: int,
    legs: tuple[str, ...],
    executor: ThreadPoolExecutor,
    filters: SearchFilters | None,
    offset: int,
    fold_variants: bool = False,
    learn: bool = True,
    penalise_rejected: bool = False,
    metered: bool = True,
) -> SearchResponse:
    started = time.perf_counter()
    query = "".join(ch for ch in query if ch >= " " or ch in "\t\n")  # control characters (NUL) mean nothing here
    query, filters = _read_tags(query, filters)  # tag:NAME / -tag:NAME become filters of every leg
    filters = None if filters is None or filters.empty else filters
    if not query.strip() and filters is not None and (filters.tags or filters.not_tags):
        return _tag_listing(session, scope, filters, n_results, offset, fold_variants, started)
    cleaned = text.clean_query(query)  # the legs search what a meme shows or says, not "meme"/"表情包"
    base_legs = tuple(leg for leg in legs if leg in LEGS)  # an extra leg asked for by name runs below
    embed_queries(session, scope.scope_id, cleaned, base_legs)
    futures = {leg: executor.submit(_run_leg, leg, scope.scope_id, cleaned, filters) for leg in base_legs}
    # Optional steps (issue 15): rewritten queries through the same legs, extra legs (remote embeddings).
    if metered:
        futures |= steps.submit_extra(executor, _run_leg, scope, query, legs, LEGS, filters, CANDIDATES)
    fb = _feedback_leg(session, scope.scope_id, query, cleaned, filters) if learn else None
    rankings: dict[str, list[UUID]] = {}
    degraded: list[str] = []
    phrase: set[UUID] = set()
    for leg, future in futures.items():
        try:
            ranked, leg_phrase = future.result()
        except BackendUnavailable:
            degraded.append(leg)
            continue
        rankings[leg] = ranked
        phrase |= leg_phrase
    # Trashed memes keep their index rows (a restore is instant); the one live rule drops them here,
    # before anything is fused (the legs read without filters stay one index scan each).
    alive = live_ids(session, scope.scope_id, [m for r in rankings.values() for m in r] + list(fb.net if fb else ()))
    rankings = {leg: [m for m in ranked if m in alive] for leg, ranked in rankings.items()}
    phrase &= alive
    if fb is not None:
        fb.net = {m: v for m, v in fb.net.items() if m in alive}
    weights = steps.weights(LEG_WEIGHTS, rankings)
    base = rrf(rankings, k=RRF_K, weights=weights)
    anchor = max(phrase, key=lambda m: (base.get(m, 0.0), str(m)), default=None)  # the best exact match
    like = _like_exact_match(executor, scope.scope_id, anchor, rankings, filters) if anchor is not None else {}
    if like:  # the live rule again, for memes only the caption-meaning rankings found
        alive |= live_ids(session, scope.scope_id, [m for r in like.values() for m in r if m not in alive])
        like = {name: [m for m in ranked if m in alive] for name, ranked in like.items()}
    if like:  # they order what follows the exact matches, never the exact matches among themselves
        weights |= {name: LEG_WEIGHTS[name[: -len(LIKE_SUFFIX)]] for name in like}
        fused = rrf(rankings | like, k=RRF_K, weights=weights)
        base = {m: base.get(m, score) if m in phrase else score for m, score in fused.items()}
    keyword_hits = set(rankings.get("keyword", ()))
    scores = fuse_feedback(base, fb, phrase, keyword_hits, penalise_rejected=penalise_rejected)
    # Exact phrase matches and memes chosen for this very query (deliberately: not only kept from an
    # assistant's answer) rank first; among them, and among the rest, by fused score.
    first = phrase | ({m for m in fb.exact if fb.net.get(m, 0.0) >= feedback.CHOSEN} if fb is not None else set())
    ranked = sorted(scores, key=lambda m: (m not in first, -scores[m]))
    if metered:
        ranked = steps.rerank(executor, scope, query, ranked)  # optional LLM rerank
    if fold_variants:
        ranked = variants.fold(ranked, variants.template_groups(session, scope.scope_id))
    ordered = ranked[offset : offset + n_results]
    levels = {m: _level(m, base, fb, keyword_hits, phrase) for m in ordered}
    why = {m: fb.why[m] for m in ordered if fb is not None and fb.net.get(m, 0.0) > 0 and m in fb.why}
    results = hydrate(session, scope, ordered, scores, levels, why)
    telemetry.SEARCH_LATENCY.observe(time.perf_counter() - started)
    legs_used = {k: len(v) for k, v in rankings.items()}
    if fb is not None:
        legs_used["feedback"] = len(fb.net)
    return SearchResponse(
        results=results,
        took_ms=(time.perf_counter() - started) * 1000,
        legs=legs_used,
        degraded=degraded,
        feedback_ms=fb.took_ms if fb is not None else None,
    )


def _read_tags(query: str, filters: SearchFilters | None) -> tuple[str, SearchFilters | None]:
    """The query without its ``tag:`` words (:func:`mewdex.search.tags.parse_query`, the one parser of
    every surface) and the filters with them added (with ``filters.tags`` / ``not_tags`` folded as tags
    are stored)."""
    parsed = tags.parse_query(query)
    given = filters or SearchFilters()
    wanted = [*(tags.fold_tag(t) for t in given.tags or ()), *parsed.tags]
    unwanted = [*(tags.fold_tag(t) for t in given.not_tags or ()), *parsed.not_tags]
    if not wanted and not unwanted:
        return query, filters
    update = {"tags": list(dict.fromkeys(wanted)) or None, "not_tags": list(dict.fromkeys(unwanted)) or None}
    return (parsed.text if parsed.has_tags else query), given.model_copy(update=update)


def _tag_listing(
    session: Session,
    scope: ScopeContext,
    filters: SearchFilters,
    n_results: int,
    offset: int,
    fold_variants: bool,
    started: float,
) -> SearchResponse:
    """A search that is only ``tag:`` words: the memes the filters keep, newest first (each a ``high``
    match: it carries the tag asked for)."""
    ids = list(
        session.execute(
            filtered_memes(scope.scope_id, filters)
            .with_only_columns(Meme.id)
            .order_by(Meme.created_at.desc(), Meme.id.desc())
            .limit(CANDIDATES)
        ).scalars()
    )
    if fold_variants:
        ids = variants.fold(ids, variants.template_groups(session, scope.scope_id))
    ordered = ids[offset : offset + n_results]
    results = hydrate(session, scope, ordered, dict.fromkeys(ordered, 1.0), dict.fromkeys(ordered, "high"))
    telemetry.SEARCH_LATENCY.observe(time.perf_counter() - started)
    return SearchResponse(results=results, took_ms=(time.perf_counter() - started) * 1000, legs={"tags": len(ids)})


def _like_exact_match(
    executor: ThreadPoolExecutor,
    scope_id: str,
    anchor: UUID,
    rankings: dict[str, list[UUID]],
    filters: SearchFilters | None,
) -> dict[str, list[UUID]]:
    """``{"<leg>~like": ranked memes}``: for each vector leg that answered, the memes nearest to the
    exact match ``anchor``'s own caption vector (:data:`LIKE_FIELDS`), filtered as the legs are. The
    legs run concurrently on the search-leg pool; one that fails is left out."""
    futures = {
        leg + LIKE_SUFFIX: executor.submit(_like_leg, leg, scope_id, anchor, filters)
        for leg in LIKE_FIELDS
        if leg in rankings
    }
    found: dict[str, list[UUID]] = {}
    for name, future in futures.items():
        try:
            ranked = future.result()
        except (BackendUnavailable, OperationalError):
            continue  # the typed query's rankings still stand
        if ranked:
            found[name] = ranked
    return found


def _like_leg(leg: str, scope_id: str, anchor: UUID, filters: SearchFilters | None) -> list[UUID]:
    """The memes nearest to ``anchor``'s caption vector in the leg's active generation, best first."""
    with get_search_sessionmaker(vector.SEARCH_CONNECTION_OPTIONS, primary=True)() as session:
        generation = generations.cached_generation(session, scope_id, leg)
        if generation is None:
            return []
        q = vector.meme_vector(session, scope_id, generation, anchor, LIKE_FIELDS[leg])
        if q is None:
            return []
        hits, _head = vector.search_generation(session, scope_id, leg, generation, q, LIKE_CANDIDATES, filters)
    return [h.meme_id for h in hits]


def _feedback_leg(
    session: Session, scope_id: str, query: str, cleaned: str, filters: SearchFilters | None
) -> feedback.LegResult:
    """The feedback leg on the caller's session (the other legs run on their own connections meanwhile):
    both text models' query vectors (past queries match by meaning with both) come from the query cache
    :func:`embed_queries` filled."""
    return feedback.leg(session, scope_id, query, feedback.query_vectors(session, scope_id, cleaned), filters)


def fuse_feedback(
    base: dict[UUID, float],
    fb: feedback.LegResult | None,
    phrase: set[UUID],
    keyword_hits: set[UUID],
    *,
    penalise_rejected: bool = False,
) -> dict[UUID, float]:
    """The fused scores with the feedback leg's lift added (memes it found that no other leg did join
    in). Nothing is ever left out.

    A strong lexical match — an exact phrase (those rank first anyway), or a keyword hit with a fused
    score of at least ``confidence.HIGH_MIN_SCORE`` — is never buried by lifts that came from other
    queries' feedback: one lifted meme at most may pass the best strong match, and only one chosen for
    this same request reworded (``feedback.REWORDED_SIMILARITY``); the others stop just below it, so it
    stays second at worst (feedback given for this very query may go above it: the person said so).

    Rejections count only with ``penalise_rejected`` (the assistant's chat): a meme's score goes down
    by :func:`feedback.penalty` (≤ ``feedback.REJECT_PENALTY``), a strong lexical match's never."""
    if fb is None or fb.empty:
        return base
    scores = dict(base)
    strong = {m for m in base if m in phrase or (m in keyword_hits and base[m] >= HIGH_MIN_SCORE)}
    ceiling = max((base[m] for m in strong), default=None)
    over: list[UUID] = []  # neighbour-lifted memes that would pass the best strong match
    for m, net in fb.net.items():
        scores[m] = base.get(m, 0.0) + feedback.lift(net)
        if net > 0 and ceiling is not None and m not in strong and m not in fb.exact and scores[m] >= ceiling:
            over.append(m)
    passing = sorted((m for m in over if fb.closest.get(m, 0.0) >= fb.reworded_at), key=lambda m: -scores[m])[:1]
    for m in over:
        if m not in passing:
            scores[m] = max(base.get(m, 0.0), ceiling - 1e-6)  # type: ignore[operator]
    if penalise_rejected:
        for m, weight in fb.rejected.items():
            if m in scores and m not in strong:
                scores[m] -= feedback.penalty(weight)
    return scores


def _level(m: UUID, base: dict[UUID, float], fb: feedback.LegResult | None, keyword_hits: set[UUID], phrase: set[UUID]):
    """The result's confidence: of its fused score without feedback; ``high`` when this very query's
    feedback chose it deliberately (net ≥ ``feedback.CHOSEN``: a mark, a send, a copy… — not only kept
    from an assistant's answer), at least ``medium`` when a query of the same meaning chose it."""
    level = confidence(base.get(m, 0.0), keyword_hit=m in keyword_hits, phrase=m in phrase, lexical=bool(keyword_hits))
    net = fb.net.get(m, 0.0) if fb is not None else 0.0
    if net >= feedback.CHOSEN and fb is not None and m in fb.exact:
        return "high"
    if net > 0 and level == "low":
        return "medium"
    return level


_slots_lock = threading.Lock()
_gate: tuple[threading.BoundedSemaphore, ThreadPoolExecutor] | None = None


def _slots() -> tuple[threading.BoundedSemaphore, ThreadPoolExecutor]:
    """The process's search slots (``search_concurrency``) and leg threads (one per leg of each slot,
    as many as the leg pool's connections), created on first use."""
    global _gate
    with _slots_lock:
        if _gate is None:
            n = get_settings().search_concurrency
            _gate = (
                threading.BoundedSemaphore(n),
                ThreadPoolExecutor(max_workers=SEARCH_LEGS * n, thread_name_prefix="search-leg"),
            )
        return _gate


def _run_leg(leg: str, scope_id: str, query: str, filters: SearchFilters | None = None) -> tuple[list[UUID], set[UUID]]:
    """One leg's ranked meme ids and, for the keyword leg, the exact-phrase matches.

    A leg is a function of (scope, query, filters) returning its ranked candidates; each runs on its
    own connection of the search-leg pool (autocommit, HNSW settings and custom plans set on the
    connection), in one statement when the scope's head is cached. With a replica
    (``MEWDEX_SEARCH_DATABASE_URL``) the leg reads there while :func:`mewdex.db.replica.state` allows,
    else (and when its replica connection fails) on the main database."""
    options = vector.SEARCH_CONNECTION_OPTIONS
    on_replica = replica.configured() and replica.state(options).use
    if on_replica:
        try:
            return _leg_on(get_search_sessionmaker(options), "replica", leg, scope_id, query, filters)
        except OperationalError as exc:  # the replica went away (or cancelled the read): ask the primary
            if getattr(exc.orig, "sqlstate", None) == QUERY_CANCELED:
                raise  # a statement timeout is not the replica's fault; the primary would time out too
            replica.mark_unreachable()
            telemetry.SEARCH_REPLICA_FALLBACKS.labels(reason="unreachable").inc()
    elif replica.configured():
        telemetry.SEARCH_REPLICA_FALLBACKS.labels(reason=replica.state(options).reason or "unreachable").inc()
    return _leg_on(get_search_sessionmaker(options, primary=True), "primary", leg, scope_id, query, filters)


QUERY_CANCELED = "57014"  # SQLSTATE of a statement timeout or cancel


def _leg_on(
    sessions: sessionmaker[Session], database: str, leg: str, scope_id: str, query: str, filters: SearchFilters | None
) -> tuple[list[UUID], set[UUID]]:
    started = time.perf_counter()
    with sessions() as session:
        if leg == "keyword":
            hits = keyword.search(session, scope_id, query, CANDIDATES, filters)
            result = [h.meme_id for h in hits], {h.meme_id for h in hits if h.phrase}
        else:
            result = _vector_leg(session, leg, scope_id, query, filters), set()
    telemetry.SEARCH_LEG_LATENCY.labels(leg=leg, database=database).observe(time.perf_counter() - started)
    return result


def embed_queries(session: Session, scope_id: str, query: str, legs: tuple[str, ...]) -> None:
    """Embed ``query`` for each vector leg of ``legs`` (its active generation's model) into the query
    cache, before the legs start: alone, e5's OpenMP team has the cores, while beside the legs'
    statements it stalls at its barriers whenever PostgreSQL takes one (bench/scale.py, 100k memes,
    2 cores: fused p50 / p95 38.5 / 54.3 ms with the embedding inside the leg on 1 thread, 36.8 /
    49.7 with it first on 2). A leg whose model cannot embed reports that itself."""
    for leg in legs:
        if leg == "keyword":
            continue
        generation = generations.cached_generation(session, scope_id, leg, remember_none=True)
        embedder = _embedder_of(generation) if generation is not None else None
        if embedder is None:
            continue
        try:
            query_embedding(embedder, query)
        except BackendUnavailable:
            continue


def _vector_leg(session: Session, leg: str, scope_id: str, query: str, filters: SearchFilters | None) -> list[UUID]:
    """The active generation's own model embeds the query (while a new model's generation is being
    built, the old one keeps serving); a head that moved since it was cached is read again once."""
    hits: list = []
    for attempt in range(2):  # the second time from the database (the cached head may be stale)
        if attempt:  # the search forgot a head that moved; an unusable model's head is forgotten here
            generations.forget_generation(scope_id, leg)
        generation = generations.cached_generation(session, scope_id, leg)
        if generation is None:
            return []
        embedder = _embedder_of(generation)
        if embedder is None:
            if not attempt:
                continue
            raise BackendUnavailable(
                f"the model of the active {leg} generation ({generation.model}) is not available", backend=leg
            )
        q = query_embedding(embedder, query)
        hits, head = vector.search_generation(session, scope_id, leg, generation, q, CANDIDATES, filters)
        if head == generation.id:
            break
    return [h.meme_id for h in hits]


def hydrate(
    session: Session,
    scope: ScopeContext,
    ids: list[UUID],
    scores: dict,
    confidences: dict | None = None,
    why: dict[UUID, str] | None = None,
) -> list[SearchHit]:
    """``ids`` (in order) as search hits of the scope: the meme reference, ``score``, an OCR
    ``snippet`` and, for text search, the ``confidence`` (:mod:`mewdex.search.confidence`) and ``why``
    (``why``: meme → the past query the feedback leg lifted it for)."""
    if not ids:
        return []
    rows = {row.id: row for row in session.execute(_HYDRATE, {"scope": scope.scope_id, "ids": id_list(ids)})}
    return [
        SearchHit(
            **meme_ref(cast(Meme, row)).model_dump(),
            score=round(scores[row.id], 6),
            snippet=(row.ocr_text or "")[:200],
            confidence=(confidences or {}).get(row.id),
            why=feedback.why_text((why or {})[row.id]) if row.id in (why or {}) else None,
            why_query=(why or {}).get(row.id),
        )
        for row in (rows.get(i) for i in ids)
        if row is not None
    ]


#: The memes :func:`hydrate` shows (a plain statement: an ORM ``select`` cost twice its CPU per search).
_HYDRATE = sql_text(
    "SELECT memes.id, memes.display_name, memes.sha256, memes.meme_context ->> 'ocr_text' AS ocr_text FROM memes"
    f" WHERE memes.scope_id = :scope AND {ANY_IDS} AND {LIVE_SQL}"
).columns(id=Uuid(), display_name=String(), sha256=String(), ocr_text=String())

_hydrate = hydrate
