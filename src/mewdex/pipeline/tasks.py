"""The image stages as task types, and the lanes they run in.

Each stage (:data:`mewdex.pipeline.stages.HANDLERS`) is one :class:`~mewdex.queue.registry.TaskType`
(stored names ``IMAGE_STAGE_TASK_TYPES``): its hooks keep the image bookkeeping out of the queue —

- ``on_claim`` (claim transaction): read the task's ``image_stage_tasks`` row (the queue's claim knows
  nothing of it), lock the meme and snapshot it, then mark the job and stage running and write the
  pipeline's attempt row with the job's configuration hash (meme before job, as in the write-back);
- handler: the stage's slow ``run`` on the snapshot, no transaction held;
- ``on_success`` (fenced write-back): the stage's ``apply`` on the locked meme, metering, and the
  hand-off to the job's next planned stage (which joins the task's batch);
- ``on_failure`` / ``on_retry``: the job and stage follow the task (retrying, failed, unknown, requeued),
  and the pipeline's attempt row takes how the queue's attempt ended.

Lanes: ``visual``, ``agent`` (the analysis/context stage; its back-pressure limit is
``MEWDEX_AGENT_BACKPRESSURE``) and ``embedding``; ``auto_rename`` runs in ``default``. Every image
stage's submissions count against the ``agent`` lane (the first stage hands off into it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import ColumnElement, select, text
from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.models import (
    IMAGE_STAGE_TASK_TYPES,
    ImageProcessingAttempt,
    ImageProcessingJob,
    ImageStageTask,
    Meme,
    Scope,
    Task,
)
from mewdex.pipeline import jobs
from mewdex.pipeline.base import CONTEXT_STAGE, STAGE_VERSIONS, MemeSnapshot, StageError, load_meme
from mewdex.pipeline.stages import HANDLERS, ContextStage
from mewdex.platform import metering
from mewdex.queue import tasks as queue
from mewdex.queue.registry import (
    BatchUnits,
    Lane,
    TaskContext,
    TaskRows,
    TaskType,
    register_lane,
    register_task_rows,
    register_task_type,
)
from mewdex.storage import blob_store

CONTEXT_LANE = jobs.STAGE_LANES[CONTEXT_STAGE]  # "agent"

register_lane(Lane("visual"))
register_lane(Lane(CONTEXT_LANE, backpressure=lambda: get_settings().agent_backpressure))
register_lane(Lane("embedding"))


def snapshot(session: Session, scope_id: str, meme_id: Any) -> MemeSnapshot | None:
    """The meme (row-locked) as a stage reads it; None when it no longer exists."""
    row = session.execute(
        select(Meme, Scope.storage_namespace)
        .join(Scope, Scope.id == Meme.scope_id)
        .where(Meme.scope_id == scope_id, Meme.id == meme_id)
        .with_for_update(of=Meme, key_share=True)  # FOR NO KEY UPDATE: see load_meme
    ).one_or_none()
    if row is None:
        return None
    meme, namespace = row
    key = meme.storage_key
    store = blob_store()
    return MemeSnapshot(
        scope_id=meme.scope_id,
        id=meme.id,
        sha256=meme.sha256,
        display_name=meme.display_name,
        provenance=dict(meme.provenance),
        meme_context=dict(meme.meme_context),
        read_bytes=lambda: store.read_bytes(namespace, key),
    )


@dataclass(frozen=True)
class Prepared:
    """What the claim hook hands the stage's handler: the task's ``image_stage_tasks`` row and the
    meme's snapshot (None: the meme is gone)."""

    stage_task: ImageStageTask | None
    snapshot: MemeSnapshot | None


def on_claim(session: Session, claim: queue.Claim) -> Prepared:
    """In the claim's transaction: the task's stage row (one lookup by its key), the meme's lock and
    snapshot, then the job and stage marked running and the pipeline's attempt row written (meme
    before job, as in the write-back)."""
    row = jobs.stage_task(session, claim.task_id)
    if row is None:  # the task lost its row only with its meme or job (which took the task too)
        return Prepared(None, None)
    snap = snapshot(session, claim.scope_id, row.target_meme_id)
    jobs.stage_started(session, claim, row)
    if row.processing_job_id is not None and snap is not None and row.image_stage == CONTEXT_STAGE:
        config = (
            session.execute(
                select(ImageProcessingJob.processing_config).where(
                    ImageProcessingJob.scope_id == claim.scope_id, ImageProcessingJob.id == row.processing_job_id
                )
            ).scalar_one_or_none()
            or {}
        )
        snap = replace(snap, analysis_policy=dict(config.get("analysis_policy") or {}))
    return Prepared(row, snap)


def run_stage(ctx: TaskContext) -> Any:
    prepared: Prepared = ctx.prepared
    stage = prepared.stage_task.image_stage if prepared.stage_task is not None else None
    handler = HANDLERS.get(stage or "")
    if handler is None:
        raise StageError("unknown_stage", f"no handler for {stage!r}", retryable=False)
    if prepared.snapshot is None:
        raise StageError("meme_missing", "the meme no longer exists", retryable=False)
    if isinstance(handler, ContextStage):  # may call the vision model: needs the task context
        return handler.run(prepared.snapshot, ctx)
    return handler.run(prepared.snapshot)


