"""The one rule of a live meme (issue 43): not in the trash, ``memes.deleted_at IS NULL``.

Every listing, count and search applies it — :mod:`mewdex.library.listing` (which re-exports these
names: ``listing.live`` is how most callers reach it), :mod:`mewdex.library.tags` (tag counts and the
memes of a tag), the search service — so a trashed meme is never listed, counted, found or sent (only
:mod:`mewdex.library.trash` asks for trashed ones). A module of its own so that ``listing`` and ``tags``
(which ``listing`` reads) can both apply it without an import cycle.
"""

from __future__ import annotations

from uuid import UUID

from sqlalchemy import Uuid, text
from sqlalchemy.orm import Session

from mewdex.db.models import Meme

#: The rule as SQL over the unaliased ``memes`` table.
LIVE_SQL = "memes.deleted_at IS NULL"


def live():
    """:data:`LIVE_SQL` as an ORM clause over :class:`Meme`."""
    return Meme.deleted_at.is_(None)


def live_ids(session: Session, scope_id: str, ids) -> set[UUID]:
    """Those of ``ids`` that are live memes of the scope (one statement; the search service drops the
    others from its fused ranking). The ids go as one text parameter (:func:`id_list`) of a plain
    statement: an ``IN`` list of a search's few hundred candidates was a new statement text every time,
    and an ORM ``select`` with a ``uuid[]`` parameter spent about 2.8 ms of CPU per call on compiling
    and converting (this: about 1.7; bench/load.py's searches make one or two such calls each)."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return set()
    return set(session.execute(_LIVE_IDS, {"scope": scope_id, "ids": id_list(wanted)}).scalars())


def id_list(ids) -> str:
    """``ids`` (UUIDs) as the one text parameter :data:`ANY_IDS` reads."""
    return ",".join(map(str, ids))


#: SQL: ``memes.id`` is one of the ``:ids`` text (:func:`id_list`), for the hot statements of a search.
ANY_IDS = "memes.id = ANY(string_to_array(:ids, ',')::uuid[])"

_LIVE_IDS = text(f"SELECT memes.id FROM memes WHERE memes.scope_id = :scope AND {ANY_IDS} AND {LIVE_SQL}").columns(
    id=Uuid()
)
