"""A chat's pool (issue 43): the one collection a turn answers from, when a channel binding is
limited to one (``config.pool``). The channels set it around an answer (:func:`answering_from`); every
search of the assistant asks :func:`pooled` for its filters (retrieval, the chat model's ``search``
tool, "random", a search by image) and "hot" keeps :func:`in_pool`'s."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.orm import Session

from mewdex.db.models import MemeCollectionItem, ScopeContext
from mewdex.dto.search import SearchFilters

#: The collection the current turn answers from (a chat's pool, set by the channels around an
#: answer with :func:`answering_from`), or None: the whole library.
POOL: ContextVar[str | None] = ContextVar("assistant_pool", default=None)


@contextmanager
def answering_from(collection_id: str | None) -> Iterator[None]:
    """Every search of the turn run inside (retrieval, the chat model's ``search`` tool, "hot",
    "random", a search by image) finds only memes of ``collection_id`` (None: no limit)."""
    token = POOL.set(collection_id)
    try:
        yield
    finally:
        POOL.reset(token)


def pooled(filters: SearchFilters | None) -> SearchFilters | None:
    """``filters`` limited to the turn's pool (:data:`POOL`; as they are without one)."""
    pool = POOL.get()
    if pool is None:
        return filters
    return (filters or SearchFilters()).model_copy(update={"collection_ids": [pool]})


def in_pool(session: Session, scope: ScopeContext, ids: list) -> list:
    """``ids`` (in order) that are in the turn's pool (all of them without one)."""
    pool = POOL.get()
    if pool is None or not ids:
        return ids
    members = set(
        session.execute(
            select(MemeCollectionItem.meme_id).where(
                MemeCollectionItem.scope_id == scope.scope_id,
                MemeCollectionItem.collection_id == UUID(pool),
                MemeCollectionItem.meme_id.in_([UUID(str(i)) for i in ids]),
            )
        ).scalars()
    )
    return [i for i in ids if UUID(str(i)) in members]
