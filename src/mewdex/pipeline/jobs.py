"""Image processing jobs: one per meme revision, its planned/skipped stages, and the hand-off
from one stage's success to the next stage's task.

Stage order is fixed (visual → agent → auto_rename → text_embedding); a stage's task is created
only when the previous planned stage has succeeded.

Modes (``processing_mode``), over the stages this build enables (the others are skipped ``disabled``):

- ``normal``: stages before the first one whose output is not current are skipped ``already_ready``;
  that stage and every later one are planned (their inputs change);
- ``repair``: only the stages whose output is not current are planned, the ready ones skipped;
- ``full_retry``: every enabled stage is planned and runs again.
"""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from typing import Any

from sqlalchemy import exists, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import NoResultFound
from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.models import (
    IMAGE_STAGE_TASK_TYPES,
    STAGES,
    ImageProcessingJob,
    ImageProcessingStage,
    ImageStageTask,
    Meme,
    MemeEmbedding,
    MemeVisualEmbedding,
    Task,
    utcnow,
)
from mewdex.pipeline.base import STAGE_VERSIONS
from mewdex.queue import batches, registry
from mewdex.queue import tasks as queue

MODES = ("normal", "full_retry", "repair")
ACTIVE_JOB_STATUSES = ("queued", "running")

# Stages this build runs; the others are planned as skipped ("disabled"). auto_rename runs only for
# jobs with auto_name (see processing_config).
IMPLEMENTED_STAGES = ("visual", "agent", "auto_rename", "text_embedding")
STAGE_LANES = {"visual": "visual", "agent": "agent", "auto_rename": "default", "text_embedding": "embedding"}


def processing_config(auto_name: bool = False) -> dict[str, Any]:
    """The configuration frozen into a job at creation: stages, the models they use, and the
    ``analysis_policy`` (``max_cost_per_image``, ``max_cost_per_scope_day``; None = no limit)."""
    settings = get_settings()
    enabled = [s for s in IMPLEMENTED_STAGES if s != "auto_rename" or auto_name]
    return {
        "stages": enabled,
        "versions": {s: STAGE_VERSIONS[s] for s in enabled},
        "analysis_policy": {
            "max_cost_per_image": settings.analysis_max_cost_per_image,
            "max_cost_per_scope_day": settings.analysis_max_cost_per_scope_day,
        },
    }


#: The task columns an image stage's task sets besides the queue's (declared by its task type, set here);
#: the rest of what the pipeline knows of the task is its ``image_stage_tasks`` row.
STAGE_COLUMNS = ("analysis_policy",)

#: The cost budget of the image stages (the ``cost_budgets`` hook): the task's frozen ``analysis_policy``.
COST_BUDGET = "analysis_policy"


def analysis_budget(session: Session, task: Task) -> str | None:
    """Why the task is over its frozen ``analysis_policy`` (``max_cost_per_image`` against the task's
    ``observed_cost``; ``max_cost_per_scope_day`` against what its scope's tasks observed today), or
    None (within it, or no policy)."""
    policy = task.analysis_policy or {}
    cost = task.observed_cost or Decimal(0)
    per_image = policy.get("max_cost_per_image")
    if per_image is not None and cost > Decimal(str(per_image)):
        return f"observed cost {cost} is over the per-image limit {per_image}"
    per_day = policy.get("max_cost_per_scope_day")
    if per_day is not None:
        spent = session.execute(
            select(func.coalesce(func.sum(Task.observed_cost), 0)).where(
                Task.scope_id == task.scope_id,
                Task.updated_at >= func.date_trunc("day", func.now()),
            )
        ).scalar_one()
        if Decimal(spent or 0) > Decimal(str(per_day)):
            return f"the scope spent {spent} today, over its daily limit {per_day}"
    return None


registry.register_cost_budget(COST_BUDGET, analysis_budget)


def ready_stages(session: Session, meme: Meme) -> set[str]:
    """Stages whose output is current for the meme's image and context."""
    ready = set()
    if session.execute(
        select(
            exists().where(
                MemeVisualEmbedding.scope_id == meme.scope_id,
                MemeVisualEmbedding.meme_id == meme.id,
                MemeVisualEmbedding.image_sha256 == meme.sha256,
            )
        )
    ).scalar():
        ready.add("visual")
    if meme.context_status == "ready":
        ready.add("agent")
    if (
        meme.search_metadata_hash
        and session.execute(
            select(
                exists().where(
                    MemeEmbedding.scope_id == meme.scope_id,
                    MemeEmbedding.meme_id == meme.id,
                    MemeEmbedding.metadata_hash == meme.search_metadata_hash,
                    MemeEmbedding.item_status == "ready",
                )
            )
        ).scalar()
    ):
        ready.add("text_embedding")
    return ready


