"""Platform tables (seed 004): users, their sessions and API tokens, disk usage, usage events, and
instance-wide settings.

Seed 004 is the spec for ``users``, ``user_disk_usage`` and ``usage_events``. Deliberate changes:

* ``users`` gains ``scope_id`` (the user's personal scope, a stable id that is never the email),
  ``disabled`` and the per-user quota overrides (NULL = the configured default); ``email`` is
  unique case-insensitively (a unique index on ``lower(email)``).
* ``usage_events`` carries ``scope_id`` and allows a NULL ``user_id`` (single-user mode has no user
  row); ``task_id`` is the id of the queue task that did the work (no FK: billing rows outlive
  pruned tasks); ``idempotency_key`` makes a retried write a no-op; ``message_id`` waits for chat.
* ``user_sessions``, ``api_tokens`` and ``platform_settings`` are ours (the seed's platform logs in
  through an external gateway).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mewdex.db.models.base import Base, created_at, utcnow

ROLES = ("user", "admin")


class User(Base):
    """An account: email + bcrypt password, role, personal scope, quota overrides."""

    __tablename__ = "users"
    user_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    email: Mapped[str | None] = mapped_column(Text)
    oidc_subject: Mapped[str | None] = mapped_column(Text)
    password_hash: Mapped[str | None] = mapped_column(Text)
    plan: Mapped[str | None] = mapped_column(Text)
    name: Mapped[str | None] = mapped_column(Text)
    user_name: Mapped[str | None] = mapped_column(Text)
    role: Mapped[str] = mapped_column(Text, nullable=False, default="user", server_default="user")
    scope_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("scopes.id", ondelete="RESTRICT"), nullable=False, unique=True
    )
    disabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False, server_default=text("false"))
    quota_storage_bytes: Mapped[int | None] = mapped_column(BigInteger)
    quota_memes: Mapped[int | None] = mapped_column(Integer)
    quota_analysis_cost_per_month: Mapped[Decimal | None] = mapped_column(Numeric(12, 6))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)
    # Bumped by a password change/reset or disabling: signed links of older epochs stop working.
    auth_epoch: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default=text("0"))
    # The account's IANA time zone for the pages' times (NULL until the first sign-in from a browser
    # sets it from Intl.DateTimeFormat; the account page changes it) and its page language (NULL: the
    # browser's Accept-Language / the language switch decide).
    time_zone: Mapped[str | None] = mapped_column(Text)
    language: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        CheckConstraint("role IN ('user','admin')", name="ck_users_role"),
        CheckConstraint("language IS NULL OR language IN ('en','zh')", name="ck_users_language"),
        CheckConstraint("time_zone IS NULL OR length(time_zone) BETWEEN 1 AND 64", name="ck_users_time_zone"),
        CheckConstraint("quota_storage_bytes IS NULL OR quota_storage_bytes >= 0", name="ck_users_quota_storage"),
        CheckConstraint("quota_memes IS NULL OR quota_memes >= 0", name="ck_users_quota_memes"),
        CheckConstraint(
            "quota_analysis_cost_per_month IS NULL OR quota_analysis_cost_per_month >= 0", name="ck_users_quota_cost"
        ),
        Index("uq_users_email_lower", text("lower(email)"), unique=True),
    )


class UserSession(Base):
    """A signed-in browser session: only the sha256 of the cookie value is stored."""

    __tablename__ = "user_sessions"
    session_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[UUID] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="CASCADE"), nullable=False)
    csrf_token: Mapped[str] = mapped_column(String(64), nullable=False)
    created_at: Mapped[datetime] = created_at()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    last_seen_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, default=utcnow, server_default=func.now()
    )

    __table_args__ = (Index("ix_user_sessions_user", "user_id"),)


class ApiToken(Base):
    """A personal API token (``mdx_…``): shown once, stored as its sha256, named, revocable."""

    __tablename__ = "api_tokens"
    token_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[UUID] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="CASCADE"), nullable=False)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    token_hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    prefix: Mapped[str] = mapped_column(String(16), nullable=False)
    created_at: Mapped[datetime] = created_at()
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    scopes: Mapped[list[str]] = mapped_column(
        ARRAY(Text), nullable=False, default=lambda: ["read", "write"], server_default=text("'{read,write}'::text[]")
    )
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint("length(name) BETWEEN 1 AND 100", name="ck_api_tokens_name"),
        CheckConstraint(
            "scopes <@ ARRAY['read','write','admin']::text[] AND cardinality(scopes) > 0", name="ck_api_tokens_scopes"
        ),
        Index("ix_api_tokens_user", "user_id"),
    )


class PasswordResetLink(Base):
    """A one-time password reset link an admin made for a user: only the sha256 of the link's token
    is stored; ``used_at`` is set by the one reset it allows."""

    __tablename__ = "password_reset_links"
    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[UUID] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="CASCADE"), nullable=False)
    created_by: Mapped[UUID | None] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = created_at()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_password_reset_links_user", "user_id"),)


class LoginFailure(Base):
    """Attempts of one key in its current window: failed sign-ins (``account:<email>``, ``ip:<address
    or /64>``), the addresses an account signed in from (``known:…``), sign-ups and public-link
    requests per address (``signup:…``, ``share:…``: :func:`mewdex.platform.sessions.count_attempt`);
    every API process counts in this table (atomic upserts)."""

    __tablename__ = "login_failures"
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    failures: Mapped[int] = mapped_column(Integer, nullable=False)
    window_started_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    last_failure_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )


class UserDiskUsage(Base):
    """Bytes and files of a user's memes (originals; a byte-identical re-upload is one meme).

    Kept exact by a trigger on ``memes`` (insert/delete/size change); a periodic full scan
    (:func:`mewdex.platform.quotas.rescan`) corrects any drift and stamps ``scanned_at``.
    """

    __tablename__ = "user_disk_usage"
    user_id: Mapped[UUID] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="CASCADE"), primary_key=True)
    bytes_used: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    file_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    scanned_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


class UsageEvent(Base):
    """One metered call (seed 004 v2 shape): ``units`` by kind, ``cost_cny`` from the price table."""

    __tablename__ = "usage_events"
    event_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[UUID | None] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="SET NULL"))
    scope_id: Mapped[str] = mapped_column(String(128), nullable=False)
    task_id: Mapped[str | None] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    model_profile: Mapped[str] = mapped_column(Text, nullable=False)
    units: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, default=dict)
    cost_cny: Mapped[Decimal] = mapped_column(Numeric(12, 6), nullable=False, default=0)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)

    __table_args__ = (
        Index("ix_usage_created_brin", "created_at", postgresql_using="brin"),
        Index("ix_usage_events_user_created", "user_id", "created_at"),
        Index("ix_usage_events_scope_created", "scope_id", "created_at"),
    )


class PlatformSetting(Base):
    """Instance-wide settings the admin changes at run time (``signup_enabled``) and instance secrets
    (``media_signing_key``)."""

    __tablename__ = "platform_settings"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[Any] = mapped_column(JSONB, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
