""" "This is the meme I wanted" marks on searches (issue 15, point 7): a user marks a result of a
query, and a scope's marks, grouped by query, are its query set — what ``mewdex eval --marks``
measures and what the eval gate (:mod:`mewdex.search.eval_gate`) compares generations on.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.db.models import ScopeContext, SearchMark, utcnow
from mewdex.dto.errors import DomainError
from mewdex.library import listing
from mewdex.search import feedback

MAX_QUERY = 500


def query_key(query: str) -> str:
    """The query as marks compare it: NFKC, case-folded, runs of spaces as one."""
    return feedback.fold_key(query)


def add(session: Session, scope: ScopeContext, query: str, meme_id) -> SearchMark:
    """Mark ``meme_id`` as what ``query`` should find (idempotent: marking again returns the same
        mark). A new mark is also a ``mark`` feedback event (:func:`mewdex.search.feedback.record`,
    nothing with learning off). Raises ``DomainError`` ``query_empty`` / ``query_too_long`` (422) or ``not_found`` (404:
        no such meme in the scope)."""
    text = " ".join(str(query or "").split())
    if not text:
        raise DomainError("query_empty", "the query is empty")
    if len(text) > MAX_QUERY:
        raise DomainError("query_too_long", f"the query is over {MAX_QUERY} characters")
    found = listing.find(session, scope, meme_id)
    if found is None:
        raise DomainError("not_found", "meme not found")
    meme = found.id
    key = query_key(text)
    created = session.execute(
        insert(SearchMark)
        .values(
            mark_id=uuid.uuid4(), scope_id=scope.scope_id, meme_id=meme, query=text, query_key=key, created_at=utcnow()
        )
        .on_conflict_do_nothing(constraint="uq_search_marks_query_meme")
        .returning(SearchMark.mark_id)
    ).scalar_one_or_none()
    if created is not None:  # a new mark is feedback too (learning, issue 33); marking again adds none
        feedback.record(session, scope, text, meme, "mark", "search")
    return session.execute(
        select(SearchMark).where(
            SearchMark.scope_id == scope.scope_id, SearchMark.query_key == key, SearchMark.meme_id == meme
        )
    ).scalar_one()


def list_marks(session: Session, scope: ScopeContext, limit: int = 500) -> list[SearchMark]:
    """The scope's marks, newest first."""
    return list(
        session.execute(
            select(SearchMark)
            .where(SearchMark.scope_id == scope.scope_id)
            .order_by(SearchMark.created_at.desc(), SearchMark.mark_id)
            .limit(limit)
        ).scalars()
    )


def remove(session: Session, scope: ScopeContext, mark_id) -> bool:
    """Delete one of the scope's marks and the ``mark`` feedback it gave; False when there is none
    with that id."""
    row = session.execute(
        delete(SearchMark)
        .where(SearchMark.scope_id == scope.scope_id, SearchMark.mark_id == mark_id)
        .returning(SearchMark.query, SearchMark.meme_id)
    ).first()
    if row is None:
        return False
    feedback.forget(session, scope, row[0], row[1], "mark")
    return True


def query_set(session: Session, scope_id: str) -> list[dict[str, Any]]:
    """The scope's marks as a query set: ``[{"query": str, "ids": [meme id, …]}]`` (one row per
    distinct query, the first-written spelling), the shape ``mewdex eval`` reads."""
    rows = session.execute(
        select(SearchMark.query_key, SearchMark.query, SearchMark.meme_id)
        .where(SearchMark.scope_id == scope_id)
        .order_by(SearchMark.created_at, SearchMark.mark_id)
    ).all()
    grouped: dict[str, dict[str, Any]] = {}
    for key, text, meme_id in rows:
        grouped.setdefault(key, {"query": text, "ids": []})["ids"].append(str(meme_id))
    return list(grouped.values())
