"""Scheduled jobs (seed 004 ``scheduled_jobs``) and their runs (issue 18).

A job belongs to a scope (its owner's; ``user_id`` is None for the local no-login scope, as for
conversations). ``bound_task_id`` is the conversation a ``persistent`` job writes to (seed 004 names
it after its ``tasks`` table, our ``conversations``). Beyond the seed: ``max_runs``,
``cost_cap_cny``, ``disabled_reason``/``disabled_at`` (why the job stopped: failures, expiry, the
maximum number of runs, the cost cap), ``updated_at``. A run row is unique on ``(job_id, slot)``:
one scheduled instant runs at most once, however many processes dispatch.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from sqlalchemy import (
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
from sqlalchemy.orm import Mapped, mapped_column

from mewdex.db.models.base import Base, utcnow

JOB_MODES = ("isolated", "persistent")
JOB_LAST_STATUSES = ("ok", "error", "skipped")
RUN_STATUSES = ("queued", "running", "ok", "error", "skipped")
DELIVERY_STATUSES = ("none", "queued", "succeeded", "failed", "unknown")


class ScheduledJob(Base):
    """A cron job: when (``cron`` in ``tz``), what (``prompt``), where (``mode``, ``notify``), its state."""

    __tablename__ = "scheduled_jobs"
    job_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    scope_id: Mapped[str] = mapped_column(String(128), ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False)
    user_id: Mapped[UUID | None] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(Text, nullable=False)
    prompt: Mapped[str] = mapped_column(Text, nullable=False)
    cron: Mapped[str] = mapped_column(Text, nullable=False)
    tz: Mapped[str] = mapped_column(Text, nullable=False, default="Asia/Shanghai", server_default="Asia/Shanghai")
    mode: Mapped[str] = mapped_column(Text, nullable=False, default="isolated", server_default="isolated")
    bound_task_id: Mapped[UUID | None] = mapped_column(
        Uuid, ForeignKey("conversations.conversation_id", ondelete="SET NULL")
    )
    skill: Mapped[str] = mapped_column(Text, nullable=False, default="", server_default="")
    model_profile: Mapped[str] = mapped_column(Text, nullable=False, default="", server_default="")
    notify: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True, server_default=text("true"))
    timeout_seconds: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    next_run_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    last_run_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_status: Mapped[str | None] = mapped_column(Text)
    last_error: Mapped[str | None] = mapped_column(Text)
    last_task_id: Mapped[str | None] = mapped_column(Text)
    consecutive_failures: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    run_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    max_runs: Mapped[int | None] = mapped_column(Integer)
    cost_cap_cny: Mapped[Decimal | None] = mapped_column(Numeric(12, 6))
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, default=utcnow, onupdate=utcnow
    )
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint("mode IN ('isolated','persistent')", name="ck_scheduled_jobs_mode"),
        CheckConstraint(
            "last_status IS NULL OR last_status IN ('ok','error','skipped')", name="ck_scheduled_jobs_last_status"
        ),
        CheckConstraint("timeout_seconds >= 0", name="ck_scheduled_jobs_timeout"),
        Index(
            "ix_scheduled_jobs_due_active",
            "next_run_at",
            postgresql_where=text("enabled IS TRUE AND deleted_at IS NULL"),
        ),
        Index(
            "ix_scheduled_jobs_scope_active_created",
            "scope_id",
            "created_at",
            postgresql_where=text("deleted_at IS NULL"),
        ),
    )


class ScheduledJobRun(Base):
    """One slot of a job: ``queued`` → ``running`` → ``ok``/``error``, or ``skipped`` (``reason``:
    missed during downtime, paused, cost cap, …). ``coalesced`` counts the missed slots this run
    stands for. ``delivery_status`` is kept apart from ``status``: ``none`` (no ``notify``),
    ``queued`` (handed to a channel's delivery log), ``succeeded`` (the webhook answered 2xx),
    ``failed``, ``unknown`` (the worker died while sending: never resent)."""

    __tablename__ = "scheduled_job_runs"
    run_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    job_id: Mapped[UUID] = mapped_column(Uuid, ForeignKey("scheduled_jobs.job_id", ondelete="CASCADE"), nullable=False)
    scope_id: Mapped[str] = mapped_column(String(128), ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False)
    slot: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    status: Mapped[str] = mapped_column(Text, nullable=False, default="queued", server_default="queued")
    reason: Mapped[str | None] = mapped_column(Text)
    coalesced: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    task_id: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    conversation_id: Mapped[UUID | None] = mapped_column(
        Uuid, ForeignKey("conversations.conversation_id", ondelete="SET NULL")
    )
    meme_id: Mapped[UUID | None] = mapped_column(Uuid)
    delivery_status: Mapped[str] = mapped_column(Text, nullable=False, default="none", server_default="none")
    delivery_detail: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    error_code: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    cost_cny: Mapped[Decimal] = mapped_column(Numeric(12, 6), nullable=False, default=0, server_default="0")
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)

    __table_args__ = (
        UniqueConstraint("job_id", "slot", name="uq_scheduled_job_runs_job_slot"),
        CheckConstraint("status IN ('queued','running','ok','error','skipped')", name="ck_scheduled_job_runs_status"),
        CheckConstraint(
            "delivery_status IN ('none','queued','succeeded','failed','unknown')", name="ck_scheduled_job_runs_delivery"
        ),
        Index("ix_scheduled_job_runs_scope_created", "scope_id", "created_at"),
    )