def plan(enabled: list[str], ready: set[str], mode: str) -> dict[str, str | None]:
    """Stage -> None (planned) or its skip reason (``disabled``, ``already_ready``) for ``mode``."""
    if mode not in MODES:
        raise ValueError(f"unknown processing mode {mode!r}")
    out: dict[str, str | None] = {}
    behind = False  # normal: an earlier stage runs, so every later one must too
    for stage in STAGES:
        if stage not in enabled:
            out[stage] = "disabled"
        elif mode == "full_retry" or stage not in ready or (mode == "normal" and behind):
            out[stage] = None
            behind = True
        else:
            out[stage] = "already_ready"
    return out


def active_job(session: Session, meme: Meme) -> ImageProcessingJob | None:
    """The meme's queued or running job, if any."""
    return session.execute(
        select(ImageProcessingJob)
        .where(
            ImageProcessingJob.scope_id == meme.scope_id,
            ImageProcessingJob.meme_id == meme.id,
            ImageProcessingJob.status.in_(ACTIVE_JOB_STATUSES),
        )
        .limit(1)
    ).scalar_one_or_none()


def scope_analysis_policy(session: Session, scope_id: str) -> dict[str, Any]:
    """The scope's analysis policy (vision, reverse image search, llm_enhance) a new job freezes."""
    from mewdex.providers import policy

    return policy.for_scope(session, scope_id)


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def create_job(
    session: Session,
    meme: Meme,
    *,
    auto_name: bool = False,
    mode: str = "normal",
    batch_id: str | None = None,
    new_meme: bool = False,
) -> ImageProcessingJob:
    """Create the job for the meme's current revision with its planned/skipped stage rows, and queue its
    first planned stage (a job with nothing to do succeeds at once). With ``batch_id`` the first task
    joins that batch parked, to be fed as the lane drains; later stages' tasks join it unparked.
    ``new_meme``: the meme was created in this transaction (no output can be ready, no job exists yet)."""
    config = processing_config(auto_name)
    config["analysis_policy"].update(scope_analysis_policy(session, meme.scope_id))
    ready = set() if mode == "full_retry" or new_meme else ready_stages(session, meme)
    stages_plan = plan(config["stages"], ready, mode)
    first = next((stage for stage in STAGES if stages_plan[stage] is None), None)  # the first planned stage
    job = ImageProcessingJob(
        scope_id=meme.scope_id,
        meme_id=meme.id,
        revision=1 if new_meme else _next_revision(session, meme),
        image_sha256=meme.sha256,
        metadata_hash=meme.search_metadata_hash,
        processing_config=config,
        processing_config_hash=config_hash(config),
        auto_name=auto_name,
        processing_mode=mode,
        status="queued",
        current_stage=first,
    )
    session.add(job)
    session.flush()
    stages = {
        stage: ImageProcessingStage(
            scope_id=job.scope_id,
            job_id=job.id,
            stage=stage,
            planned=stages_plan[stage] is None,
            skip_reason=stages_plan[stage],
            status="queued" if stages_plan[stage] is None else "skipped",
        )
        for stage in STAGES
    }
    # queued before the stage rows are written, so they are inserted with its id (no UPDATE after)
    _queue_stage(session, job, stages[first] if first else None, batch_id, parked=batch_id is not None)
    session.add_all(stages.values())
    session.flush()
    return job


def _next_revision(session: Session, meme: Meme) -> int:
    latest = session.execute(
        select(ImageProcessingJob.revision)
        .where(
            ImageProcessingJob.scope_id == meme.scope_id,
            ImageProcessingJob.meme_id == meme.id,
            ImageProcessingJob.image_sha256 == meme.sha256,
        )
        .order_by(ImageProcessingJob.revision.desc())
        .limit(1)
    ).scalar_one_or_none()
    return (latest or 0) + 1


def _stages(session: Session, job: ImageProcessingJob) -> dict[str, ImageProcessingStage]:
    rows = session.execute(
        select(ImageProcessingStage).where(
            ImageProcessingStage.scope_id == job.scope_id, ImageProcessingStage.job_id == job.id
        )
    ).scalars()
    return {row.stage: row for row in rows}


def _next_planned(
    session: Session, job: ImageProcessingJob, after: str | None, stages: dict[str, ImageProcessingStage] | None = None
) -> ImageProcessingStage | None:
    stages = stages if stages is not None else _stages(session, job)
    start = 0 if after is None else STAGES.index(after) + 1
    for name in STAGES[start:]:
        if stages[name].planned:
            return stages[name]
    return None


