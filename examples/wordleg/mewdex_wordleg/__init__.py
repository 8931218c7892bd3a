"""An example mewdex plugin: the search leg ``word`` — the memes of the scope whose name holds a word
of the query (3+ letters, case-folded), by name. Imported by mewdex through the entry point
``mewdex.plugins: wordleg`` the first time a search asks for the search legs."""

from __future__ import annotations

import re
from uuid import UUID

from sqlalchemy import func, or_, select

from mewdex import hooks
from mewdex.db.engine import get_search_sessionmaker
from mewdex.db.models import Meme, ScopeContext
from mewdex.dto.search import SearchFilters

LEG = "word"
WEIGHT = 1.0


def word_leg(scope: ScopeContext, query: str, filters: SearchFilters | None, limit: int) -> list[UUID] | None:
    """The leg's ranking: memes whose ``display_name`` holds a word of ``query``, shortest name first
    (the closest match). ``filters`` are left to the search (it keeps the live memes it asked for)."""
    words = [w for w in re.findall(r"\w+", query.casefold()) if len(w) >= 3][:8]
    if not words:
        return []
    name = func.lower(Meme.display_name)
    with get_search_sessionmaker()() as session:  # the legs' own pool, never the caller's session
        return list(
            session.execute(
                select(Meme.id)
                .where(Meme.scope_id == scope.scope_id, or_(*(name.contains(w, autoescape=True) for w in words)))
                .order_by(func.length(Meme.display_name), Meme.id)
                .limit(limit)
            ).scalars()
        )


hooks.provide("search_legs", LEG, (word_leg, WEIGHT))
