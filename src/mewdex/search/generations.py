"""Search generations: the vector rows a scope's searches read.

Each vector leg of search (``e5``, ``use``; ``search_heads.model`` holds the leg name) has one
*active* generation per scope, built with one embedding model (``search_generations.model`` is
the model id with its version, ``active_generation_model`` the same id). Searches read only the
active generation, embedding the query with that generation's model.

When the configured model of a leg changes (another registered embedder, a new version, other
dimensions), a *building* generation is started for the new model and filled in the background
by a durable queue task (``search_reindex``) from the memes' current contexts; memes processed
meanwhile are written into it too. Once every meme with a context has its vectors there, one
transaction points the head at it (status ``active``) and retires the old generation (its
vector rows are deleted). Until then search keeps serving the old generation (its vector leg is
skipped only if the old model cannot be loaded any more; keyword search always works).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from sqlalchemy import delete, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from mewdex import hooks
from mewdex.config import get_settings
from mewdex.db.models import Meme, MemeEmbedding, ScopeContext, SearchGeneration, SearchHead, Task, utcnow
from mewdex.library import listing
from mewdex.queue import registry
from mewdex.queue.registry import TaskContext, TaskError
from mewdex.search.vector_index import ensure_index
from mewdex.search.vector_rows import write_vectors

log = logging.getLogger(__name__)
REINDEX_TASK_TYPE = "search_reindex"
REINDEX_LANE = "embedding"


def _lock(session: Session, scope_id: str, key: str) -> None:
    k = int.from_bytes(hashlib.sha256(f"{scope_id}\0{key}".encode()).digest()[:8], "big", signed=True)
    session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": k})


def current_generation(session: Session, scope_id: str, leg: str) -> SearchGeneration | None:
    """The generation the scope's head for ``leg`` points at (the one searches read), or None."""
    return session.execute(
        select(SearchGeneration)
        .join(
            SearchHead,
            (SearchHead.scope_id == SearchGeneration.scope_id)
            & (SearchHead.active_generation_id == SearchGeneration.id),
        )
        .where(SearchHead.scope_id == scope_id, SearchHead.model == leg)
    ).scalar_one_or_none()


@dataclass(frozen=True)
class GenerationRef:
    """What a vector leg needs of a generation: its id, model id and dimensions."""

    id: UUID
    model: str
    dimensions: int

    @classmethod
    def of(cls, generation: SearchGeneration) -> GenerationRef:
        return cls(generation.id, generation.model, generation.dimensions)


#: Seconds a cached head is trusted without being seen (every vector search also reads the head in
#: its statement and drops a stale entry at once, so this only bounds memory of idle scopes).
HEAD_CACHE_SECONDS = 300.0
#: Seconds "this scope has no generation for the leg" is trusted (``remember_none``): an optional leg
#: (remote embeddings) that most scopes never build costs no statement per search, and one that is
#: built is searched within this long.
NO_HEAD_CACHE_SECONDS = 10.0
_heads: dict[tuple[str, str], tuple[float, GenerationRef | None]] = {}
_heads_lock = threading.Lock()


def cached_generation(
    session: Session, scope_id: str, leg: str, *, remember_none: bool = False
) -> GenerationRef | None:
    """:func:`current_generation` of (scope, leg), remembered per process (no statement on a hit).
    Callers check the head their search statement returns and :func:`forget_generation` when it moved.
    ``remember_none``: remember "no generation" too, for :data:`NO_HEAD_CACHE_SECONDS` (otherwise
    it is not remembered: the scope's first meme creates it)."""
    key = (scope_id, leg)
    now = time.monotonic()
    with _heads_lock:
        hit = _heads.get(key)
    if hit is not None and now - hit[0] < (HEAD_CACHE_SECONDS if hit[1] is not None else NO_HEAD_CACHE_SECONDS):
        if hit[1] is not None or remember_none:
            return hit[1]
    generation = current_generation(session, scope_id, leg)
    if generation is None:
        if remember_none:
            with _heads_lock:
                _heads[key] = (now, None)
        return None
    ref = GenerationRef.of(generation)
    with _heads_lock:
        if len(_heads) > 10_000:
            _heads.clear()
        _heads[key] = (now, ref)
    return ref