def on_success(session: Session, claim: queue.Claim, task: Task, output: Any, batch_id: str | None) -> bool:
    """Apply the stage's output to the locked meme, meter it, and hand off to the next stage
    (True when a next stage's task joined the batch)."""
    row = jobs.stage_task(session, claim.task_id)
    meme = load_meme(session, claim.scope_id, row.target_meme_id) if row is not None else None
    if meme is None or row is None:  # run_stage refused both before the write-back
        raise LookupError(f"task {claim.task_id}: no meme or no stage to apply the output to")
    HANDLERS[row.image_stage].apply(session, meme, output)
    metering.meter_stage(session, row, output, STAGE_VERSIONS[CONTEXT_STAGE])
    jobs.attempt_ended(session, task, "completed")
    if row.processing_job_id is None:
        return False
    return jobs.stage_succeeded(session, row, batch_id) is not None


_ON_FAILURE = {
    "retrying": jobs.stage_retrying,
    "failed": jobs.stage_failed,
    "cancelled": jobs.stage_failed,
    "unknown_execution": jobs.stage_unknown,
}


def on_failure(session: Session, task: Task, outcome: str) -> None:
    jobs.attempt_ended(session, task)
    row = jobs.stage_task(session, task.id)
    if row is not None and row.processing_job_id is not None:
        _ON_FAILURE[outcome](session, task, row)


def on_retry(session: Session, task: Task) -> None:
    row = jobs.stage_task(session, task.id)
    if row is not None and row.processing_job_id is not None:
        jobs.stage_requeued(session, task, row)


for _stage, _task_type in IMAGE_STAGE_TASK_TYPES.items():
    register_task_type(
        TaskType(
            _task_type,
            run_stage,
            lane=jobs.STAGE_LANES[_stage],
            on_claim=on_claim,
            on_success=on_success,
            on_failure=on_failure,
            on_retry=on_retry,
            pressure_lane=CONTEXT_LANE,
            store_result=False,
            crash_code="stage_crashed",
            cost_budget=jobs.COST_BUDGET,
            columns=jobs.STAGE_COLUMNS,
            external=_stage == CONTEXT_STAGE,  # the vision model is outside
        )
    )


def decorate_rows(session: Session, tasks: Sequence[Task]) -> dict[str, dict[str, Any]]:
    """The tasks page's and API's fields of the image-stage tasks among ``tasks`` (those with an
    ``image_stage_tasks`` row): ``stage``, ``job_id``, ``meme_id`` and ``meme_name`` (the target meme's
    display name; None when it is gone). One statement for all."""
    ids = [t.id for t in tasks]
    if not ids:
        return {}
    rows = session.execute(
        select(ImageStageTask, Meme.display_name)
        .outerjoin(Meme, (Meme.scope_id == ImageStageTask.scope_id) & (Meme.id == ImageStageTask.target_meme_id))
        .where(ImageStageTask.task_id.in_(ids))
    ).all()
    return {
        row.task_id: {
            "stage": row.image_stage,
            "job_id": str(row.processing_job_id) if row.processing_job_id else None,
            "meme_id": str(row.target_meme_id) if row.target_meme_id else None,
            "meme_name": name,
        }
        for row, name in rows
    }


def attempt_fields(session: Session, task: Task) -> dict[int, dict[str, Any]]:
    """What the pipeline records of an image-stage task's attempts (``image_processing_attempts``):
    ``stage``, ``input_digest``, ``target_sha256``, ``processing_config_hash``, by attempt."""
    rows = session.execute(
        select(ImageProcessingAttempt).where(
            ImageProcessingAttempt.scope_id == task.scope_id, ImageProcessingAttempt.task_id == task.id
        )
    ).scalars()
    return {
        a.attempt: {
            "stage": a.stage,
            "input_digest": a.input_digest,
            "target_sha256": a.target_sha256,
            "processing_config_hash": a.processing_config_hash,
        }
        for a in rows
    }


def stage_filter(stage: str) -> ColumnElement[bool]:
    """The tasks list's ``stage`` filter: the image-stage tasks of that stage (a probe of each listed
    task's stage row by its key, not a scan of every scope's stage rows)."""
    return (
        select(ImageStageTask.task_id)
        .where(ImageStageTask.task_id == Task.id, ImageStageTask.image_stage == stage)
        .exists()
    )


_BATCH_MEMES_SQL = text(
    """
    SELECT i.batch_id, count(DISTINCT j.id) AS jobs,
           count(DISTINCT j.id) FILTER (WHERE j.status NOT IN ('queued', 'running')) AS jobs_done,
           count(DISTINCT j.id) FILTER (WHERE j.status IN ('failed', 'blocked', 'unknown_execution')) AS jobs_failed
    FROM task_batch_items i
    JOIN image_processing_stages st ON st.scope_id = i.scope_id AND st.task_id = i.task_id
    JOIN image_processing_jobs j ON j.scope_id = st.scope_id AND j.id = st.job_id
    WHERE i.scope_id = :s AND i.batch_id = ANY(:b)
    GROUP BY i.batch_id
    """
)


def batch_memes(session: Session, scope_id: str, batch_ids: Sequence[str]) -> dict[str, BatchUnits]:
    """The batches of image work, counted in memes (their processing jobs; a meme done when its job
    ended, failed or not), by batch id."""
    rows = session.execute(_BATCH_MEMES_SQL, {"s": scope_id, "b": list(batch_ids)}).mappings()
    return {
        r["batch_id"]: BatchUnits(r["jobs_done"], r["jobs"], r["jobs_failed"], "memes") for r in rows if r["jobs"] > 0
    }


register_task_rows(
    "image_stages",
    TaskRows(decorate_rows, filters={"stage": stage_filter}, batch_units=batch_memes, attempts=attempt_fields),
)
