"""The image stages as task types, and the lanes they run in.

Each stage (:data:`mewdex.pipeline.stages.HANDLERS`) is one :class:`~mewdex.queue.registry.TaskType`
(stored names ``IMAGE_STAGE_TASK_TYPES``): its hooks keep the image bookkeeping out of the queue —

- ``on_claim`` (claim transaction): lock the meme and snapshot it, then mark the job and stage running
  and record the job's configuration hash on the attempt (meme before job, as in the write-back);
- handler: the stage's slow ``run`` on the snapshot, no transaction held;
- ``on_success`` (fenced write-back): the stage's ``apply`` on the locked meme, metering, and the
  hand-off to the job's next planned stage (which joins the task's batch);
- ``on_failure`` / ``on_retry``: the job and stage follow the task (retrying, failed, unknown, requeued).

Lanes: ``visual``, ``agent`` (the analysis/context stage; its back-pressure limit is
``MEWDEX_AGENT_BACKPRESSURE``) and ``embedding``; ``auto_rename`` runs in ``default``. Every image
stage's submissions count against the ``agent`` lane (the first stage hands off into it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import select, text, tuple_
from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.models import IMAGE_STAGE_TASK_TYPES, ImageProcessingJob, Meme, Scope, Task
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


def snapshot(session: Session, claim: queue.Claim) -> MemeSnapshot | None:
    """The claimed task's meme (row-locked) as its stage reads it; None when it no longer exists."""
    row = session.execute(
        select(Meme, Scope.storage_namespace)
        .join(Scope, Scope.id == Meme.scope_id)
        .where(Meme.scope_id == claim.scope_id, Meme.id == claim.target_meme_id)
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


def on_claim(session: Session, claim: queue.Claim) -> MemeSnapshot | None:
    snap = snapshot(session, claim)  # the meme's lock before the job's, as in the write-back
    if claim.processing_job_id is not None:
        jobs.stage_started(session, claim)
        if snap is not None and claim.image_stage == CONTEXT_STAGE:
            config = (
                session.execute(
                    select(ImageProcessingJob.processing_config).where(
                        ImageProcessingJob.scope_id == claim.scope_id, ImageProcessingJob.id == claim.processing_job_id
                    )
                ).scalar_one_or_none()
                or {}
            )
            snap = replace(snap, analysis_policy=dict(config.get("analysis_policy") or {}))
    return snap


def run_stage(ctx: TaskContext) -> Any:
    handler = HANDLERS.get(ctx.claim.image_stage or "")
    if handler is None:
        raise StageError("unknown_stage", f"no handler for {ctx.claim.image_stage!r}", retryable=False)
    if ctx.prepared is None:
        raise StageError("meme_missing", "the meme no longer exists", retryable=False)
    if isinstance(handler, ContextStage):  # may call the vision model: needs the task context
        return handler.run(ctx.prepared, ctx)
    return handler.run(ctx.prepared)


def on_success(session: Session, claim: queue.Claim, task: Task, output: Any, batch_id: str | None) -> bool:
    """Apply the stage's output to the locked meme, meter it, and hand off to the next stage
    (True when a next stage's task joined the batch)."""
    meme = load_meme(session, claim.scope_id, claim.target_meme_id)
    if meme is None or claim.image_stage is None:  # run_stage refused both before the write-back
        raise LookupError(f"task {claim.task_id}: no meme or no stage to apply the output to")
    HANDLERS[claim.image_stage].apply(session, meme, output)
    metering.meter_stage(session, claim, output, STAGE_VERSIONS[CONTEXT_STAGE])
    if task.processing_job_id is None:
        return False
    return jobs.stage_succeeded(session, task, batch_id) is not None


_ON_FAILURE = {
    "retrying": jobs.stage_retrying,
    "failed": jobs.stage_failed,
    "cancelled": jobs.stage_failed,
    "unknown_execution": jobs.stage_unknown,
}


def on_failure(session: Session, task: Task, outcome: str) -> None:
    if task.processing_job_id is not None:
        _ON_FAILURE[outcome](session, task)


def on_retry(session: Session, task: Task) -> None:
    if task.processing_job_id is not None:
        jobs.stage_requeued(session, task)


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
    """The tasks page's and API's fields of the tasks that carry image-stage columns: ``stage``,
    ``job_id``, ``meme_id`` and ``meme_name`` (the target meme's display name; None when it is gone)."""
    mine = [t for t in tasks if t.image_stage or t.processing_job_id or t.target_meme_id]
    keys = {(t.scope_id, t.target_meme_id) for t in mine if t.target_meme_id is not None}
    names: dict[tuple[str, Any], str] = {}
    if keys:
        rows = session.execute(
            select(Meme.scope_id, Meme.id, Meme.display_name).where(tuple_(Meme.scope_id, Meme.id).in_(keys))
        )
        names = {(scope_id, meme_id): name for scope_id, meme_id, name in rows}
    return {
        t.id: {
            "stage": t.image_stage,
            "job_id": str(t.processing_job_id) if t.processing_job_id else None,
            "meme_id": str(t.target_meme_id) if t.target_meme_id else None,
            "meme_name": names.get((t.scope_id, t.target_meme_id)),
        }
        for t in mine
    }


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
    TaskRows(decorate_rows, filters={"stage": lambda stage: Task.image_stage == stage}, batch_units=batch_memes),
)
