"""One-time password reset links an admin makes for a user: ``/reset#<token>`` (the token after
``#`` never reaches a server log or a Referer).

Only the token's sha256 is stored (``password_reset_links``). A link works once, for
:data:`LINK_HOURS` hours, and only for an enabled account; making a new link for the user voids the
older unused ones; the reset itself is :func:`mewdex.platform.users.set_password` (tokens revoked,
signed links dead) and ends every session of the user.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from mewdex.db.models import PasswordResetLink, User, utcnow
from mewdex.platform import sessions, users
from mewdex.platform.errors import PlatformError

LINK_HOURS = 24
TOKEN_PREFIX = "mdr_"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def create_link(session: Session, user: User, *, created_by: User | None) -> tuple[str, datetime]:
    """``(token, expires_at)`` of a new link for ``user`` (older unused links of the user die);
    409 ``user_disabled`` for a disabled account (enable it first)."""
    if user.disabled:
        raise PlatformError("user_disabled", "the account is disabled; enable it before resetting its password")
    # One link at a time even when two are asked for at once (a double click): the user's row is locked
    # until this transaction commits, so the second request's delete sees the first one's link.
    session.execute(select(User.user_id).where(User.user_id == user.user_id).with_for_update())
    session.execute(
        delete(PasswordResetLink).where(PasswordResetLink.user_id == user.user_id, PasswordResetLink.used_at.is_(None))
    )
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    expires_at = utcnow() + timedelta(hours=LINK_HOURS)
    session.add(
        PasswordResetLink(
            token_hash=_digest(token),
            user_id=user.user_id,
            created_by=created_by.user_id if created_by is not None else None,
            expires_at=expires_at,
        )
    )
    session.flush()
    return token, expires_at


def _live_link(token: str):
    return (
        PasswordResetLink.token_hash == _digest(token),
        PasswordResetLink.used_at.is_(None),
        PasswordResetLink.expires_at > utcnow(),
    )


def link_user(session: Session, token: str) -> User | None:
    """The enabled account a live (unused, unexpired) link is for, else None."""
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    user = session.execute(
        select(User).join(PasswordResetLink, PasswordResetLink.user_id == User.user_id).where(*_live_link(token))
    ).scalar_one_or_none()
    return user if user is not None and not user.disabled else None


def reset_password(session: Session, token: str, new_password: str) -> User:
    """Set the password of the link's account and use the link up; 410 ``reset_link_invalid`` for a
    used, expired, unknown or disabled account's link; the new password's 422 rules (the link stays
    usable then). Every session and API token of the user ends."""
    user = link_user(session, token)
    if user is None:
        raise PlatformError("reset_link_invalid", "this reset link is used up, expired or not valid; ask the admin")
    users.password_bytes(new_password)  # the 422 rules before the link is used up
    used = session.execute(
        update(PasswordResetLink)
        .where(*_live_link(token))
        .values(used_at=utcnow())
        .returning(PasswordResetLink.user_id)
    ).first()
    if used is None:  # a concurrent reset used it first
        raise PlatformError("reset_link_invalid", "this reset link is used up, expired or not valid; ask the admin")
    users.set_password(session, user, new_password)
    sessions.end_all_sessions(session, user)
    return user
