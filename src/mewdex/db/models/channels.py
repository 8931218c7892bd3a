"""Chat channels (issue 17): bindings (seed 004 ``channel_bindings``), one-time bind codes, the
delivery log, per-chat send pacing, per-bot state and the per-bot media cache (Telegram ``file_id``).

Seed 004 is the spec for ``channel_bindings``. Deliberate changes:

* The key is ``(scope_id, channel)`` and ``user_id`` may be NULL: single-user mode has no user row,
  and a personal install binds its chats too. An account's personal scope is one-to-one with the
  account (``users.scope_id`` is unique) and ``(user_id, channel)`` is unique as well, so for
  accounts this is the seed's ``(user_id, channel)`` key.
* ``identity``: the platform identity inbound messages are matched on (Telegram user id, QQ number,
  WeCom ``wecom_userid``, ClawBot ``user_im_id``); one active binding per ``(channel, identity)``.
  ``config`` keeps the seed's fields (``chat_task_id`` = ``conversations.id`` of the standing
  conversation; secret fields sealed by :mod:`mewdex.providers.secrets`).
* ``config.account_id``: the outside account a binding holds when the account brings its own (a
  Discord application id); one active binding per ``(channel, account_id)`` (migration 0023).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import Boolean, CheckConstraint, DateTime, ForeignKey, Index, Integer, String, Text, Uuid
from sqlalchemy import text as sql_text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mewdex.db.models.base import Base, utcnow

BINDING_STATUSES = ("active", "revoked")
DELIVERY_STATUSES = ("queued", "retrying", "sent", "failed", "cancelled", "unknown")


class ChannelBinding(Base):
    """One scope's (account's) binding to one channel: ``status`` active|revoked, ``identity`` (see
    the module doc), ``config`` (seed 004; secret fields sealed)."""

    __tablename__ = "channel_bindings"
    scope_id: Mapped[str] = mapped_column(String(128), ForeignKey("scopes.id", ondelete="CASCADE"), primary_key=True)
    channel: Mapped[str] = mapped_column(Text, primary_key=True)
    user_id: Mapped[UUID | None] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(Text, nullable=False, default="active", server_default="active")
    identity: Mapped[str | None] = mapped_column(Text)
    config: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, default=dict, server_default="{}")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, default=utcnow, onupdate=utcnow
    )
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint("status IN ('active','revoked')", name="ck_channel_bindings_status"),
        Index(
            "uq_channel_bindings_user_channel",
            "user_id",
            "channel",
            unique=True,
            postgresql_where=sql_text("user_id IS NOT NULL"),
        ),
        Index(
            "uq_channel_bindings_active_identity",
            "channel",
            "identity",
            unique=True,
            postgresql_where=sql_text("status = 'active' AND identity IS NOT NULL"),
        ),
        Index(
            "uq_channel_bindings_active_account",
            "channel",
            sql_text("(config ->> 'account_id')"),
            unique=True,
            postgresql_where=sql_text("status = 'active' AND (config ? 'account_id')"),
        ),
    )


class ChannelBindCode(Base):
    """A one-time code that binds the chat it is sent from (``/start <code>``) to ``scope_id``;
    only its SHA-256 is stored. Used once (``used_at``), valid until ``expires_at``."""

    __tablename__ = "channel_bind_codes"
    code_sha256: Mapped[str] = mapped_column(Text, primary_key=True)
    channel: Mapped[str] = mapped_column(Text, nullable=False)
    scope_id: Mapped[str] = mapped_column(String(128), ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False)
    user_id: Mapped[UUID | None] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_channel_bind_codes_scope_channel", "scope_id", "channel"),)


class ChannelDelivery(Base):
    """One outbound message (the delivery log): what (``kind`` meme|text, ``meme_id``, ``text``),
    where (``channel``, ``target``), why (``source``, ``conversation_id``), and each outcome
    (``status``, ``attempts``, our ``error_code``, the platform's ``platform_code`` /
    ``platform_error``, ``retry_after_seconds``, ``platform_message_id``)."""

    __tablename__ = "channel_deliveries"
    delivery_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    scope_id: Mapped[str] = mapped_column(String(128), ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False)
    user_id: Mapped[UUID | None] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="SET NULL"))
    channel: Mapped[str] = mapped_column(Text, nullable=False)
    target: Mapped[str] = mapped_column(Text, nullable=False)
    kind: Mapped[str] = mapped_column(Text, nullable=False, default="meme", server_default="meme")
    meme_id: Mapped[UUID | None] = mapped_column(Uuid, ForeignKey("memes.id", ondelete="SET NULL"))
    text: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text, nullable=False, default="assistant", server_default="assistant")
    conversation_id: Mapped[UUID | None] = mapped_column(
        Uuid, ForeignKey("conversations.conversation_id", ondelete="SET NULL")
    )
    bound: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True, server_default=sql_text("true"))
    task_id: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text, nullable=False, default="queued", server_default="queued")
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    error_code: Mapped[str | None] = mapped_column(Text)
    platform_code: Mapped[str | None] = mapped_column(Text)
    platform_error: Mapped[str | None] = mapped_column(Text)
    retry_after_seconds: Mapped[int | None] = mapped_column(Integer)
    platform_message_id: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, default=utcnow, onupdate=utcnow
    )
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint(
            "status IN ('queued','retrying','sent','failed','cancelled','unknown')", name="ck_channel_deliveries_status"
        ),
        CheckConstraint("kind IN ('meme','text')", name="ck_channel_deliveries_kind"),
        Index("ix_channel_deliveries_scope_created", "scope_id", "created_at"),
        Index("ix_channel_deliveries_created", "created_at"),  # retention, /metrics (migration 0019)
        # a deleted meme's deliveries are found, not scanned for (ON DELETE SET NULL; migration 0031)
        Index("ix_channel_deliveries_meme", "meme_id", postgresql_where=sql_text("meme_id IS NOT NULL")),
    )


class ChannelChatPacing(Base):
    """When the next send to one chat may start (per-chat rate limit, all processes)."""

    __tablename__ = "channel_chat_pacing"
    channel: Mapped[str] = mapped_column(Text, primary_key=True)
    target: Mapped[str] = mapped_column(Text, primary_key=True)
    next_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class ChannelBot(Base):
    """Per-bot state of a channel (``bot_id``: the platform's id of the bot account): its
    ``username``, the long-polling ``update_offset``, the webhook URL it was registered with."""

    __tablename__ = "channel_bots"
    channel: Mapped[str] = mapped_column(Text, primary_key=True)
    bot_id: Mapped[str] = mapped_column(Text, primary_key=True)
    username: Mapped[str | None] = mapped_column(Text)
    update_offset: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    webhook_url: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, default=utcnow, onupdate=utcnow
    )


class ChannelMediaCache(Base):
    """A platform's reusable id of an uploaded file (Telegram ``file_id``: per bot; WeCom ``media_id``:
    until ``expires_at``), by the file's SHA-256 and the form it was sent in (``media_kind``)."""

    __tablename__ = "channel_media_cache"
    channel: Mapped[str] = mapped_column(Text, primary_key=True)
    bot_id: Mapped[str] = mapped_column(Text, primary_key=True)
    content_sha256: Mapped[str] = mapped_column(Text, primary_key=True)
    media_kind: Mapped[str] = mapped_column(Text, primary_key=True)
    file_id: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ChannelInboundNonce(Base):
    """A signed inbound request already taken in (``realm``: ``wecom:<corp id>`` or
    ``onebot:<scope>``; ``nonce``: the request's nonce or message id), remembered until
    ``expires_at`` (the replay window) so the same request is refused if sent again."""

    __tablename__ = "channel_inbound_nonces"
    realm: Mapped[str] = mapped_column(Text, primary_key=True)
    nonce: Mapped[str] = mapped_column(Text, primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)

    __table_args__ = (Index("ix_channel_inbound_nonces_expires", "expires_at"),)