def forget_generation(scope_id: str, leg: str) -> None:
    """Drop the cached head of (scope, leg)."""
    with _heads_lock:
        _heads.pop((scope_id, leg), None)


def building_generation(session: Session, scope_id: str, model: str) -> SearchGeneration | None:
    """The scope's generation being built for model id ``model`` — or built and refused by the eval
    gate (``ready``: kept up to date, waiting for a forced switch) — or None (at most one exists)."""
    return session.execute(
        select(SearchGeneration)
        .where(
            SearchGeneration.scope_id == scope_id,
            SearchGeneration.model == model,
            SearchGeneration.status.in_(("building", "ready")),
        )
        .order_by(SearchGeneration.created_at.desc())
        .limit(1)
    ).scalar_one_or_none()


# The eval gate's check (:func:`mewdex.search.eval_gate.check`) is the ``eval_gates`` hook of
# :mod:`mewdex.hooks`, provided when that module is imported (it reads the search legs, which read this
# module: the hook keeps the import graph acyclic); the first switch imports it.


def set_gate(check: Callable[..., dict[str, Any]] | None) -> None:
    """Provide the eval gate's check (None: none; tests)."""
    if check is None:
        hooks.withdraw("eval_gates")
    else:
        hooks.provide("eval_gates", "eval_gate", check, stacklevel=2)


def activate(
    session: Session,
    generation: SearchGeneration,
    leg: str,
    *,
    embed_candidate=None,
    embed_current=None,
    force: bool = False,
) -> dict[str, Any]:
    """Point the scope's head for ``leg`` at ``generation`` and retire the old generation (its rows
    deleted) — if the eval gate (:func:`mewdex.search.eval_gate.check`, queries embedded with
    ``embed_candidate`` / ``embed_current``) passes or ``force``. Refused: the generation is left
    ``ready`` and the head unchanged. Returns the gate's result (``reason`` ``not_measured`` when no
    ``embed_candidate`` is given or the gate is not loaded)."""
    _lock(session, generation.scope_id, f"head:{leg}")
    fresh = session.get_one(SearchGeneration, generation.id, with_for_update=True)
    old = current_generation(session, generation.scope_id, leg)
    gate = hooks.single("eval_gates")
    if embed_candidate is None or gate is None:
        verdict: dict[str, Any] = {"passed": True, "forced": False, "reason": "not_measured"}
    else:
        verdict = gate(
            session, fresh, leg, current=old, embed_candidate=embed_candidate, embed_current=embed_current, force=force
        )
    if not verdict["passed"]:
        fresh.status = "ready"
        log.warning(
            "search: the eval gate refused generation %s (%s) for leg %s of scope %s: %s → %s; "
            "`mewdex search activate %s --force` switches anyway",
            fresh.id,
            fresh.model,
            leg,
            fresh.scope_id,
            verdict.get("current"),
            verdict.get("candidate"),
            fresh.id,
        )
        return verdict
    fresh.status, fresh.activated_at = "active", utcnow()
    _point_head(session, generation.scope_id, leg, fresh)
    if old is not None and old.id != fresh.id:
        old.status = "retired"
        session.execute(
            delete(MemeEmbedding).where(MemeEmbedding.scope_id == old.scope_id, MemeEmbedding.generation_id == old.id)
        )
    log.info(
        "search: generation %s (%s) is now active for leg %s of scope %s",
        fresh.id,
        fresh.model,
        leg,
        fresh.scope_id,
    )
    return verdict


