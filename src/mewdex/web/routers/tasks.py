"""Tasks, batches and processing jobs: ``/api/v1/tasks``, ``/api/v1/batches``, ``/api/v1/processing``.

Errors: 404 ``not_found`` (also for another scope's ids), 409 ``task_not_retryable`` /
``task_not_cancellable`` / ``task_active``, 422 ``invalid_cursor`` / ``invalid_request``, 429
``queue_full`` with ``Retry-After`` (interactive retries and re-submits; see queue.backpressure).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session

from mewdex.dto.scopes import ScopeContext
from mewdex.dto.tasks import (
    Batch,
    JobDetail,
    JobPage,
    ProcessingRequest,
    ProcessingResponse,
    TaskDetail,
    TaskPage,
)
from mewdex.pipeline import processing
from mewdex.queue import service
from mewdex.web.deps import current_scope, db_session, parse_id
from mewdex.web.errors import ApiError

router = APIRouter(tags=["tasks"])


@router.get("/api/v1/tasks", response_model=TaskPage)
def list_tasks(
    status: Literal["queued", "running", "succeeded", "failed"] | None = None,
    type: str | None = Query(default=None, max_length=128),
    stage: Literal["visual", "agent", "auto_rename", "text_embedding"] | None = None,
    batch: str | None = Query(default=None, max_length=255),
    lane: str | None = Query(default=None, max_length=64),
    cursor: str | None = Query(None, description="``next_cursor`` of the previous page"),
    limit: int = Query(default=50, ge=1, le=200),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """``{"items": [task], "next_cursor"}`` newest first; pass ``next_cursor`` back as ``cursor``."""
    return service.list_tasks(
        session,
        scope,
        status=status,
        task_type=type,
        stage=stage,
        batch_id=batch,
        lane=lane,
        cursor=cursor,
        limit=limit,
    )


@router.get("/api/v1/tasks/{task_id}", response_model=TaskDetail)
def read_task(task_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    """The task with ``attempt_history`` (one row per execution), ``error_history`` and ``first_error``."""
    return service.task_detail(session, scope, task_id)


@router.post("/api/v1/tasks/{task_id}/retry", response_model=TaskDetail)
def retry_task(task_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    """Queue a failed task again (resumes an ``unknown_execution`` one); 409 unless failed; 429 ``queue_full``."""
    service.retry(session, scope, task_id)
    session.flush()
    return service.task_detail(session, scope, task_id)


@router.post("/api/v1/tasks/{task_id}/cancel", response_model=TaskDetail)
def cancel_task(task_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    """Cancel a queued or running task (it fails with ``cancelled``); 409 when it already ended."""
    service.cancel(session, scope, task_id)
    session.flush()
    return service.task_detail(session, scope, task_id)


@router.get("/api/v1/batches/{batch_id}", response_model=Batch)
def read_batch(batch_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    """``{"id", "state", "sealed", "summary", "progress", ...}``; ``summary`` is written once, when the last task
    ends."""
    return service.batch_detail(session, scope, batch_id)


@router.get("/api/v1/processing/jobs", response_model=JobPage)
def list_jobs(
    status: Literal["queued", "running", "succeeded", "failed", "blocked", "unknown_execution"] | None = None,
    meme: str | None = Query(default=None, max_length=64),
    cursor: str | None = Query(None, description="``next_cursor`` of the previous page"),
    limit: int = Query(default=50, ge=1, le=200),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """``{"items": [job], "next_cursor"}`` newest first."""
    meme_id = parse_id(meme) if meme else None
    return processing.list_jobs(session, scope, status=status, meme_id=meme_id, cursor=cursor, limit=limit)


@router.get("/api/v1/processing/jobs/{job_id}", response_model=JobDetail)
def read_job(job_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    """The job with its stages (planned or skipped and why) and its tasks."""
    return processing.job_detail(session, scope, parse_id(job_id, "job"))


@router.post("/api/v1/processing", status_code=202, response_model=ProcessingResponse)
def submit_processing(
    body: ProcessingRequest, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
):
    """Re-submit selected memes or all not-ready ones: ``{"jobs", "skipped", "batch_id"}``.

    ≤ 20 selected memes: 429 ``queue_full`` when the agent lane is at its limit; more, or
    ``all_not_ready``, become a batch (``GET /api/v1/batches/{batch_id}``) that is never rejected."""
    if not body.all_not_ready and not body.meme_ids:
        raise ApiError(422, "invalid_request", "give meme_ids or all_not_ready")
    meme_ids = [parse_id(i) for i in body.meme_ids]
    return processing.submit(session, scope, meme_ids=meme_ids, all_not_ready=body.all_not_ready, mode=body.mode)
