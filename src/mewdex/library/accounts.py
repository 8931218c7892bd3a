"""Deleting an account with its library (``mewdex user delete``, ``DELETE /api/v1/admin/users/{id}``).

An account owns one scope; deleting the account deletes everything of that scope: its memes,
collections, conversations, schedules, channel bindings, tasks, search indexes, usage rows, the scope
row itself, and then its blobs and thumbnails in the blob store. Nothing is kept "owned by no
one": a deleted account leaves no rows and no files behind.

Order: one transaction removes the rows (the account hooks first: sockets hung up, sends cancelled,
bindings and jobs gone); the blobs go only after it commits, so a failure before the commit leaves
the account whole. Refused with 409 ``account_busy`` while a task of the scope holds a worker
(disable the account, wait for the task, retry) and 409 ``last_admin`` for the last enabled admin.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from mewdex.db.models import Base, ImageNamingPool, Meme, Scope, Task, TaskLaneSlot, User
from mewdex.platform import users
from mewdex.platform.errors import PlatformError
from mewdex.storage import blob_store, journal
from mewdex.storage.blobs import thumbnail_namespace

log = logging.getLogger(__name__)

#: scoped tables whose rows are not the scope's data but a shared pool's bookkeeping
_NOT_SCOPE_DATA = frozenset({"users", "scopes", "image_naming_pools"})


@dataclass(frozen=True)
class DeletedAccount:
    """What went: the account's ``email``, ``scope_id``, ``memes`` (rows) and ``blobs`` (files)."""

    email: str | None
    scope_id: str
    memes: int
    blobs: int

    def as_dict(self) -> dict[str, Any]:
        return {"email": self.email, "scope_id": self.scope_id, "memes": self.memes, "blobs": self.blobs}


def library_size(session: Session, user: User) -> int:
    """How many memes the account's library holds (what a confirmation prompt names)."""
    return int(
        session.execute(select(func.count()).select_from(Meme).where(Meme.scope_id == user.scope_id)).scalar_one()
    )


def delete_account(session: Session, user: User) -> tuple[DeletedAccount, list[str]]:
    """Delete ``user`` and every row of its scope in ``session``'s transaction; returns the summary
    (``blobs`` 0 until :func:`remove_blobs` ran) and the blob namespaces to empty after the commit
    (none while a backup holds its lease: the storage journal empties them when it ends).

    Errors: 409 ``last_admin`` (the last enabled admin), 409 ``account_busy`` (a task of the scope
    is running)."""
    scope_id = user.scope_id
    session.execute(select(Scope.id).where(Scope.id == scope_id).with_for_update())
    running = (
        session.execute(
            select(func.count()).select_from(TaskLaneSlot).where(TaskLaneSlot.task_scope_id == scope_id)
        ).scalar_one()
        or session.execute(
            select(func.count()).select_from(Task).where(Task.scope_id == scope_id, Task.status == "running")
        ).scalar_one()
    )
    if running:
        raise PlatformError(
            "account_busy", "a task of this account is running; disable the account, wait a minute and retry"
        )
    memes = library_size(session, user)
    namespace = session.execute(select(Scope.storage_namespace).where(Scope.id == scope_id)).scalar_one_or_none()
    email = user.email
    users.delete_user(session, user)  # 409 last_admin; the hooks stop chats, sends and schedules
    session.execute(
        update(ImageNamingPool).where(ImageNamingPool.cursor_scope_id == scope_id).values(cursor_scope_id=None)
    )
    for table in reversed(Base.metadata.sorted_tables):  # children before parents
        if table.name in _NOT_SCOPE_DATA:
            continue
        for column in ("scope_id", "task_scope_id"):
            if column in table.c:
                session.execute(delete(table).where(table.c[column] == scope_id))
    session.execute(delete(Scope).where(Scope.id == scope_id))
    session.flush()
    namespaces = [str(namespace), thumbnail_namespace(namespace)] if namespace is not None else []
    if journal.defer_namespace_removal(session, str(scope_id), namespaces):
        namespaces = []  # a backup is copying them: emptied when it ends (the storage journal's lease)
    return DeletedAccount(email=email, scope_id=scope_id, memes=memes, blobs=0), namespaces


def remove_blobs(namespaces: list[str]) -> int:
    """Delete every blob of ``namespaces`` (after the rows' commit; see :func:`delete_account`);
    returns the files removed."""
    return journal.empty_namespaces(blob_store(), namespaces)


def delete_account_now(sessionmaker, user_id) -> DeletedAccount:
    """:func:`delete_account` in its own transaction, then :func:`remove_blobs`. 404-style
    ``not_found`` PlatformError when the account is gone."""
    with sessionmaker.begin() as session:
        user = session.execute(select(User).where(User.user_id == user_id).with_for_update()).scalar_one_or_none()
        if user is None:
            raise PlatformError("not_found", "user not found")
        summary, namespaces = delete_account(session, user)
    blobs = remove_blobs(namespaces)
    return DeletedAccount(email=summary.email, scope_id=summary.scope_id, memes=summary.memes, blobs=blobs)