def _queue_stage(
    session: Session,
    job: ImageProcessingJob,
    stage: ImageProcessingStage | None,
    batch_id: str | None = None,
    *,
    parked: bool = False,
) -> Task | None:
    """Queue ``stage``'s task (the job succeeds when None) and record it on the stage and the job;
    with ``batch_id`` the task joins that batch, ``parked`` until :func:`batches.feed` releases it."""
    if stage is None:
        job.status = "succeeded"
        job.current_stage = None
        job.completed_at = utcnow()
        return None
    parking: dict[str, Any] = {"available_at": queue.PARKED_AT} if parked else {}
    task = registry.submit(
        session,
        scope_id=job.scope_id,
        task_type=IMAGE_STAGE_TASK_TYPES[stage.stage],
        dedupe_key=f"{job.id}:{stage.stage}",
        submission_mode="pipeline",
        analysis_policy=job.processing_config.get("analysis_policy") if stage.stage == "agent" else None,
        **parking,
    )
    session.execute(  # an active task with the same dedupe key (same job and stage) has its row already
        insert(ImageStageTask)
        .values(
            task_id=task.id,
            scope_id=job.scope_id,
            image_stage=stage.stage,
            processing_job_id=job.id,
            target_meme_id=job.meme_id,
            target_image_sha256=job.image_sha256,
        )
        .on_conflict_do_nothing(index_elements=["task_id"])
    )
    stage.task_id = task.id
    stage.status = "queued"
    job.current_stage = stage.stage
    if batch_id is not None:
        batches.add(session, job.scope_id, batch_id, task.id)
    return task


def _job_and_stages(
    session: Session, scope_id: str, job_id
) -> tuple[ImageProcessingJob, dict[str, ImageProcessingStage]]:
    """The job (row-locked) and its stages by name, in one statement; ``NoResultFound`` when the
    job does not exist."""
    rows = session.execute(
        select(ImageProcessingJob, ImageProcessingStage)
        .outerjoin(
            ImageProcessingStage,
            (ImageProcessingStage.scope_id == ImageProcessingJob.scope_id)
            & (ImageProcessingStage.job_id == ImageProcessingJob.id),
        )
        .where(ImageProcessingJob.scope_id == scope_id, ImageProcessingJob.id == job_id)
        .with_for_update(of=ImageProcessingJob)
    ).all()
    if not rows:
        raise NoResultFound(f"no processing job {job_id} in scope {scope_id}")
    return rows[0][0], {stage.stage: stage for _, stage in rows if stage is not None}


_STAGE_STARTED_SQL = text(
    """
    WITH j AS (
        UPDATE image_processing_jobs
        SET status = 'running', current_stage = CAST(:stage AS varchar), updated_at = now()
        WHERE scope_id = :s AND id = :job
        RETURNING scope_id, id, processing_config_hash
    ), st AS (
        UPDATE image_processing_stages st SET status = 'running', attempt_count = :n, updated_at = now()
        FROM j WHERE st.scope_id = j.scope_id AND st.job_id = j.id AND st.stage = CAST(:stage AS varchar)
    )
    INSERT INTO image_processing_attempts (
        scope_id, task_id, attempt, attempt_id, stage, state, input_digest, target_sha256, claim_generation,
        processing_config_hash, analysis_policy, resume_of_attempt_id, created_at, updated_at)
    SELECT a.scope_id, a.task_id, a.attempt, a.attempt_id, CAST(:stage AS varchar), 'prepared',
           encode(sha256(convert_to(t.task_type || '|' || coalesce(CAST(:sha AS varchar), '') || '|'
                                    || coalesce(j.processing_config_hash, '') || '|' || t.payload::text,
                                    'UTF8')), 'hex'),
           coalesce(CAST(:sha AS varchar), repeat('0', 64)), a.claim_generation, j.processing_config_hash,
           t.analysis_policy, a.resume_of_attempt_id, now(), now()
    FROM task_attempts a
    JOIN tasks t ON t.scope_id = a.scope_id AND t.id = a.task_id
    LEFT JOIN j ON true
    WHERE a.scope_id = :s AND a.task_id = :task AND a.attempt = :n
    ON CONFLICT DO NOTHING
    """
)


def stage_started(session: Session, claim: queue.Claim, stage_task: ImageStageTask) -> None:
    """In the claim's transaction: mark the task's job and stage running (a task with a job), and
    record the attempt as the pipeline sees it (``image_processing_attempts``: the stage, the job's
    ``processing_config_hash`` and the input digest that includes it, the target sha256). One
    statement; the job row is locked after the meme (the write-back's order)."""
    session.execute(
        _STAGE_STARTED_SQL,
        {
            "s": claim.scope_id,
            "job": stage_task.processing_job_id,
            "stage": stage_task.image_stage,
            "sha": stage_task.target_image_sha256,
            "n": claim.attempt_count,
            "task": claim.task_id,
        },
    )


