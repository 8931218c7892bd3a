"""Per-image processing control plane (seed 000): jobs, stages, attempts, grants, audit rows."""

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
    ForeignKeyConstraint,
    Index,
    Integer,
    Numeric,
    String,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mewdex.db.models.base import Base, created_at, updated_at, utcnow
from mewdex.db.models.queue import TERMINATION_REASONS, TERMINATION_SIGNALS

STAGES = ("visual", "agent", "auto_rename", "text_embedding")


#: The image stages' task types (stored names, by stage).
IMAGE_STAGE_TASK_TYPES = {
    "visual": "visual_embedding_generation",
    "agent": "meme_context_generation",
    "auto_rename": "image_auto_rename",
    "text_embedding": "text_embedding_generation",
}


class ImageStageTask(Base):
    """The image-stage side of a queued task (seed 000 gave these columns to ``tasks``; the queue's
    table holds none of them): which stage of which job on which image revision. One row per
    image-stage task, written by ``pipeline.jobs`` with the task and read by the stages' hooks.

    Deleting the row deletes its task (trigger ``trg_image_stage_tasks_delete_task``, migration
    0030), so a deleted meme or job takes its tasks with it, as the seed's foreign keys on ``tasks``
    did; deleting the task deletes the row (its foreign key)."""

    __tablename__ = "image_stage_tasks"
    task_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    scope_id: Mapped[str] = mapped_column(String(128), nullable=False)
    image_stage: Mapped[str] = mapped_column(String(32), nullable=False)
    processing_job_id: Mapped[UUID | None] = mapped_column(Uuid)
    target_meme_id: Mapped[UUID | None] = mapped_column(Uuid)
    target_image_sha256: Mapped[str | None] = mapped_column(String(64))
    visual_match_snapshot: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    visual_snapshot_sha256: Mapped[str | None] = mapped_column(String(64))
    visual_snapshot_protocol_version: Mapped[int | None] = mapped_column(Integer)
    visual_snapshot_matched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    visual_snapshot_candidate_count: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (
        ForeignKeyConstraint(["scope_id", "task_id"], ["tasks.scope_id", "tasks.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(
            ["scope_id", "processing_job_id"],
            ["image_processing_jobs.scope_id", "image_processing_jobs.id"],
            ondelete="CASCADE",
        ),
        ForeignKeyConstraint(["scope_id", "target_meme_id"], ["memes.scope_id", "memes.id"], ondelete="CASCADE"),
        CheckConstraint(f"image_stage IN {STAGES!r}".replace('"', "'"), name="ck_image_stage_task_stage"),
        CheckConstraint(
            "target_image_sha256 IS NULL OR length(target_image_sha256) = 64",
            name="ck_image_stage_task_target_image_sha256",
        ),
        CheckConstraint(
            "visual_snapshot_sha256 IS NULL OR length(visual_snapshot_sha256) = 64",
            name="ck_image_stage_task_visual_snapshot_sha256",
        ),
        CheckConstraint(
            "visual_snapshot_protocol_version IS NULL OR visual_snapshot_protocol_version > 0",
            name="ck_image_stage_task_visual_snapshot_protocol_version",
        ),
        CheckConstraint(
            "visual_snapshot_candidate_count IS NULL OR visual_snapshot_candidate_count >= 0",
            name="ck_image_stage_task_visual_snapshot_candidate_count",
        ),
        # A job's tasks by stage (and the job's cascade); a meme's tasks by image revision (and its cascade).
        Index("ix_image_stage_tasks_job", "scope_id", "processing_job_id", "image_stage"),
        Index("ix_image_stage_tasks_target", "scope_id", "target_meme_id", "target_image_sha256"),
    )


class ImageProcessingJob(Base):
    """One image revision's processing run, with its frozen configuration and options."""

    __tablename__ = "image_processing_jobs"
    id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    scope_id: Mapped[str] = mapped_column(String(128), nullable=False)
    meme_id: Mapped[UUID] = mapped_column(Uuid, nullable=False)
    revision: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    image_sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    metadata_hash: Mapped[str | None] = mapped_column(String(64))
    processing_config_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    processing_config: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, default=dict)
    telemetry_context: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    reverse_image_policy: Mapped[str] = mapped_column(String(16), nullable=False, default="forbid")
    auto_name: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False, server_default=text("false"))
    processing_mode: Mapped[str] = mapped_column(String(16), nullable=False, server_default=text("'normal'"))
    status: Mapped[str] = mapped_column(String(32), nullable=False, default="queued")
    current_stage: Mapped[str | None] = mapped_column(String(64))
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    retry_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    claim_generation: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    created_at: Mapped[datetime] = created_at()
    updated_at: Mapped[datetime] = updated_at()
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        ForeignKeyConstraint(["scope_id"], ["scopes.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(["scope_id", "meme_id"], ["memes.scope_id", "memes.id"], ondelete="CASCADE"),
        UniqueConstraint("scope_id", "id", name="uq_image_processing_jobs_scope_id"),
        UniqueConstraint("scope_id", "meme_id", "image_sha256", "revision", name="uq_image_processing_jobs_revision"),
        CheckConstraint("reverse_image_policy IN ('forbid','auto')", name="ck_image_processing_policy"),
        CheckConstraint("processing_mode IN ('normal','full_retry','repair')", name="ck_image_processing_mode"),
        CheckConstraint(
            "status IN ('queued','running','succeeded','failed','blocked','unknown_execution')",
            name="ck_image_processing_status",
        ),
        CheckConstraint("claim_generation >= 0", name="ck_image_processing_generation"),
        Index("ix_image_processing_jobs_active", "scope_id", "meme_id", "image_sha256", "status"),
    )


class ImageProcessingStage(Base):
    """A stage of a job (visual, agent, auto_rename, text_embedding): planned or skipped, and its state."""

    __tablename__ = "image_processing_stages"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    job_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True)
    stage: Mapped[str] = mapped_column(String(64), primary_key=True)
    status: Mapped[str] = mapped_column(String(32), nullable=False, default="queued")
    planned: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True, server_default=text("true"))
    skip_reason: Mapped[str | None] = mapped_column(String(32))
    task_id: Mapped[str | None] = mapped_column(String(255))
    attempt_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    retry_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (
        ForeignKeyConstraint(
            ["scope_id", "job_id"], ["image_processing_jobs.scope_id", "image_processing_jobs.id"], ondelete="CASCADE"
        ),
        # scope_id is part of the primary key, so a deleted task cascades instead of SET NULL.
        ForeignKeyConstraint(["scope_id", "task_id"], ["tasks.scope_id", "tasks.id"], ondelete="CASCADE"),
        CheckConstraint(f"stage IN {STAGES!r}".replace('"', "'"), name="ck_image_processing_stage_name"),
        CheckConstraint(
            "status IN ('queued','running','succeeded','failed','blocked','unknown_execution','skipped','warning')",
            name="ck_image_processing_stage_status",
        ),
        CheckConstraint(
            "(planned AND skip_reason IS NULL) OR (NOT planned AND skip_reason IN ('already_ready','disabled'))",
            name="ck_image_processing_stage_plan",
        ),
        CheckConstraint(
            "(planned AND status <> 'skipped') OR (NOT planned AND status = 'skipped')",
            name="ck_image_processing_stage_plan_status",
        ),
        Index("ix_image_processing_stages_task", "scope_id", "task_id"),
    )


