"""A meme's file as the channels send it: :func:`meme_file`, the one way every path (a delivery,
Telegram inline, a Discord answer, the OneBot relay) loads a meme's bytes."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from mewdex.channels.base import MemeFile
from mewdex.db.models import ScopeContext
from mewdex.db.scopes import storage_namespace
from mewdex.library import memes


def meme_file(session: Session, scope_id: str, meme_id: Any, *, data: bool = True) -> MemeFile | None:
    """The live meme ``meme_id`` of ``scope_id`` as a :class:`MemeFile` (its blob read from the
    store; ``data=False``: without the bytes, ``data`` empty), or None when the scope has no such meme."""
    from mewdex.storage import blob_store

    meme = memes.find(session, ScopeContext(scope_id), meme_id)
    if meme is None:
        return None
    content = b""
    if data:
        with blob_store().open(storage_namespace(session, scope_id), meme.storage_key) as handle:
            content = handle.read()
    return MemeFile(str(meme.id), content, meme.extension.lower(), meme.sha256, meme.display_name)
