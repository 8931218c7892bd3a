"""Processing jobs for the API and the CLI: list, detail with stages and tasks, and (re-)submission of
selected memes or of every meme that is not ready, in mode ``normal``, ``full_retry`` or ``repair``."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.orm import Session

from mewdex.db.models import (
    ImageProcessingJob,
    ImageProcessingStage,
    ImageStageTask,
    Meme,
    ScopeContext,
    Task,
)
from mewdex.dto.cursor import decode_cursor, encode_cursor
from mewdex.dto.tasks import Job as JobDto
from mewdex.library import listing
from mewdex.pipeline import jobs
from mewdex.queue import backpressure, batches
from mewdex.queue.service import TaskNotFound, task_dicts

# Up to this many memes a submission is interactive (back-pressure applies); more, or "all not
# ready", become a batch that feeds the lanes as they drain (never rejected).
INTERACTIVE_MAX = 20
JOB_STATUSES = ("queued", "running", "succeeded", "failed", "blocked", "unknown_execution")


def job_dict(job: ImageProcessingJob) -> dict[str, Any]:
    """The public shape of a job (:class:`mewdex.dto.tasks.Job`)."""
    return JobDto(
        **{
            "id": str(job.id),
            "meme_id": str(job.meme_id),
            "revision": job.revision,
            "image_sha256": job.image_sha256,
            "mode": job.processing_mode,
            "status": job.status,
            "current_stage": job.current_stage,
            "error": job.error,
            "processing_config_hash": job.processing_config_hash,
            "created_at": job.created_at.isoformat(),
            "updated_at": job.updated_at.isoformat(),
            "completed_at": job.completed_at.isoformat() if job.completed_at else None,
        }
    ).model_dump()


def list_jobs(
    session: Session,
    scope: ScopeContext,
    *,
    status: str | None = None,
    meme_id: uuid.UUID | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> dict[str, Any]:
    """``{"items": [job], "next_cursor"}``, newest first. Raises :class:`~mewdex.dto.cursor.CursorInvalid`."""
    limit = max(1, min(200, limit))
    query = select(ImageProcessingJob).where(ImageProcessingJob.scope_id == scope.scope_id)
    if status:
        query = query.where(ImageProcessingJob.status == status)
    if meme_id:
        query = query.where(ImageProcessingJob.meme_id == meme_id)
    if cursor:
        created, job_id = decode_cursor(cursor, (datetime, uuid.UUID))
        query = query.where(
            or_(
                ImageProcessingJob.created_at < created,
                and_(ImageProcessingJob.created_at == created, ImageProcessingJob.id < job_id),
            )
        )
    rows = (
        session.execute(
            query.order_by(ImageProcessingJob.created_at.desc(), ImageProcessingJob.id.desc()).limit(limit + 1)
        )
        .scalars()
        .all()
    )
    items = rows[:limit]
    next_cursor = None
    if len(rows) > limit:
        next_cursor = encode_cursor([items[-1].created_at, items[-1].id])
    return {"items": [job_dict(j) for j in items], "next_cursor": next_cursor}


def job_detail(session: Session, scope: ScopeContext, job_id: uuid.UUID) -> dict[str, Any]:
    """The job with ``stages`` (planned/skipped, status, attempts, error, task) and ``tasks``."""
    job = session.execute(
        select(ImageProcessingJob).where(ImageProcessingJob.scope_id == scope.scope_id, ImageProcessingJob.id == job_id)
    ).scalar_one_or_none()
    if job is None:
        raise TaskNotFound("job not found")
    stages = (
        session.execute(
            select(ImageProcessingStage).where(
                ImageProcessingStage.scope_id == scope.scope_id, ImageProcessingStage.job_id == job.id
            )
        )
        .scalars()
        .all()
    )
    order = {s: i for i, s in enumerate(jobs.STAGES)}
    tasks = (
        session.execute(
            select(Task)
            .join(ImageStageTask, ImageStageTask.task_id == Task.id)
            .where(ImageStageTask.scope_id == scope.scope_id, ImageStageTask.processing_job_id == job.id)
            .order_by(Task.created_at)
        )
        .scalars()
        .all()
    )
    return {
        **job_dict(job),
        "processing_config": {k: v for k, v in job.processing_config.items() if k != "analysis_policy"},
        "stages": [
            {
                "stage": s.stage,
                "planned": s.planned,
                "skip_reason": s.skip_reason,
                "status": s.status,
                "attempts": s.attempt_count,
                "error": s.error,
                "task_id": s.task_id,
                "retry_at": s.retry_at.isoformat() if s.retry_at else None,
            }
            for s in sorted(stages, key=lambda s: order[s.stage])
        ],
        "tasks": task_dicts(session, tasks),
    }


def not_ready_memes(session: Session, scope: ScopeContext) -> list[Meme]:
    """Memes whose latest job did not succeed (or that have none)."""
    latest = (
        select(ImageProcessingJob.meme_id, ImageProcessingJob.status)
        .where(ImageProcessingJob.scope_id == scope.scope_id)
        .ext(distinct_on(ImageProcessingJob.meme_id))
        .order_by(ImageProcessingJob.meme_id, ImageProcessingJob.created_at.desc())
        .subquery()
    )
    return list(
        session.execute(
            select(Meme)
            .outerjoin(latest, latest.c.meme_id == Meme.id)
            .where(
                Meme.scope_id == scope.scope_id,
                listing.live(),  # the trash is not reprocessed
                or_(latest.c.status.is_(None), latest.c.status != "succeeded"),
            )
            .order_by(Meme.created_at)
        ).scalars()
    )


def submit(
    session: Session,
    scope: ScopeContext,
    *,
    meme_ids: list[uuid.UUID] | None = None,
    all_not_ready: bool = False,
    mode: str = "normal",
) -> dict[str, Any]:
    """Create a job per meme (skipping memes with an active job) in ``mode``.

    Returns ``{"jobs": [job id], "skipped": [{"meme_id", "reason"}], "batch_id": str | None}``. Up to
    ``INTERACTIVE_MAX`` selected memes are interactive: :class:`backpressure.QueueFull` when the
    scope's agent lane is at its limit. More, or ``all_not_ready``, become one sealed batch whose first
    tasks are parked and fed as the lanes drain. Unknown meme ids: :class:`TaskNotFound`;
    unknown mode: ``ValueError``.
    """
    if mode not in jobs.MODES:
        raise ValueError(f"mode must be one of {', '.join(jobs.MODES)}")
    if all_not_ready:
        memes = not_ready_memes(session, scope)
    else:
        wanted = list(dict.fromkeys(meme_ids or []))
        found = listing.memes_by_id(session, scope, wanted)
        missing = [str(i) for i in wanted if i not in found]
        if missing:
            raise TaskNotFound(f"memes not found: {', '.join(missing[:5])}")
        memes = [found[i] for i in wanted]
    bulk = all_not_ready or len(memes) > INTERACTIVE_MAX
    if not bulk and memes:
        backpressure.check(session, scope, "agent", adding=len(memes))
    batch_id = batches.create(session, scope.scope_id).batch_id if bulk else None
    created, skipped = [], []
    for meme in memes:
        if jobs.active_job(session, meme) is not None:
            skipped.append({"meme_id": str(meme.id), "reason": "job_active"})
            continue
        created.append(str(jobs.create_job(session, meme, mode=mode, batch_id=batch_id).id))
    if batch_id is not None:
        batches.seal(session, scope.scope_id, batch_id)
    return {"jobs": created, "skipped": skipped, "batch_id": batch_id}