def active_generation(
    session: Session, scope_id: str, leg: str, dimensions: int, model: str | None = None
) -> SearchGeneration:
    """The scope's active generation for ``leg``, created empty (with its HNSW index) on first use
    for ``model`` (default: the leg name itself)."""
    generation = current_generation(session, scope_id, leg)
    if generation is not None:
        return generation
    _lock(session, scope_id, f"head:{leg}")
    generation = current_generation(session, scope_id, leg)
    if generation is not None:
        return generation
    model = model or leg
    ensure_index(session, "meme_embeddings", model, dimensions)
    new = SearchGeneration(
        scope_id=scope_id,
        model=model,
        dimensions=dimensions,
        status="active",
        source_snapshot_hash=_snapshot_hash(leg, model, dimensions, "incremental"),
        activated_at=utcnow(),
    )
    session.add(new)
    session.flush()
    _point_head(session, scope_id, leg, new)
    return new


def _point_head(session: Session, scope_id: str, leg: str, generation: SearchGeneration) -> None:
    stmt = insert(SearchHead).values(
        scope_id=scope_id, model=leg, active_generation_id=generation.id, active_generation_model=generation.model
    )
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["scope_id", "model"],
            set_={"active_generation_id": generation.id, "active_generation_model": generation.model},
        )
    )
    forget_generation(scope_id, leg)  # this process sees the new head at once (others on their next search)


