"""Which account owns a scope: the one lookup both quotas and users need (keeps them acyclic)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from mewdex.db.models import User


def user_for_scope(session: Session, scope_id: str) -> User | None:
    """The user whose personal scope is ``scope_id``; None for the local scope of single-user mode."""
    return session.execute(select(User).where(User.scope_id == scope_id)).scalar_one_or_none()
