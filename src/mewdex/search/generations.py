"""Search generations: the vector rows a scope's searches read, one active generation per model."""

from __future__ import annotations

import hashlib

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.db.models import SearchGeneration, SearchHead, utcnow
from mewdex.search.vector_index import ensure_index


def active_generation(session: Session, scope_id: str, model: str, dimensions: int) -> SearchGeneration:
    """The scope's active generation for ``model``, created (with its HNSW index) on first use.

    When the active generation has other dimensions than ``dimensions`` (the model was changed
    under the same name), a new generation is started and becomes active; the old one is retired.
    """
    generation = current_generation(session, scope_id, model)
    if generation is not None and generation.dimensions == dimensions:
        return generation
    key = int.from_bytes(hashlib.sha256(f"{scope_id}\0{model}".encode()).digest()[:8], "big", signed=True)
    session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
    generation = current_generation(session, scope_id, model)
    if generation is not None and generation.dimensions == dimensions:
        return generation
    if generation is not None:
        generation.status = "retired"
    ensure_index(session, "meme_embeddings", model, dimensions)
    new = SearchGeneration(
        scope_id=scope_id,
        model=model,
        dimensions=dimensions,
        status="active",
        source_snapshot_hash=hashlib.sha256(b"incremental").hexdigest(),
        activated_at=utcnow(),
    )
    session.add(new)
    session.flush()
    stmt = insert(SearchHead).values(
        scope_id=scope_id, model=model, active_generation_id=new.id, active_generation_model=model
    )
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["scope_id", "model"],
            set_={"active_generation_id": new.id, "active_generation_model": model},
        )
    )
    return new


def current_generation(session: Session, scope_id: str, model: str) -> SearchGeneration | None:
    """The generation the scope's head points at for ``model``, or None."""
    return session.execute(
        select(SearchGeneration)
        .join(
            SearchHead,
            (SearchHead.scope_id == SearchGeneration.scope_id)
            & (SearchHead.active_generation_id == SearchGeneration.id),
        )
        .where(SearchHead.scope_id == scope_id, SearchHead.model == model)
    ).scalar_one_or_none()