def _snapshot_hash(leg: str, model: str, dimensions: int, reason: str) -> str:
    from mewdex.search.documents import CONTEXT_VERSION

    payload = {
        "leg": leg,
        "model": model,
        "dimensions": dimensions,
        "context": CONTEXT_VERSION,
        "reason": reason,
        "at": utcnow().isoformat(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def write_targets(
    session: Session, scope_id: str, embedded: dict[str, tuple[str, int]]
) -> dict[str, list[SearchGeneration]]:
    """The generations a meme's freshly embedded vectors belong in, per leg of ``embedded`` =
    ``{leg: (model, dimensions)}``: the leg's active generation when it uses that model, and the one
    being built for the model. When the active one uses another model and nothing is being built, a
    build is started (the model changed); a leg with no generation gets one. One statement reads
    every leg's active and building generations."""
    models = [model for model, _ in embedded.values()]
    rows = session.execute(
        select(SearchGeneration, SearchHead.model)
        .outerjoin(
            SearchHead,
            (SearchHead.scope_id == SearchGeneration.scope_id)
            & (SearchHead.active_generation_id == SearchGeneration.id)
            & SearchHead.model.in_(list(embedded)),
        )
        .where(
            SearchGeneration.scope_id == scope_id,
            SearchHead.model.is_not(None)
            | (SearchGeneration.model.in_(models) & SearchGeneration.status.in_(("building", "ready"))),
        )
        .order_by(SearchGeneration.created_at.desc())
    ).all()
    targets: dict[str, list[SearchGeneration]] = {}
    for leg, (model, dimensions) in embedded.items():
        active = next((g for g, head in rows if head == leg), None)
        if active is None:
            targets[leg] = [active_generation(session, scope_id, leg, dimensions, model)]
            continue
        # building_generation's rule: the newest of the model's building or ready generations
        building = next((g for g, _ in rows if g.model == model and g.status in ("building", "ready")), None)
        wanted = [active] if (active.model, active.dimensions) == (model, dimensions) else []
        if building is None and not wanted:
            building = start_build(session, scope_id, leg, model, dimensions, reason="model_changed")
        if building is not None and building.dimensions == dimensions:
            wanted.append(building)
        targets[leg] = wanted
    return targets


def start_build(
    session: Session, scope_id: str, leg: str, model: str, dimensions: int, *, reason: str
) -> SearchGeneration:
    """Start (or join) building a new generation of ``leg`` with ``model``: the generation row
    (status ``building``) and its ``search_reindex`` task, in the caller's transaction."""
    _lock(session, scope_id, f"build:{model}")
    generation = building_generation(session, scope_id, model)
    if generation is None:
        ensure_index(session, "meme_embeddings", model, dimensions)
        generation = SearchGeneration(
            scope_id=scope_id,
            model=model,
            dimensions=dimensions,
            status="building",
            source_snapshot_hash=_snapshot_hash(leg, model, dimensions, reason),
        )
        session.add(generation)
        session.flush()
    # Deduplicated on the generation: joins its queued/running task, or resumes a build whose
    # task died (the build skips memes that already have vectors).
    registry.submit(
        session,
        scope_id=scope_id,
        task_type=REINDEX_TASK_TYPE,
        dedupe_key=str(generation.id),
        payload={"generation_id": str(generation.id), "leg": leg, "reason": reason},
    )
    return generation


def configured_mismatches(session: Session, embedders: dict, scope_ids: list[str] | None = None) -> list[dict]:
    """Heads whose active generation's model or dimensions differ from the configured embedder of
    their leg: ``[{"scope_id", "leg", "active_model", "active_dimensions", "model", "dimensions",
    "old_model_available"}]``."""
    from mewdex.inference import models

    rows = session.execute(
        select(SearchHead.scope_id, SearchHead.model, SearchGeneration.model, SearchGeneration.dimensions)
        .join(
            SearchGeneration,
            (SearchGeneration.scope_id == SearchHead.scope_id)
            & (SearchGeneration.id == SearchHead.active_generation_id),
        )
        .where(
            SearchHead.model.in_(list(embedders)), *([] if scope_ids is None else [SearchHead.scope_id.in_(scope_ids)])
        )
    ).all()
    out = []
    for scope_id, leg, active_model, active_dims in rows:
        embedder = embedders[leg]
        if (active_model, active_dims) != (embedder.model, embedder.dimensions):
            old = models.embedder_for_model(active_model)
            out.append(
                {
                    "scope_id": scope_id,
                    "leg": leg,
                    "active_model": active_model,
                    "active_dimensions": active_dims,
                    "model": embedder.model,
                    "dimensions": embedder.dimensions,
                    "old_model_available": old is not None and old.dimensions == active_dims,
                }
            )
    return out


def check_text_models(sessions: sessionmaker[Session], scope_ids: list[str] | None = None) -> list[str]:
    """Start-up check: for every head (of ``scope_ids``, default all scopes) whose active generation
    does not match the configured model of its leg, log why and start building a new generation.
    Returns the messages logged."""
    from mewdex.inference import models

    try:
        embedders = models.text_embedders()
    except ValueError as exc:
        log.error("search: %s", exc)
        return [str(exc)]
    messages = []
    with sessions.begin() as session:
        for m in configured_mismatches(session, embedders, scope_ids):
            building = start_build(
                session, m["scope_id"], m["leg"], m["model"], m["dimensions"], reason="model_changed"
            )
            what = "dimension changed" if m["active_dimensions"] != m["dimensions"] else "model changed"
            serving = (
                "search keeps serving the old generation until the new one is complete"
                if m["old_model_available"]
                else f"the old model is not available, so the {m['leg']} vector leg is off until the switch; "
                "keyword search and the other legs keep working"
            )
            message = (
                f"search: embedding {what} for leg {m['leg']!r} of scope {m['scope_id']!r}: the active "
                f"generation has {m['active_model']} ({m['active_dimensions']}-d), the configured model is "
                f"{m['model']} ({m['dimensions']}-d); building generation {building.id} in the background "
                f"(task type {REINDEX_TASK_TYPE}); {serving}"
            )
            log.warning(message)
            messages.append(message)
    return messages


def start_reindex(
    session: Session, scope_id: str, *, model: str | None = None, reason: str = "requested"
) -> list[SearchGeneration]:
    """``mewdex reindex``: build a fresh generation of each leg (or only the legs whose leg name,
    registered name or model id is ``model``) with its configured model, from current contexts
    (``reason``: ``requested``, ``recipe_changed``; in the task's payload). ValueError when ``model``
    matches no configured leg."""
    from mewdex.inference import models

    configured = get_settings().text_models
    legs = [
        (leg, e)
        for leg, e in models.text_embedders().items()
        if model is None or model in (leg, configured[leg], e.model)
    ]
    if not legs:
        raise ValueError(f"no configured leg uses {model!r} (MEWDEX_TEXT_MODELS = {configured})")
    return [start_build(session, scope_id, leg, e.model, e.dimensions, reason=reason) for leg, e in legs]


def builds(session: Session) -> list[dict[str, Any]]:
    """Every generation being built or waiting for a forced switch (``ready``), all scopes, oldest
    first: ``[{"scope_id", "id", "model", "status", "reason", "memes_done", "memes_total", "progress",
    "task_status", "error"}]`` (the admin page's rebuild progress)."""
    rows = session.execute(
        select(SearchGeneration)
        .where(SearchGeneration.status.in_(("building", "ready")))
        .order_by(SearchGeneration.created_at)
    ).scalars()
    out = []
    for generation in rows:
        done, total = progress(session, generation)
        task = session.execute(
            select(Task)
            .where(
                Task.scope_id == generation.scope_id,
                Task.task_type == REINDEX_TASK_TYPE,
                Task.dedupe_key == str(generation.id),
            )
            .order_by(Task.created_at.desc())
            .limit(1)
        ).scalar_one_or_none()
        out.append(
            {
                "scope_id": generation.scope_id,
                "id": str(generation.id),
                "model": generation.model,
                "status": generation.status,
                "reason": (task.payload or {}).get("reason") if task is not None else None,
                "memes_done": done,
                "memes_total": total,
                "progress": round(done / total, 4) if total else 1.0,
                "task_status": task.status if task is not None else None,
                "error": task.error if task is not None else None,
            }
        )
    return out


# --------------------------------------------------------------------------- building a generation

#: Memes per batch of a build: read, embedded (their distinct texts in one call) and written together.
BUILD_BATCH = 32


class ReindexError(TaskError):
    """A reindex failure with a stable code (``model_unavailable``, ``backend_unavailable``)."""


def _eligible(scope_id: str):
    return (Meme.scope_id == scope_id, Meme.context_status == "ready")


def missing(
    session: Session,
    scope_id: str,
    generation_id: UUID | None,
    *,
    after: UUID | None = None,
    exclude: AbstractSet[UUID] = frozenset(),
    limit: int = BUILD_BATCH,
) -> list[Meme]:
    """The next ``limit`` memes with a context (by id, after ``after``, not in ``exclude``) whose
    vectors the generation lacks: no rows there, or rows of another metadata hash than the meme's
    (re-analysed since they were written). ``generation_id`` None (not created yet): every such meme."""
    query = select(Meme).where(*_eligible(scope_id))
    if generation_id is not None:
        current = (
            select(MemeEmbedding.meme_id)
            .where(
                MemeEmbedding.scope_id == scope_id,
                MemeEmbedding.generation_id == generation_id,
                MemeEmbedding.meme_id == Meme.id,
                Meme.search_metadata_hash.is_(None) | (MemeEmbedding.metadata_hash == Meme.search_metadata_hash),
            )
            .exists()
        )
        query = query.where(~current)
    if after is not None:
        query = query.where(Meme.id > after)
    if exclude:
        query = query.where(Meme.id.not_in(list(exclude)))
    return list(session.execute(query.order_by(Meme.id).limit(limit)).scalars())


def progress(session: Session, generation: SearchGeneration) -> tuple[int, int]:
    """(memes with vectors in the generation, memes with a context in the scope)."""
    done = session.execute(
        select(func.count(func.distinct(MemeEmbedding.meme_id))).where(
            MemeEmbedding.scope_id == generation.scope_id, MemeEmbedding.generation_id == generation.id
        )
    ).scalar_one()
    total = session.execute(select(func.count()).select_from(Meme).where(*_eligible(generation.scope_id))).scalar_one()
    return done, total


QueryEmbedder = Callable[[str], Any]


class Embed(Protocol):
    """How :func:`build` embeds for one leg. ``leg``: the head's leg name; ``model``: the generation's
    model id; ``fields``: a meme context's texts to embed (field → text, empty when none);
    ``passages``: vectors of distinct texts, in order (one call per batch; raises a
    :class:`TaskError` with the leg's code); ``gate_embedders``: the eval gate's query embedders of
    the candidate and of the current generation (None: not measurable), called outside any
    transaction (it may call out)."""

    @property
    def leg(self) -> str: ...

    @property
    def model(self) -> str: ...

    def fields(self, context: dict[str, Any]) -> dict[str, str]: ...

    def passages(self, texts: list[str]) -> Sequence[Any]: ...

    def gate_embedders(
        self, candidate: GenerationRef, current: GenerationRef | None
    ) -> tuple[QueryEmbedder | None, QueryEmbedder | None]: ...


@dataclass(frozen=True)
class Built:
    """What :func:`build` did: the generation (None: nothing to embed, none created), the memes this
    run wrote, the memes with vectors there at the end, and the eval gate's verdict (``reason``
    ``already_active`` / ``waiting_for_force`` when no switch was due)."""

    generation_id: UUID | None
    embedded: int
    memes: int
    verdict: dict[str, Any]


def build(ctx: TaskContext, generation_id: UUID | None, embed: Embed) -> Built:
    """Fill the scope's generation ``generation_id`` (None: create a ``building`` one for
    ``embed.model`` with the first batch's dimensions) with the vectors of every meme with a context
    that lacks them there (:func:`missing`), then switch the head through the eval gate when a
    switch is due (``building``; ``ready`` with the payload's ``force``).

    Batches of :data:`BUILD_BATCH` memes are embedded outside any transaction and written in one
    fenced transaction (a worker that lost its lease writes nothing), with the task's progress. A
    meme deleted or re-analysed while its batch was embedded is skipped (never old vectors under a
    new metadata hash): the next pass embeds its new context. The switch happens only when a pass
    finds nothing missing under the head's lock; memes that came meanwhile are built first.
    Resumable: a retried task continues where the last one stopped. Raises what ``embed`` raises."""
    from mewdex.queue import tasks as queue

    sessions, claim = ctx.sessions, ctx.claim
    scope_id, force = claim.scope_id, bool(claim.payload.get("force"))
    empty: set[UUID] = set()  # memes whose context has nothing to embed for this leg
    embedded = 0
    while True:
        after = None
        while batch := _read(sessions, scope_id, generation_id, after, empty):
            after = batch[-1].id
            fields = [embed.fields(meme.meme_context or {}) for meme in batch]
            texts = list(dict.fromkeys(t for found in fields for t in found.values()))  # a shared text once
            vectors = dict(zip(texts, embed.passages(texts), strict=True)) if texts else {}
            with sessions.begin() as session:
                task = queue.fenced(session, claim)
                if generation_id is None:
                    if not vectors:
                        empty.update(meme.id for meme in batch)
                        continue
                    generation_id = _create(session, scope_id, embed, len(next(iter(vectors.values()))))
                generation = session.get_one(SearchGeneration, generation_id)
                for meme, found in zip(batch, fields, strict=True):
                    stored = listing.find(session, ScopeContext(scope_id), meme.id, include_trashed=True)
                    if stored is None or stored.search_metadata_hash != meme.search_metadata_hash:
                        continue  # deleted, or re-analysed meanwhile: the next pass embeds its new context
                    items = [(field, document, vectors[document]) for field, document in found.items()]
                    write_vectors(session, generation, stored, stored.search_metadata_hash or "", items)
                    if items:
                        embedded += 1
                    else:
                        empty.add(meme.id)
                session.flush()
                done, total = progress(session, generation)
                task.progress = done / total if total else 1.0
                task.message = f"{done}/{total} memes"
        if generation_id is None:
            return Built(None, embedded, 0, {"passed": True, "forced": False, "reason": "nothing_to_embed"})
        with sessions.begin() as session:
            generation = session.get_one(SearchGeneration, generation_id)
            due = generation.status == "building" or (generation.status == "ready" and force)
            head = current_generation(session, scope_id, embed.leg)
            seen = head.id if head is not None else None
            current = GenerationRef.of(head) if head is not None and head.id != generation_id else None
            candidate = GenerationRef.of(generation)
        # The gate's queries are embedded before the switch's transaction (no outside call inside it).
        embed_candidate, embed_current = embed.gate_embedders(candidate, current) if due else (None, None)
        with sessions.begin() as session:
            task = queue.fenced(session, claim)
            _lock(session, scope_id, f"head:{embed.leg}")
            if missing(session, scope_id, generation_id, exclude=empty, limit=1):
                continue  # memes came or changed meanwhile: build them first
            head = current_generation(session, scope_id, embed.leg)
            if due and (head.id if head is not None else None) != seen:
                continue  # the head moved meanwhile: measure against the new one
            generation = session.get_one(SearchGeneration, generation_id)
            done, _ = progress(session, generation)
            if due and generation.status in ("building", "ready"):
                verdict = activate(
                    session,
                    generation,
                    embed.leg,
                    embed_candidate=embed_candidate,
                    embed_current=embed_current,
                    force=force,
                )
                task.message = f"{'active' if verdict['passed'] else 'refused by the eval gate'}: {done} memes"
            else:
                active = generation.status == "active"
                reason = "already_active" if active else "waiting_for_force"
                verdict = {"passed": active, "forced": False, "reason": reason}
                task.message = f"{generation.status}: {done} memes"
            return Built(generation_id, embedded, done, verdict)


def _read(
    sessions: sessionmaker[Session], scope_id: str, generation_id: UUID | None, after: UUID | None, empty: set[UUID]
) -> list[Meme]:
    """:func:`missing`, detached from its session (read in a transaction of its own)."""
    with sessions.begin() as session:
        batch = missing(session, scope_id, generation_id, after=after, exclude=empty)
        for meme in batch:
            session.expunge(meme)
    return batch


def _create(session: Session, scope_id: str, embed: Embed, dimensions: int) -> UUID:
    """A ``building`` generation of ``embed.model`` (with its HNSW index); returns its id."""
    ensure_index(session, "meme_embeddings", embed.model, dimensions)
    generation = SearchGeneration(
        scope_id=scope_id,
        model=embed.model,
        dimensions=dimensions,
        status="building",
        source_snapshot_hash=_snapshot_hash(embed.leg, embed.model, dimensions, "build"),
    )
    session.add(generation)
    session.flush()
    return generation.id


@dataclass(frozen=True)
class LocalEmbed:
    """:class:`Embed` with a registered text embedder (the ``e5`` / ``use`` legs)."""

    leg: str
    model: str
    embedder: Any

    def fields(self, context: dict[str, Any]) -> dict[str, str]:
        from mewdex.search.documents import semantic_fields

        return semantic_fields(context, embedder=self.leg)

    def passages(self, texts: list[str]) -> Sequence[Any]:
        from mewdex.inference.errors import BackendUnavailable

        try:
            return list(self.embedder.embed_passages(texts))
        except BackendUnavailable as exc:
            raise ReindexError("backend_unavailable", str(exc)) from exc

    def gate_embedders(
        self, candidate: GenerationRef, current: GenerationRef | None
    ) -> tuple[QueryEmbedder | None, QueryEmbedder | None]:
        from mewdex.inference import models

        previous = models.embedder_for_model(current.model) if current is not None else None
        usable = previous is not None and current is not None and previous.dimensions == current.dimensions
        return self.embedder.embed_query, previous.embed_query if usable and previous is not None else None


class ReindexTask:
    """Queue handler of ``search_reindex`` tasks (run by the worker with a heartbeat): :func:`build`
    of the payload's ``building`` generation with the leg's registered embedder."""

    task_type = REINDEX_TASK_TYPE

    def run(self, ctx: TaskContext) -> dict:
        """Build the generation named by the task's payload and switch the head to it; returns
        ``{"generation_id", "memes", "eval_gate"}`` (or ``{"generation_id", "skipped"}``)."""
        from mewdex.inference import models

        generation_id = UUID(ctx.claim.payload["generation_id"])
        with ctx.sessions.begin() as session:
            generation = session.get(SearchGeneration, generation_id)
            if generation is None or generation.status != "building":
                return {"generation_id": str(generation_id), "skipped": "not building"}
            model, dimensions = generation.model, generation.dimensions
        embedder = models.embedder_for_model(model)
        if embedder is None or embedder.dimensions != dimensions:
            raise ReindexError(
                "model_unavailable", f"no registered text embedder is {model} ({dimensions}-d)", retryable=False
            )
        built = build(ctx, generation_id, LocalEmbed(ctx.claim.payload["leg"], model, embedder))
        return {"generation_id": str(generation_id), "memes": built.memes, "eval_gate": built.verdict}

    def failed(self, session: Session, task: Task, outcome: str) -> None:
        """The task failed for good (failed, cancelled): the building generation fails (search keeps the
        active one). A retrying attempt changes nothing."""
        if outcome not in ("failed", "cancelled"):
            return
        generation = session.get(SearchGeneration, UUID(task.payload["generation_id"]), with_for_update=True)
        if generation is not None and generation.status == "building":
            generation.status = "failed"


REINDEX_TASK = ReindexTask()
registry.register_task_type(
    registry.TaskType(REINDEX_TASK_TYPE, REINDEX_TASK.run, lane=REINDEX_LANE, on_failure=REINDEX_TASK.failed)
)


def status(session: Session, scope_id: str) -> dict:
    """``GET /api/v1/search/status``: per leg the active generation, the one being built (with
    progress) and the configured model; plus meme counts. Shapes:
    ``{"memes", "memes_with_context", "legs": {leg: {"configured": {"model", "dimensions"} | null,
    "active": {"id", "model", "dimensions", "activated_at", "memes"} | null,
    "building": {"id", "model", "dimensions", "created_at", "memes_done", "memes_total", "progress",
    "task": {"id", "status", "attempts", "error"} | null} | null, "in_sync": bool}}}``."""
    from mewdex.inference import models

    try:
        embedders = models.text_embedders()
    except ValueError:
        embedders = {}
    memes = session.execute(select(func.count()).select_from(Meme).where(Meme.scope_id == scope_id)).scalar_one()
    with_context = session.execute(select(func.count()).select_from(Meme).where(*_eligible(scope_id))).scalar_one()
    heads = session.execute(select(SearchHead.model).where(SearchHead.scope_id == scope_id)).scalars().all()
    legs = {}
    for leg in sorted(set(embedders) | set(heads)):
        embedder = embedders.get(leg)
        active = current_generation(session, scope_id, leg)
        building = building_generation(session, scope_id, embedder.model) if embedder is not None else None
        entry: dict[str, Any] = {
            "configured": None if embedder is None else {"model": embedder.model, "dimensions": embedder.dimensions},
            "active": None,
            "building": None,
        }
        if active is not None:
            entry["active"] = {
                "id": str(active.id),
                "model": active.model,
                "dimensions": active.dimensions,
                "activated_at": active.activated_at.isoformat() if active.activated_at else None,
                "memes": progress(session, active)[0],
            }
        if building is not None:
            done, total = progress(session, building)
            task = session.execute(
                select(Task)
                .where(
                    Task.scope_id == scope_id, Task.task_type == REINDEX_TASK_TYPE, Task.dedupe_key == str(building.id)
                )
                .order_by(Task.created_at.desc())
                .limit(1)
            ).scalar_one_or_none()
            entry["building"] = {
                "id": str(building.id),
                "status": building.status,  # building, or ready: refused by the eval gate
                "model": building.model,
                "dimensions": building.dimensions,
                "created_at": building.created_at.isoformat(),
                "memes_done": done,
                "memes_total": total,
                "progress": round(done / total, 4) if total else 1.0,
                "task": None
                if task is None
                else {"id": task.id, "status": task.status, "attempts": task.attempt_count, "error": task.error},
            }
        entry["in_sync"] = (
            embedder is not None
            and active is not None
            and building is None
            and (active.model, active.dimensions) == (embedder.model, embedder.dimensions)
        )
        legs[leg] = entry
    return {"memes": memes, "memes_with_context": with_context, "legs": legs}
