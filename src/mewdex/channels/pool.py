"""A chat's pool (issue 43): a binding limited to one collection of its account (``config.pool``,
the collection's id). The bot answers that chat only from it (:func:`mewdex.assistant.pool.answering_from`
around the answer, and every meme of the reply checked to be in it), and what the owner saves there
(收, 改字 收) is added to it too. Set by the owner in the chat (``/pool NAME``, ``/pool off``; ``表情池
名字``, ``表情池 关``) or by ``PUT /api/v1/channels/{channel}/pool`` (:func:`set_pool`). A deleted
collection leaves the chat answering nothing until the pool is changed (never the whole library).
"""

from __future__ import annotations

import logging
from uuid import UUID

from sqlalchemy.orm import Session

from mewdex.channels import bindings
from mewdex.db.models import ChannelBinding, ScopeContext
from mewdex.library import collections as library_collections

log = logging.getLogger(__name__)
POOL_KEY = "pool"
_COMMANDS = ("/pool", "表情池")
OFF_WORDS = frozenset({"off", "none", "关", "关闭", "无"})


def pool_of(row: ChannelBinding) -> str | None:
    """The id of the binding's pool collection, or None (the whole library)."""
    value = (row.config or {}).get(POOL_KEY)
    return str(value) if value else None


def command(text_: str) -> str | None:
    """What follows ``/pool`` / ``表情池`` (a collection's name, ``off``/``关``, or ``""`` to ask which),
    or None for any other text."""
    stripped = text_.strip()
    for word in _COMMANDS:
        if stripped.lower() == word or stripped.lower().startswith(word + " "):
            return stripped[len(word) :].strip()
    return None


def set_pool(session: Session, row: ChannelBinding, collection_id: UUID | str | None) -> ChannelBinding:
    """Limit the binding to the scope's collection ``collection_id`` (None: the whole library again);
    the caller holds the row. Raises ``CollectionError`` ``not_found`` (404) for a collection that is
    not the binding's account's."""
    value = None
    if collection_id is not None:
        try:
            wanted = UUID(str(collection_id))
        except ValueError:
            raise library_collections.CollectionError("not_found", "collection not found") from None
        value = str(library_collections.find(session, ScopeContext(row.scope_id), wanted).id)
    bindings.update_config(session, row, {POOL_KEY: value})
    return row


def set_pool_of_channel(
    session: Session, scope_id: str, channel: str, collection_id: UUID | str | None
) -> ChannelBinding:
    """The API's setting of the scope's confirmed binding of ``channel``; ``channel_not_bound`` (404)
    without one, ``not_found`` (404) for a collection not the scope's."""
    return set_pool(session, bindings.active(session, scope_id, channel, lock=True), collection_id)


def by_name(session: Session, row: ChannelBinding, name: str) -> str | None:
    """The id of the binding account's collection named (or with the id) ``name``; None when none is."""
    try:
        return str(library_collections.find_by_name_or_id(session, ScopeContext(row.scope_id), name).id)
    except library_collections.CollectionError:
        return None


def collection_name(session: Session, row: ChannelBinding) -> str | None:
    """The pool collection's name (None without a pool or when it was deleted)."""
    pool = pool_of(row)
    if pool is None:
        return None
    try:
        return library_collections.find(session, ScopeContext(row.scope_id), UUID(pool)).name
    except library_collections.CollectionError:
        return None


def add_saved(session: Session, row: ChannelBinding, meme_id: str) -> bool:
    """Add a meme the owner saved in the chat to the chat's pool (nothing without one, or when the
    collection is gone). Returns whether it was added now."""
    pool = pool_of(row)
    if pool is None:
        return False
    scope = ScopeContext(row.scope_id)
    try:
        library_collections.find(session, scope, UUID(pool))
    except library_collections.CollectionError:
        log.info("%s: the chat's pool collection is gone; a saved meme stays in the library only", row.channel)
        return False
    return library_collections.add_items(session, scope, UUID(pool), [UUID(str(meme_id))]) > 0
