"""Which account owns a scope: the one lookup both quotas and users need (keeps them acyclic), and
the one rule every chat, delivery and schedule path asks before it does work for a scope
(:func:`owner_active`)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from mewdex.db.models import User


def user_for_scope(session: Session, scope_id: str) -> User | None:
    """The user whose personal scope is ``scope_id``; None for the local scope of single-user mode."""
    return session.execute(select(User).where(User.scope_id == scope_id)).scalar_one_or_none()


PERSONAL_SCOPE_PREFIX = "u-"


def owner_active(session: Session, scope_id: str) -> bool:
    """Whether work may still be done for ``scope_id``: True for a scope of no account (single-user
    mode's local scope, the system scope) and for an enabled account's; False for a disabled
    account's and for a personal scope (``u-…``) whose account is gone.

    The one rule of issue 31: inbound acceptance, deliveries, schedule dispatch and runs, the
    OneBot socket checks and the ClawBot pollers all call it."""
    user = user_for_scope(session, scope_id)
    if user is None:
        return not scope_id.startswith(PERSONAL_SCOPE_PREFIX)
    return not user.disabled
