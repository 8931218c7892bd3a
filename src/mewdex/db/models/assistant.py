"""Conversations, messages and artifacts (seed 004, with its ``tasks`` table named ``conversations``:
our ``tasks`` is the work queue). Every row belongs to a scope; ``user_id`` is the signed-in author
(None for the local no-login scope)."""

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
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column, validates

from mewdex.db.models.base import Base, utcnow

RUN_STATUSES = ("idle", "running", "cancelling", "error", "cancelled")
TITLE_SOURCES = ("auto", "manual", "fixed")


def sanitize_jsonb_nul(value: Any) -> Any:
    """``value`` with every NUL character removed from its strings and keys (PostgreSQL ``jsonb``
    cannot store ``\\u0000``); other values unchanged. Recurses through dicts, lists and tuples."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {sanitize_jsonb_nul(k): sanitize_jsonb_nul(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(sanitize_jsonb_nul(v) for v in value)
    return value


class Conversation(Base):
    """A chat thread (seed 004 ``tasks``): title state, the in-flight run, the message counter and
    the model's context window."""

    __tablename__ = "conversations"
    conversation_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    scope_id: Mapped[str] = mapped_column(String(128), ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False)
    user_id: Mapped[UUID | None] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="SET NULL"))
    name: Mapped[str] = mapped_column(Text, nullable=False)
    auto_title_pending: Mapped[bool] = mapped_column(
        Boolean, nullable=False, default=False, server_default=text("false")
    )
    title_source: Mapped[str] = mapped_column(Text, nullable=False, default="manual", server_default="manual")
    auto_title_version: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    channel: Mapped[str] = mapped_column(Text, nullable=False, default="web", server_default="web")
    status: Mapped[str] = mapped_column(Text, nullable=False, default="active", server_default="active")
    model: Mapped[str] = mapped_column(Text, nullable=False, default="", server_default="")
    model_profile: Mapped[str] = mapped_column(Text, nullable=False, default="", server_default="")
    tokens_prompt: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    tokens_completion: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    cost_cny: Mapped[Decimal] = mapped_column(Numeric(12, 6), nullable=False, default=0, server_default="0")
    run_status: Mapped[str] = mapped_column(Text, nullable=False, default="idle", server_default="idle")
    run_error: Mapped[str | None] = mapped_column(Text)
    run_owner: Mapped[str | None] = mapped_column(Text)
    run_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    next_message_idx: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    context_base_idx: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    context_summary: Mapped[str | None] = mapped_column(Text)
    scheduled_job_id: Mapped[UUID | None] = mapped_column(
        Uuid,
        ForeignKey(
            "scheduled_jobs.job_id", ondelete="SET NULL", name="fk_conversations_scheduled_job_id", use_alter=True
        ),
    )
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, default=utcnow, onupdate=utcnow
    )
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint(
            "run_status IN ('idle','running','cancelling','error','cancelled')", name="ck_conversations_run_status"
        ),
        CheckConstraint("title_source IN ('auto','manual','fixed')", name="ck_conversations_title_source"),
        Index(
            "ix_conversations_scope_active_updated",
            "scope_id",
            "updated_at",
            "conversation_id",
            postgresql_where=text("deleted_at IS NULL AND scheduled_job_id IS NULL"),
        ),
        Index(  # retention of schedule-run conversations (migration 0019)
            "ix_conversations_scheduled_updated",
            "updated_at",
            postgresql_where=text("scheduled_job_id IS NOT NULL"),
        ),
        Index(
            "ix_conversations_active_runs",
            "run_status",
            postgresql_where=text("run_status IN ('running','cancelling')"),
        ),
    )


class Message(Base):
    """One message of a conversation: ``idx`` 0, 1, … allocated under the conversation's row lock;
    ``payload`` in the provider's shape (NUL removed); ``artifact_refs`` the memes it delivers."""

    __tablename__ = "messages"
    message_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    conversation_id: Mapped[UUID] = mapped_column(
        Uuid, ForeignKey("conversations.conversation_id", ondelete="CASCADE"), nullable=False
    )
    idx: Mapped[int] = mapped_column(Integer, nullable=False)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    artifact_refs: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONB)
    tokens_in: Mapped[int | None] = mapped_column(Integer)
    tokens_out: Mapped[int | None] = mapped_column(Integer)
    model_profile: Mapped[str | None] = mapped_column(Text)
    kind: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)

    __table_args__ = (
        UniqueConstraint("conversation_id", "idx", name="uq_messages_conversation_idx"),
        Index("ix_messages_payload_gin", "payload", postgresql_using="gin"),
    )

    @validates("payload", "artifact_refs")
    def _sanitize_nul(self, _key: str, value: Any) -> Any:
        return sanitize_jsonb_nul(value)


class Artifact(Base):
    """Stable identity of something a conversation delivered or produced (``kind`` ``meme_pick``:
    ``meme_id``; ``package``: ``current_path``), with trash and restore (``status`` active|trashed)."""

    __tablename__ = "artifacts"
    artifact_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    scope_id: Mapped[str] = mapped_column(String(128), ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False)
    user_id: Mapped[UUID | None] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="SET NULL"))
    origin_conversation_id: Mapped[UUID | None] = mapped_column(
        Uuid, ForeignKey("conversations.conversation_id", ondelete="SET NULL")
    )
    copied_from_artifact_id: Mapped[UUID | None] = mapped_column(
        Uuid, ForeignKey("artifacts.artifact_id", ondelete="SET NULL")
    )
    kind: Mapped[str] = mapped_column(Text, nullable=False, default="meme_pick", server_default="meme_pick")
    meme_id: Mapped[UUID | None] = mapped_column(Uuid, ForeignKey("memes.id", ondelete="SET NULL"))
    current_path: Mapped[str | None] = mapped_column(Text)
    label: Mapped[str] = mapped_column(Text, nullable=False, default="", server_default="")
    media_type: Mapped[str | None] = mapped_column(Text)
    size_bytes: Mapped[int | None] = mapped_column(BigInteger)
    content_sha256: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text, nullable=False, default="active", server_default="active")
    trash_path: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, default=utcnow, onupdate=utcnow
    )
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint("status IN ('active','trashed')", name="ck_artifacts_status"),
        Index("ix_artifacts_scope_status", "scope_id", "status"),
        Index("ix_artifacts_origin_conversation", "origin_conversation_id"),
        # a deleted meme's references are found, not scanned for (ON DELETE SET NULL; migration 0031)
        Index("ix_artifacts_meme", "meme_id", postgresql_where=text("meme_id IS NOT NULL")),
    )