class ImageProcessingAttempt(Base):
    """One execution of an image-stage task as the pipeline records it: its stage, input digest,
    target sha256, configuration hash and the fencing generation (written by the stages' claim hook;
    the end of the attempt is copied from the queue's ``task_attempts`` row)."""

    __tablename__ = "image_processing_attempts"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[str] = mapped_column(String(255), unique=True, nullable=False)
    stage: Mapped[str] = mapped_column(String(64), nullable=False)
    state: Mapped[str] = mapped_column(String(32), nullable=False, default="prepared")
    request_id: Mapped[str | None] = mapped_column(String(255))
    session_id: Mapped[str | None] = mapped_column(String(255))
    executor_attempt_id: Mapped[str | None] = mapped_column(String(255))
    resume_of_attempt_id: Mapped[str | None] = mapped_column(String(255))
    workspace_selector: Mapped[str | None] = mapped_column(String(128))
    processing_config_hash: Mapped[str | None] = mapped_column(String(64))
    analysis_policy: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    observed_cost: Mapped[Decimal | None] = mapped_column(Numeric(20, 8))
    usage_checked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    reminder_sent: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False, server_default=text("false"))
    termination_reason: Mapped[str | None] = mapped_column(String(64))
    termination_signal: Mapped[str | None] = mapped_column(String(16))
    process_reaped: Mapped[bool | None] = mapped_column(Boolean)
    analysis_diagnostic: Mapped[dict[str, Any] | None] = mapped_column(JSONB(none_as_null=True))
    resume_available: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False, server_default=text("false"))
    resume_reason: Mapped[str | None] = mapped_column(String(64))
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    input_digest: Mapped[str] = mapped_column(String(64), nullable=False)
    target_sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    claim_generation: Mapped[int] = mapped_column(BigInteger, nullable=False)
    visual_snapshot_sha256: Mapped[str | None] = mapped_column(String(64))
    visual_snapshot_protocol_version: Mapped[int | None] = mapped_column(Integer)
    visual_snapshot_matched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    visual_snapshot_candidate_count: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = created_at()
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (
        ForeignKeyConstraint(["scope_id", "task_id"], ["tasks.scope_id", "tasks.id"], ondelete="CASCADE"),
        CheckConstraint(
            "state IN ('prepared','grant_committed','external_started','completed','failed','unknown_execution')",
            name="ck_image_processing_attempt_state",
        ),
        CheckConstraint(
            "visual_snapshot_sha256 IS NULL OR length(visual_snapshot_sha256) = 64",
            name="ck_attempt_visual_snapshot_sha256",
        ),
        CheckConstraint(
            "visual_snapshot_protocol_version IS NULL OR visual_snapshot_protocol_version > 0",
            name="ck_attempt_visual_snapshot_protocol_version",
        ),
        CheckConstraint(
            "visual_snapshot_candidate_count IS NULL OR visual_snapshot_candidate_count >= 0",
            name="ck_attempt_visual_snapshot_candidate_count",
        ),
        CheckConstraint("observed_cost IS NULL OR observed_cost >= 0", name="ck_attempt_observed_cost"),
        CheckConstraint(
            f"termination_reason IS NULL OR termination_reason IN {TERMINATION_REASONS}",
            name="ck_attempt_termination_reason",
        ),
        CheckConstraint(
            f"termination_signal IS NULL OR termination_signal IN {TERMINATION_SIGNALS}",
            name="ck_attempt_termination_signal",
        ),
        CheckConstraint(
            "analysis_diagnostic IS NULL OR analysis_diagnostic IN ("
            '\'{"check_stage":"analysis_monitor","trigger_reason":"agent_analysis_usage_unavailable"}\'::jsonb,'
            '\'{"check_stage":"analysis_monitor","trigger_reason":"agent_analysis_reminder_plugin_unavailable"}\'::jsonb,'
            '\'{"check_stage":"analysis_monitor","trigger_reason":"agent_maximum_analysis_depth_exceeded"}\'::jsonb)',
            name="ck_attempt_analysis_diagnostic",
        ),
        Index("ix_image_processing_attempts_task", "scope_id", "task_id", "attempt"),
        Index(
            "uq_image_processing_attempt_executor_id",
            "executor_attempt_id",
            unique=True,
            postgresql_where=text("executor_attempt_id IS NOT NULL"),
        ),
        Index("ix_image_processing_attempts_resume", "scope_id", "task_id", "resume_available", "updated_at"),
    )


