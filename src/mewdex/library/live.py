"""The one rule of a live meme (issue 43): not in the trash, ``memes.deleted_at IS NULL``.

Every listing, count and search applies it — :mod:`mewdex.library.listing` (which re-exports these
names: ``listing.live`` is how most callers reach it), :mod:`mewdex.library.tags` (tag counts and the
memes of a tag), the search service — so a trashed meme is never listed, counted, found or sent (only
:mod:`mewdex.library.trash` asks for trashed ones). A module of its own so that ``listing`` and ``tags``
(which ``listing`` reads) can both apply it without an import cycle.
"""

from __future__ import annotations

from uuid import UUID

from sqlalchemy import Uuid, any_, bindparam, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from mewdex.db.models import Meme

#: The rule as SQL over the unaliased ``memes`` table.
LIVE_SQL = "memes.deleted_at IS NULL"


def live():
    """:data:`LIVE_SQL` as an ORM clause over :class:`Meme`."""
    return Meme.deleted_at.is_(None)


def live_ids(session: Session, scope_id: str, ids) -> set[UUID]:
    """Those of ``ids`` that are live memes of the scope (one statement; the search service drops the
    others from its fused ranking). The ids go as one array parameter: an ``IN`` list of a search's
    few hundred candidates was a new statement text every time, compiled and converted anew, about a
    tenth of a search's Python time."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return set()
    return set(
        session.execute(
            select(Meme.id).where(Meme.scope_id == scope_id, Meme.id == any_(_IDS), live()), {"ids": wanted}
        ).scalars()
    )


_IDS = bindparam("ids", type_=ARRAY(Uuid()))
