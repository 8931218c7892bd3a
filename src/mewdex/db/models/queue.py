"""Durable task queue tables: tasks, their attempts, batches, lane slots and lane fairness (seed 000).
They hold what the queue knows of any task; a task type keeps what only it knows in tables of its own."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    Numeric,
    String,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mewdex.db.models.base import GLOBAL_LANE_RESOURCE_KEY, Base, created_at, updated_at, utcnow

#: The termination reasons and signals a task or an attempt records (SQL lists of seed 000's values).
TERMINATION_REASONS = "('analysis_cost_limit','unknown_execution','timeout','cancelled','process_failed')"
TERMINATION_SIGNALS = "('SIGTERM','SIGKILL','already_exited')"
#: The states of an attempt (:class:`TaskAttempt`).
ATTEMPT_STATES = ("prepared", "external_started", "completed", "failed", "unknown_execution")


class Task(Base):
    """A unit of queued work: status, dedupe key, lease, fencing generation, retries. What a task type
    alone knows of its tasks lives in its own tables, keyed by the task (none of it here)."""

    __tablename__ = "tasks"
    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    scope_id: Mapped[str] = mapped_column(String(128), nullable=False)
    task_type: Mapped[str] = mapped_column(String(128), nullable=False)
    submission_mode: Mapped[str | None] = mapped_column(String(16))
    lane: Mapped[str] = mapped_column(String(64), nullable=False, default="default")
    lane_resource_key: Mapped[str] = mapped_column(
        String(128), nullable=False, default=GLOBAL_LANE_RESOURCE_KEY, server_default=text("'__global__'")
    )
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, default=dict)
    dedupe_key: Mapped[str | None] = mapped_column(String(1024))
    status: Mapped[str] = mapped_column(String(32), nullable=False, default="queued")
    progress: Mapped[float | None] = mapped_column(Float, default=0.0)
    message: Mapped[str | None] = mapped_column(String(500))
    result: Mapped[Any | None] = mapped_column(JSONB)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    resume_available: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False, server_default=text("false"))
    analysis_policy: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    observed_cost: Mapped[Decimal | None] = mapped_column(Numeric(20, 8))
    usage_checked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    reminder_sent: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False, server_default=text("false"))
    termination_reason: Mapped[str | None] = mapped_column(String(64))
    termination_signal: Mapped[str | None] = mapped_column(String(16))
    resume_reason: Mapped[str | None] = mapped_column(String(64))
    resume_session_id: Mapped[str | None] = mapped_column(String(255))
    executor_attempt_id: Mapped[str | None] = mapped_column(String(255))
    workspace_selector: Mapped[str | None] = mapped_column(String(128))
    resume_attempt_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default=text("0"))
    resume_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    first_error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    error_history: Mapped[list[dict[str, Any]]] = mapped_column(
        JSONB, nullable=False, default=list, server_default=text("'[]'::jsonb")
    )
    settings_version: Mapped[str | None] = mapped_column(String(128))
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    claim_generation: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    attempt_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=3)
    available_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)
    created_at: Mapped[datetime] = created_at()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (
        ForeignKeyConstraint(["scope_id"], ["scopes.id"], ondelete="CASCADE"),
        CheckConstraint("status IN ('queued','running','succeeded','failed')", name="ck_task_status"),
        CheckConstraint("attempt_count >= 0 AND max_attempts > 0", name="ck_task_attempts"),
        CheckConstraint(
            "submission_mode IS NULL OR submission_mode IN ('pipeline','standalone')", name="ck_task_submission_mode"
        ),
        CheckConstraint("length(lane_resource_key) > 0", name="ck_task_lane_resource_key"),
        CheckConstraint("observed_cost IS NULL OR observed_cost >= 0", name="ck_task_observed_cost"),
        CheckConstraint(
            f"termination_reason IS NULL OR termination_reason IN {TERMINATION_REASONS}",
            name="ck_task_termination_reason",
        ),
        CheckConstraint(
            f"termination_signal IS NULL OR termination_signal IN {TERMINATION_SIGNALS}",
            name="ck_task_termination_signal",
        ),
        UniqueConstraint("scope_id", "id", name="uq_task_scope_id"),
        Index(
            "ix_tasks_active_dedupe",
            "scope_id",
            "task_type",
            "dedupe_key",
            unique=True,
            postgresql_where=text("status IN ('queued','running') AND dedupe_key IS NOT NULL"),
        ),
        # The scheduler's slot lookup and prune (queue.scheduler): standalone tasks by type and key,
        # whatever their status, without reading the pipeline's tasks.
        # Retention (oldest finished first) and /metrics' last five minutes (migration 0019).
        Index(
            "ix_tasks_finished_completed",
            "completed_at",
            postgresql_where=text("status IN ('succeeded','failed')"),
        ),
        Index(
            "ix_tasks_standalone_dedupe",
            "scope_id",
            "task_type",
            "dedupe_key",
            postgresql_where=text("submission_mode = 'standalone'"),
        ),
        Index("ix_tasks_claimable", "scope_id", "status", "available_at", "lease_expires_at"),
        Index("ix_tasks_lane_queue", "lane", "status", "available_at"),
        Index(
            "ix_tasks_lane_claim",
            "scope_id",
            "lane",
            "lane_resource_key",
            "available_at",
            "created_at",
            postgresql_where=text("status = 'queued'"),
        ),
        Index("ix_tasks_running_lease", "lease_expires_at", postgresql_where=text("status = 'running'")),
    )


class TaskAttempt(Base):
    """One execution of a task, whatever its type: written by the claim (``prepared``, with the claim's
    generation and lease owner), ``external_started`` before a non-idempotent external call, and ended
    ``completed``, ``failed`` or ``unknown_execution`` (a worker that died after its external call
    started; ``resume_available``) with ``finished_at``."""

    __tablename__ = "task_attempts"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[str] = mapped_column(String(255), nullable=False)
    state: Mapped[str] = mapped_column(String(32), nullable=False, default="prepared")
    claim_generation: Mapped[int] = mapped_column(BigInteger, nullable=False)
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    executor_attempt_id: Mapped[str | None] = mapped_column(String(255))
    resume_of_attempt_id: Mapped[str | None] = mapped_column(String(255))
    observed_cost: Mapped[Decimal | None] = mapped_column(Numeric(20, 8))
    usage_checked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    termination_reason: Mapped[str | None] = mapped_column(String(64))
    termination_signal: Mapped[str | None] = mapped_column(String(16))
    resume_available: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False, server_default=text("false"))
    resume_reason: Mapped[str | None] = mapped_column(String(64))
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = created_at()
    updated_at: Mapped[datetime] = updated_at()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        ForeignKeyConstraint(["scope_id", "task_id"], ["tasks.scope_id", "tasks.id"], ondelete="CASCADE"),
        UniqueConstraint("attempt_id", name="uq_task_attempts_attempt_id"),
        CheckConstraint(f"state IN {ATTEMPT_STATES!r}".replace('"', "'"), name="ck_task_attempt_state"),
        CheckConstraint("attempt > 0", name="ck_task_attempt_number"),
        CheckConstraint("observed_cost IS NULL OR observed_cost >= 0", name="ck_task_attempt_observed_cost"),
        CheckConstraint(
            f"termination_reason IS NULL OR termination_reason IN {TERMINATION_REASONS}",
            name="ck_task_attempt_termination_reason",
        ),
        CheckConstraint(
            f"termination_signal IS NULL OR termination_signal IN {TERMINATION_SIGNALS}",
            name="ck_task_attempt_termination_signal",
        ),
        Index(
            "uq_task_attempt_executor_id",
            "executor_attempt_id",
            unique=True,
            postgresql_where=text("executor_attempt_id IS NOT NULL"),
        ),
    )


class TaskBatch(Base):
    """A batch of tasks with its one-time completion summary."""

    __tablename__ = "task_batches"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    batch_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    finalizer_state: Mapped[str] = mapped_column(String(32), nullable=False, default="pending")
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    sealed: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    created_at: Mapped[datetime] = created_at()
    finalized_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        ForeignKeyConstraint(["scope_id"], ["scopes.id"], ondelete="CASCADE"),
        CheckConstraint("finalizer_state IN ('pending','submitted','complete')", name="ck_batch_finalizer_state"),
    )


class TaskBatchItem(Base):
    """Scope-safe link from a batch to one of its tasks."""

    __tablename__ = "task_batch_items"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    batch_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(255), primary_key=True)

    __table_args__ = (
        ForeignKeyConstraint(
            ["scope_id", "batch_id"], ["task_batches.scope_id", "task_batches.batch_id"], ondelete="CASCADE"
        ),
        ForeignKeyConstraint(["scope_id", "task_id"], ["tasks.scope_id", "tasks.id"], ondelete="CASCADE"),
        Index("ix_task_batch_items_task", "scope_id", "task_id"),
    )


class TaskLaneSlot(Base):
    """One of a lane's global concurrency slots and the lease of the task holding it."""

    __tablename__ = "task_lane_slots"
    lane: Mapped[str] = mapped_column(String(64), primary_key=True)
    slot_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_scope_id: Mapped[str | None] = mapped_column(String(128))
    task_id: Mapped[str | None] = mapped_column(String(255))
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    claim_generation: Mapped[int | None] = mapped_column(BigInteger)
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        ForeignKeyConstraint(["task_scope_id"], ["scopes.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(["task_scope_id", "task_id"], ["tasks.scope_id", "tasks.id"]),
        UniqueConstraint("task_scope_id", "task_id", name="uq_task_lane_slot_task"),
        CheckConstraint("slot_number >= 0", name="ck_slot_number"),
    )


class TaskLaneResourceSlot(Base):
    """A lane slot for one opaque resource key (e.g. a model), held together with a lane slot."""

    __tablename__ = "task_lane_resource_slots"
    lane: Mapped[str] = mapped_column(String(64), primary_key=True)
    resource_key: Mapped[str] = mapped_column(String(128), primary_key=True)
    slot_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_scope_id: Mapped[str | None] = mapped_column(String(128))
    task_id: Mapped[str | None] = mapped_column(String(255))
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    claim_generation: Mapped[int | None] = mapped_column(BigInteger)
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        ForeignKeyConstraint(["task_scope_id"], ["scopes.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(["task_scope_id", "task_id"], ["tasks.scope_id", "tasks.id"]),
        UniqueConstraint("task_scope_id", "task_id", name="uq_task_lane_resource_slot_task"),
        CheckConstraint("slot_number >= 0", name="ck_resource_slot_number"),
        CheckConstraint("length(resource_key) > 0", name="ck_task_lane_resource_key_value"),
        Index("ix_task_lane_resource_slot_dispatch", "lane", "resource_key", "slot_number"),
    )


class TaskLaneFairness(Base):
    """Per lane, resource and scope: the sequence of its last dispatch (round-robin state)."""

    __tablename__ = "task_lane_fairness"
    lane: Mapped[str] = mapped_column(String(64), primary_key=True)
    resource_key: Mapped[str] = mapped_column(
        String(128), primary_key=True, default=GLOBAL_LANE_RESOURCE_KEY, server_default=text("'__global__'")
    )
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    last_dispatch_sequence: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0, server_default=text("0"))
    created_at: Mapped[datetime] = created_at()
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (
        ForeignKeyConstraint(["scope_id"], ["scopes.id"], ondelete="CASCADE"),
        CheckConstraint("last_dispatch_sequence >= 0", name="ck_task_lane_fairness_sequence"),
        CheckConstraint("length(resource_key) > 0", name="ck_task_lane_fairness_resource_key"),
        Index("ix_task_lane_fairness_dispatch", "lane", "resource_key", "last_dispatch_sequence", "scope_id"),
    )