class ImageNamingPool(Base):
    """Shared auto-naming capacity, round-robin cursor over scopes and next check time."""

    __tablename__ = "image_naming_pools"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    capacity: Mapped[int] = mapped_column(Integer, nullable=False, default=10)
    cursor_scope_id: Mapped[str | None] = mapped_column(String(128))
    next_check_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)

    __table_args__ = (CheckConstraint("capacity > 0", name="ck_image_naming_capacity"),)


class OperationGrant(Base):
    """A server-side grant reserved before a metered operation and committed or released after."""

    __tablename__ = "operation_grants"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    operation: Mapped[str] = mapped_column(String(128), primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(String(255), primary_key=True)
    grant_id: Mapped[str] = mapped_column(String(255), nullable=False, unique=True)
    task_id: Mapped[str | None] = mapped_column(String(255))
    resource_id: Mapped[str | None] = mapped_column(String(255))
    source: Mapped[str | None] = mapped_column(String(64))
    units: Mapped[int | None] = mapped_column(Integer)
    metering_units: Mapped[int | None] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(32), nullable=False, default="acquired")
    attempt_id: Mapped[str | None] = mapped_column(String(255))
    input_digest: Mapped[str | None] = mapped_column(String(64))
    request_fingerprint: Mapped[str | None] = mapped_column(String(64))
    retry_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = created_at()
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (
        ForeignKeyConstraint(["scope_id"], ["scopes.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(["scope_id", "task_id"], ["tasks.scope_id", "tasks.id"], ondelete="CASCADE"),
        CheckConstraint(
            "operation IN ('image.upload','analysis.agent','analysis.reverse_image_search','image.delete',"
            "'provider.chat','provider.embedding')",
            name="ck_operation_grant_operation",
        ),
        CheckConstraint("state IN ('acquired','committed','released','unknown')", name="ck_operation_grant_state"),
        CheckConstraint(
            "source IS NULL OR (length(source) > 0 AND length(source) <= 64)", name="ck_operation_grant_source"
        ),
        CheckConstraint("units IS NULL OR units > 0", name="ck_operation_grant_units"),
        CheckConstraint("metering_units IS NULL OR metering_units >= 0", name="ck_operation_grant_metering_units"),
        CheckConstraint(
            "request_fingerprint IS NULL OR length(request_fingerprint) = 64", name="ck_operation_grant_fingerprint"
        ),
        Index("ix_operation_grants_scope_task", "scope_id", "task_id"),
    )


class ReverseImageUsageEvent(Base):
    """Per-request audit row of a reverse image search (idempotent by ``request_id``)."""

    __tablename__ = "reverse_image_usage_events"
    id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    request_id: Mapped[str] = mapped_column(String(128), nullable=False, unique=True)
    scope_id: Mapped[str] = mapped_column(String(128), nullable=False)
    task_id: Mapped[str] = mapped_column(String(255), nullable=False)
    meme_id: Mapped[UUID | None] = mapped_column(Uuid)
    cache_key: Mapped[str] = mapped_column(String(128), nullable=False)
    cache_status: Mapped[str] = mapped_column(String(16), nullable=False)
    provider_called: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    provider: Mapped[str | None] = mapped_column(String(64))
    claim_generation: Mapped[int | None] = mapped_column(BigInteger)
    attempt: Mapped[int | None] = mapped_column(Integer)
    operation: Mapped[str | None] = mapped_column(String(128))
    target_sha256: Mapped[str | None] = mapped_column(String(64))
    input_digest: Mapped[str | None] = mapped_column(String(64))
    outcome: Mapped[str] = mapped_column(String(32), nullable=False, default="started")
    retryable: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = created_at()
    provider_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        ForeignKeyConstraint(["scope_id", "task_id"], ["tasks.scope_id", "tasks.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(["scope_id", "meme_id"], ["memes.scope_id", "memes.id"], ondelete="CASCADE"),
        CheckConstraint("cache_status IN ('hit','miss','refresh')", name="ck_reverse_usage_cache_status"),
        CheckConstraint(
            "outcome IN ('started','success','empty','failed','forbidden')", name="ck_reverse_usage_outcome"
        ),
        CheckConstraint(
            "provider_called = false OR provider_started_at IS NOT NULL", name="ck_reverse_usage_provider_started"
        ),
        CheckConstraint("claim_generation IS NULL OR claim_generation > 0", name="ck_reverse_usage_claim_generation"),
        CheckConstraint("attempt IS NULL OR attempt > 0", name="ck_reverse_usage_attempt"),
        CheckConstraint("target_sha256 IS NULL OR length(target_sha256) = 64", name="ck_reverse_usage_target_sha"),
        Index("ix_reverse_usage_scope_created", "scope_id", "created_at"),
        Index("ix_reverse_usage_scope_task", "scope_id", "task_id", "created_at"),
    )


class AgentCallbackRequest(Base):
    """Binding and idempotent result of an internal analyzer callback."""

    __tablename__ = "agent_callback_requests"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    request_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(255), nullable=False)
    claim_generation: Mapped[int] = mapped_column(BigInteger, nullable=False)
    attempt: Mapped[int] = mapped_column(Integer, nullable=False)
    operation: Mapped[str] = mapped_column(String(128), nullable=False)
    target_sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    input_digest: Mapped[str] = mapped_column(String(64), nullable=False)
    state: Mapped[str] = mapped_column(String(32), nullable=False, default="started")
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = created_at()
    updated_at: Mapped[datetime] = updated_at()
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        ForeignKeyConstraint(["scope_id"], ["scopes.id"], ondelete="CASCADE"),
        ForeignKeyConstraint(["scope_id", "task_id"], ["tasks.scope_id", "tasks.id"], ondelete="CASCADE"),
        CheckConstraint("claim_generation > 0", name="ck_agent_callback_request_generation"),
        CheckConstraint("attempt > 0", name="ck_agent_callback_request_attempt"),
        CheckConstraint("length(target_sha256) = 64", name="ck_agent_callback_request_target_sha"),
        CheckConstraint("length(input_digest) = 64", name="ck_agent_callback_request_input_digest"),
        CheckConstraint(
            "state IN ('started','completed','failed','unknown_execution')", name="ck_agent_callback_request_state"
        ),
        Index("ix_agent_callback_requests_scope_task", "scope_id", "task_id", "created_at"),
        UniqueConstraint(
            "scope_id",
            "task_id",
            "claim_generation",
            "attempt",
            "operation",
            "target_sha256",
            "input_digest",
            name="uq_agent_callback_requests_logical",
        ),
    )