_ATTEMPT_ENDED_SQL = text(
    """
    UPDATE image_processing_attempts p
    SET state = coalesce(CAST(:state AS varchar), a.state), error = a.error,
        termination_reason = a.termination_reason, termination_signal = a.termination_signal,
        resume_available = a.resume_available, resume_reason = a.resume_reason,
        executor_attempt_id = a.executor_attempt_id, observed_cost = a.observed_cost,
        usage_checked_at = a.usage_checked_at, updated_at = now()
    FROM task_attempts a
    WHERE a.scope_id = :s AND a.task_id = :task AND a.attempt = :n
      AND p.scope_id = a.scope_id AND p.task_id = a.task_id AND p.attempt = a.attempt
    """
)


def attempt_ended(session: Session, task: Task, state: str | None = None) -> None:
    """Copy how the task's last attempt ended (the queue's ``task_attempts`` row: state, error,
    termination, resume, cost) onto the pipeline's attempt row; ``state`` overrides the state (the
    success write-back runs before the queue marks the attempt ``completed``)."""
    session.flush()  # the queue's changes to the attempt, made through the ORM
    session.execute(_ATTEMPT_ENDED_SQL, {"state": state, "s": task.scope_id, "task": task.id, "n": task.attempt_count})


def stage_task(session: Session, task_id: str) -> ImageStageTask | None:
    """The image-stage row of the task (None: not an image-stage task)."""
    return session.get(ImageStageTask, task_id)


def stage_succeeded(session: Session, stage_task: ImageStageTask, batch_id: str | None) -> Task | None:
    """Record a stage's success and hand off to the next planned stage (never rejected); the next
    stage's task joins ``batch_id``, the batch of the task (``queue.batches.batch_of``). Returns
    that task, or None when the job is done."""
    job, stages = _job_and_stages(session, stage_task.scope_id, stage_task.processing_job_id)
    stage = stages[stage_task.image_stage]
    stage.status = "succeeded"
    stage.error = None
    return _queue_stage(session, job, _next_planned(session, job, after=stage.stage, stages=stages), batch_id)


def stage_retrying(session: Session, task: Task, stage_task: ImageStageTask) -> None:
    """A stage attempt failed and will be retried at ``task.available_at``."""
    job, stages = _job_and_stages(session, stage_task.scope_id, stage_task.processing_job_id)
    stage = stages[stage_task.image_stage]
    stage.status = "queued"
    stage.error = task.error
    stage.retry_at = task.available_at
    job.retry_at = task.available_at


def stage_unknown(session: Session, task: Task, stage_task: ImageStageTask) -> None:
    """The stage's worker died after an external call started: stage and job are ``unknown_execution``
    (never replayed automatically; a retry on request resumes it)."""
    job, stages = _job_and_stages(session, stage_task.scope_id, stage_task.processing_job_id)
    stage = stages[stage_task.image_stage]
    stage.status = "unknown_execution"
    stage.error = task.error
    job.status = "unknown_execution"
    job.error = {"stage": stage.stage, **(task.error or {})}


def stage_failed(session: Session, task: Task, stage_task: ImageStageTask) -> None:
    """A stage failed for good: the job fails and the later planned stages are blocked."""
    job, stages = _job_and_stages(session, stage_task.scope_id, stage_task.processing_job_id)
    stage = stages[stage_task.image_stage]
    stage.status = "failed"
    stage.error = task.error
    for name in STAGES[STAGES.index(stage.stage) + 1 :]:
        if stages[name].planned:
            stages[name].status = "blocked"
    job.status = "failed"
    job.error = {"stage": stage.stage, **(task.error or {})}
    job.completed_at = utcnow()


def stage_requeued(session: Session, task: Task, stage_task: ImageStageTask) -> None:
    """A failed or unknown stage task is queued again on request: the stage, the job and the later
    planned stages it had blocked are active again."""
    job, stages = _job_and_stages(session, stage_task.scope_id, stage_task.processing_job_id)
    stage = stages[stage_task.image_stage]
    stage.status = "queued"
    stage.error = None
    for name in STAGES[STAGES.index(stage.stage) + 1 :]:
        if stages[name].planned and stages[name].status == "blocked":
            stages[name].status = "queued"
    job.status = "queued"
    job.error = None
    job.completed_at = None
    job.current_stage = stage.stage


def _register() -> None:
    from mewdex.library import memes

    memes.set_processing_submitter(create_job)


_register()
