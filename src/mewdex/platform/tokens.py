"""Personal API tokens ``mdx_<43 url-safe chars>``: shown once at creation, stored as sha256, named,
with last-used time, scopes (``read``: GET/HEAD; ``write``: changes; ``admin``: the admin API, for
admins) and an optional expiry; a revoked or expired token stops working on the next request. A
password change or reset revokes all of the user's tokens (:func:`revoke_all`)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from uuid import UUID

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from mewdex.db.models import ApiToken, User, utcnow
from mewdex.dto.users import Token
from mewdex.platform.errors import PlatformError, clean_text

PREFIX = "mdx_"
MAX_TOKENS_PER_USER = 100
SCOPES = ("read", "write", "admin")
DEFAULT_SCOPES = ("read", "write")
MAX_EXPIRY_DAYS = 3650


def digest(token: str) -> str:
    """The stored form of a secret token: its sha256, hex (API tokens, public collection links)."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def create_token(
    session: Session,
    user: User,
    name: str,
    *,
    scopes: list[str] | None = None,
    expires_in_days: int | None = None,
    within: tuple[frozenset[str], datetime | None] | None = None,
) -> tuple[ApiToken, str]:
    """``(row, plaintext token)``; ``scopes`` default ``read``+``write``; ``expires_in_days`` None =
    never. ``within``: ``(scopes, expires_at)`` of the API token the request came with — the new
    token gets no scope it lacks (403 ``insufficient_scope``) and never outlives it.
    422 ``name_required``/``name_too_long``/``scope_invalid``/``expiry_invalid``; 403
    ``admin_required`` (an ``admin`` scope for a non-admin); 409 ``too_many_tokens``."""
    name = clean_text(name, "name", max_chars=100)
    if not name:
        raise PlatformError("name_required", "a token needs a name")
    wanted = (
        sorted(set(scopes if scopes is not None else DEFAULT_SCOPES), key=SCOPES.index)
        if all(s in SCOPES for s in (scopes or ()))
        else None
    )
    if not wanted:
        raise PlatformError("scope_invalid", "scopes are one or more of read, write, admin", {"allowed": list(SCOPES)})
    if "admin" in wanted and user.role != "admin":
        raise PlatformError("admin_required", "only admins can make tokens with the admin scope")
    if expires_in_days is not None and not 1 <= expires_in_days <= MAX_EXPIRY_DAYS:
        raise PlatformError("expiry_invalid", f"expires_in_days is 1..{MAX_EXPIRY_DAYS}")
    if within is not None:
        beyond = [s for s in wanted if s not in within[0]]
        if beyond:
            raise PlatformError(
                "insufficient_scope",
                "an API token cannot make a token with scopes it lacks",
                {"needed": beyond[0]},
            )
    live = session.execute(
        select(ApiToken.token_id).where(ApiToken.user_id == user.user_id, ApiToken.revoked_at.is_(None))
    ).all()
    if len(live) >= MAX_TOKENS_PER_USER:
        raise PlatformError("too_many_tokens", f"at most {MAX_TOKENS_PER_USER} live tokens per user")
    plain = PREFIX + secrets.token_urlsafe(32)
    expires_at = utcnow() + timedelta(days=expires_in_days) if expires_in_days else None
    if within is not None and within[1] is not None:
        expires_at = within[1] if expires_at is None else min(expires_at, within[1])
    row = ApiToken(
        user_id=user.user_id,
        name=name,
        token_hash=digest(plain),
        prefix=plain[:8],
        scopes=wanted,
        expires_at=expires_at,
    )
    session.add(row)
    session.flush()
    return row, plain


def list_tokens(session: Session, user: User) -> list[ApiToken]:
    return list(
        session.execute(
            select(ApiToken).where(ApiToken.user_id == user.user_id).order_by(ApiToken.created_at, ApiToken.token_id)
        ).scalars()
    )


def revoke_token(session: Session, user: User, token_id: UUID) -> None:
    """Revoke the user's token; 404 ``not_found`` for anyone else's or a missing id."""
    row = session.execute(
        select(ApiToken).where(ApiToken.user_id == user.user_id, ApiToken.token_id == token_id)
    ).scalar_one_or_none()
    if row is None:
        raise PlatformError("not_found", "token not found")
    if row.revoked_at is None:
        row.revoked_at = utcnow()


def resolve_token(session: Session, token: str) -> tuple[ApiToken, User] | None:
    """The live token and its enabled user, stamping ``last_used_at``; None otherwise."""
    if not token.startswith(PREFIX) or len(token) > 200:
        return None
    row = session.execute(
        select(ApiToken, User)
        .join(User, User.user_id == ApiToken.user_id)
        .where(
            ApiToken.token_hash == digest(token),
            ApiToken.revoked_at.is_(None),
            User.disabled.is_(False),
            (ApiToken.expires_at.is_(None)) | (ApiToken.expires_at > utcnow()),
        )
    ).first()
    if row is None:
        return None
    row[0].last_used_at = utcnow()
    return row[0], row[1]


def revoke_all(session: Session, user: User) -> None:
    """Revoke every live token of ``user`` (a password change or reset)."""
    session.execute(
        update(ApiToken)
        .where(ApiToken.user_id == user.user_id, ApiToken.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )


def token_dict(row: ApiToken) -> dict:
    """``{"id", "name", "prefix", "scopes", "created_at", "expires_at", "last_used_at", "revoked_at"}``
    (never the token)."""
    iso = lambda t: t.isoformat() if t else None  # noqa: E731
    return Token(
        id=str(row.token_id),
        name=row.name,
        prefix=row.prefix,
        scopes=list(row.scopes or ()),
        created_at=iso(row.created_at),
        expires_at=iso(row.expires_at),
        last_used_at=iso(row.last_used_at),
        revoked_at=iso(row.revoked_at),
    ).model_dump()
