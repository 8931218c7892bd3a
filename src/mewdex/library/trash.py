"""The trash (issue 43): a deleted meme first goes to the trash — ``memes.deleted_at`` set, its row,
files, collection memberships, tags and learning kept — where no listing, search or channel sees
it (:func:`mewdex.library.listing.live`, the one rule every query path applies). From there it is
restored as it was, or purged: the journaled permanent delete of :func:`mewdex.library.memes.delete`
(rows first, then the files, recovery finishing an interrupted one), one meme at a time. Memes
trashed ``MEWDEX_TRASH_DAYS`` ago are purged by the ``retention`` maintenance task
(:func:`purge_expired`). The trash counts toward the owner's quota until it is purged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from sqlalchemy import func, select, tuple_
from sqlalchemy.orm import Session, sessionmaker

from mewdex.config import get_settings
from mewdex.db.models import Meme, ScopeContext, utcnow
from mewdex.dto.cursor import CursorInvalid, decode_cursor, encode_cursor
from mewdex.library import memes
from mewdex.library.memes import MemeError
from mewdex.storage import journal

__all__ = ["CursorInvalid", "MemeError", "TrashPage", "empty", "list_trash", "purge", "purge_expired", "restore"]


def move_to_trash(
    sessions: sessionmaker[Session], scope: ScopeContext, meme_id, *, expected_revision: int | None = None
) -> int:
    """Move a live meme to the trash (``deleted_at`` = now, a new revision); returns the revision.

    Nothing else changes: its files, thumbnails, index rows, collections, tags and feedback stay, so
    :func:`restore` brings it back at once. Raises MemeError ``not_found`` (no live meme of the scope
    with that id), ``revision_conflict``, ``operation_in_progress`` (a rename or delete is open)."""
    with sessions.begin() as session:
        meme = memes._locked_meme(session, scope, meme_id)
        memes._check_revision(meme, expected_revision)
        if journal.open_operation(session, meme) is not None:
            raise MemeError("operation_in_progress", "the meme is being changed right now; try again in a moment")
        meme.deleted_at = utcnow()
        meme.revision += 1
        return meme.revision


def restore(sessions: sessionmaker[Session], scope: ScopeContext, meme_id) -> int:
    """Bring a meme back from the trash as it was (collections, tags, learning, index); returns its new
    revision. Raises MemeError ``not_found`` (not in the scope's trash)."""
    with sessions.begin() as session:
        meme = memes._locked_meme(session, scope, meme_id, in_trash=True)
        meme.deleted_at = None
        meme.revision += 1
        return meme.revision


@dataclass
class TrashPage:
    """A page of the trash, most recently trashed first; ``purge_at``: when each is deleted for good."""

    memes: list[Meme]
    next_cursor: str | None
    total: int
    total_bytes: int


def purge_time(meme: Meme) -> datetime:
    """When the ``retention`` task deletes a trashed meme for good (``deleted_at`` + ``MEWDEX_TRASH_DAYS``)."""
    assert meme.deleted_at is not None
    return meme.deleted_at + timedelta(days=get_settings().trash_days)


def usage(session: Session, scope: ScopeContext) -> tuple[int, int]:
    """``(memes, bytes)`` in the scope's trash (they count toward its quota)."""
    count, total = session.execute(
        select(func.count(), func.coalesce(func.sum(Meme.size_bytes), 0)).where(
            Meme.scope_id == scope.scope_id, Meme.deleted_at.is_not(None)
        )
    ).one()
    return int(count), int(total)


def list_trash(session: Session, scope: ScopeContext, *, limit: int = 50, cursor: str | None = None) -> TrashPage:
    """One page of the scope's trash, most recently trashed first (ties by id); ``cursor``: the previous
    page's ``next_cursor``. Raises CursorInvalid (``invalid_cursor``)."""
    query = select(Meme).where(Meme.scope_id == scope.scope_id, Meme.deleted_at.is_not(None))
    if cursor:
        deleted_at, last_id = decode_cursor(cursor, (datetime, UUID))
        query = query.where(tuple_(Meme.deleted_at, Meme.id) < tuple_(deleted_at, last_id))
    rows = list(session.execute(query.order_by(Meme.deleted_at.desc(), Meme.id.desc()).limit(limit + 1)).scalars())
    page = rows[:limit]
    next_cursor = encode_cursor([page[-1].deleted_at, page[-1].id]) if len(rows) > limit else None
    count, total_bytes = usage(session, scope)
    return TrashPage(page, next_cursor, count, total_bytes)


def purge(sessions: sessionmaker[Session], store, scope: ScopeContext, meme_id) -> None:
    """Delete a meme of the trash for good, through the storage journal (:func:`mewdex.library.memes.delete`:
    the rows with a ``delete`` operation in one transaction, then the files unless another meme uses
    them; recovery finishes the files after a crash). Raises MemeError ``not_found`` (not in the trash)."""
    memes.delete(sessions, store, scope, meme_id, in_trash=True)


def _trashed_ids(sessions: sessionmaker[Session], scope_id: str | None, before: datetime | None, limit: int):
    with sessions.begin() as session:
        query = select(Meme.scope_id, Meme.id).where(Meme.deleted_at.is_not(None))
        if scope_id is not None:
            query = query.where(Meme.scope_id == scope_id)
        if before is not None:
            query = query.where(Meme.deleted_at < before)
        return session.execute(query.order_by(Meme.deleted_at, Meme.id).limit(limit)).all()


def empty(sessions: sessionmaker[Session], store, scope: ScopeContext) -> int:
    """Purge everything in the scope's trash ("Empty trash"), one journaled delete per meme; returns how
    many were purged (a meme restored or purged meanwhile is skipped)."""
    return _purge_all(sessions, store, scope.scope_id, None)


def purge_expired(sessions: sessionmaker[Session], store, *, limit: int = 1000) -> int:
    """Purge up to ``limit`` memes of every scope trashed more than ``MEWDEX_TRASH_DAYS`` ago, oldest
    first (the ``retention`` task); returns how many."""
    before = utcnow() - timedelta(days=get_settings().trash_days)
    return _purge_all(sessions, store, None, before, limit=limit)


def _purge_all(sessions, store, scope_id: str | None, before: datetime | None, *, limit: int | None = None) -> int:
    purged = 0
    while limit is None or purged < limit:
        batch = 200 if limit is None else min(limit - purged, 200)
        rows = _trashed_ids(sessions, scope_id, before, batch)
        done = 0
        for row_scope, meme_id in rows:
            try:
                purge(sessions, store, ScopeContext(row_scope), meme_id)
                done += 1
            except MemeError:  # restored or purged meanwhile
                continue
        purged += done
        if len(rows) < batch or not done:
            break
    return purged
