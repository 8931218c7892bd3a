"""One run of a scheduled job: the ``scheduled_job_run`` task type (lane ``schedules``), one task per
(job, slot), enqueued by :mod:`mewdex.schedules.dispatch`.

A run (1) gives the job's prompt to the retrieval-only assistant (the prompt is the query) and
chooses the best meme the job has not sent in its last :data:`NO_REPEAT_RUNS` runs; (2) records a
``push`` message with that meme in the job's conversation (``isolated``: a new one per run, the
latest ``MEWDEX_SCHEDULE_KEEP_RUN_CONVERSATIONS`` kept; ``persistent``: the bound one,
``bound_task_id``); (3) delivers it to ``notify``; all within
``timeout_seconds`` (0: no limit). Steps an earlier attempt finished are not repeated (the chosen
meme and the conversation are kept on the run row).

Every run that ran (ok, or failed for good) is a usage event (kind ``schedule_run``, :func:`_meter`).

Failures: a retryable error is retried by the queue with backoff (``RetryPolicy``); a run that
failed for good counts against the job, which is disabled after :data:`DISABLE_AFTER_FAILURES`
consecutive failed runs with the reason kept in ``disabled_reason``. A worker that dies during the
delivery leaves the delivery ``unknown`` and never resends it (``external_started``).
"""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from mewdex.assistant import service as assistant
from mewdex.db.models import Conversation, ScheduledJob, ScheduledJobRun, ScopeContext, Task, utcnow
from mewdex.dto.search import SearchHit
from mewdex.platform import owners
from mewdex.queue.registry import RetryPolicy, TaskContext, TaskError, TaskType, register_task_type
from mewdex.queue.tasks import Claim, Lane, register_lane
from mewdex.schedules import jobs
from mewdex.schedules.delivery import DeliveryError, Push, deliver
from mewdex.schedules.dispatch import RUN_LANE, RUN_TASK_TYPE
from mewdex.schedules.settings import settings
from mewdex.search import service as search_service

NO_REPEAT_RUNS = 10
RUN_USAGE_KIND = "schedule_run"
DISABLE_AFTER_FAILURES = 3
MAX_ATTEMPTS = 3


def _deadline_check(deadline: float | None, what: str) -> float:
    """Seconds left before the run's deadline (a large number without one); ``schedule_timeout`` past it."""
    if deadline is None:
        return 30.0
    left = deadline - time.monotonic()
    if left <= 0:
        raise TaskError("schedule_timeout", f"the run went over its timeout_seconds ({what})", retryable=False)
    return left


def recent_memes(session: Session, job_id: UUID, n: int = NO_REPEAT_RUNS) -> list[UUID]:
    """The memes the job sent in its last ``n`` runs that sent one (latest first)."""
    return [
        m
        for m in session.execute(
            select(ScheduledJobRun.meme_id)
            .where(ScheduledJobRun.job_id == job_id, ScheduledJobRun.meme_id.is_not(None))
            .order_by(ScheduledJobRun.slot.desc())
            .limit(n)
        ).scalars()
        if m is not None
    ]


def choose(hits: list[SearchHit], recent: list[UUID]) -> SearchHit | None:
    """The best hit not in ``recent``; None when every hit was sent recently (or there is none)."""
    seen = {str(m) for m in recent}
    return next((h for h in hits if h.id not in seen), None)


def _conversation(session: Session, job: ScheduledJob, scope: ScopeContext) -> Conversation:
    """The run's conversation, locked: the persistent job's bound one (re-created when it is gone), or a new one."""
    if job.mode == "persistent" and job.bound_task_id is not None:
        found = session.execute(
            select(Conversation)
            .where(Conversation.conversation_id == job.bound_task_id, Conversation.deleted_at.is_(None))
            .with_for_update()
        ).scalar_one_or_none()
        if found is not None:
            return found
    conversation = assistant.create_conversation(
        session, scope, user_id=job.user_id, name=job.name, channel="schedule", scheduled_job_id=job.job_id
    )
    conversation.title_source = "fixed"
    conversation.auto_title_pending = False
    if job.mode == "persistent":
        job.bound_task_id = conversation.conversation_id
    else:
        session.flush()
        prune_run_conversations(session, job)
    return conversation


def prune_run_conversations(session: Session, job: ScheduledJob) -> int:
    """Delete the job's run conversations older than its latest ``MEWDEX_SCHEDULE_KEEP_RUN_CONVERSATIONS``
    (an isolated job makes one per run; their runs keep their rows, ``conversation_id`` emptied).
    Returns how many were deleted."""
    old = (
        select(Conversation.conversation_id)
        .where(Conversation.scheduled_job_id == job.job_id, Conversation.scope_id == job.scope_id)
        .order_by(Conversation.created_at.desc(), Conversation.conversation_id.desc())
        .offset(settings().schedule_keep_run_conversations)
    )
    if job.bound_task_id is not None:
        old = old.where(Conversation.conversation_id != job.bound_task_id)
    ids = list(session.execute(old).scalars())
    if ids:
        session.execute(delete(Conversation).where(Conversation.conversation_id.in_(ids)))
    return len(ids)


def _meter(session: Session, task: Task, run: ScheduledJobRun) -> None:
    """Count a run that ran (ok or failed for good) in the owner's usage: kind ``schedule_run``, model
    profile ``schedule``, units ``{"runs": 1}`` — priced by ``MEWDEX_PRICES`` (``{"schedule": {"runs":
    CNY}}``, free without), and then counted against the monthly budget like any metered call."""
    from mewdex.platform import usage

    usage.record(
        session,
        scope_id=run.scope_id,
        kind=RUN_USAGE_KIND,
        model_profile="schedule",
        units={"runs": 1, "job_id": str(run.job_id)},
        task_id=task.id,
        idempotency_key=f"schedule_run:{run.run_id}",
    )


def _caption(job_name: str, hit: SearchHit) -> str:
    return f"⏰ {job_name}: {hit.display_name}"


def run_job(ctx: TaskContext) -> dict[str, Any]:
    """Run one slot; ``{"status": "ok", "meme_id", "conversation_id", "delivery"}`` or
    ``{"status": "skipped", "reason"}``. Raises ``TaskError`` (the queue retries the retryable ones)."""
    run_id = UUID(ctx.payload["run_id"])
    sessions = ctx.sessions
    with sessions.begin() as session:
        run = session.get(ScheduledJobRun, run_id, with_for_update=True)
        job = session.get(ScheduledJob, run.job_id) if run is not None else None
        if run is None or job is None:
            return {"status": "skipped", "reason": "the job is gone"}
        if job.deleted_at is not None:
            return {"status": "skipped", "reason": "the job was deleted"}
        if not job.enabled and job.disabled_reason is None:
            return {"status": "skipped", "reason": "the job is paused"}
        if not owners.owner_active(session, job.scope_id):
            return {"status": "skipped", "reason": "the owner's account is disabled"}
        run.status, run.attempts = "running", run.attempts + 1
        run.started_at = run.started_at or utcnow()
        snapshot = {
            "job_id": job.job_id,
            "name": job.name,
            "prompt": job.prompt,
            "scope_id": job.scope_id,
            "user_id": job.user_id,
            "notify": dict(job.notify) if job.notify else None,
            "timeout": job.timeout_seconds,
            "meme_id": run.meme_id,
            "conversation_id": run.conversation_id,
            "slot": ctx.payload["slot"],
        }
    scope = ScopeContext(snapshot["scope_id"])
    deadline = time.monotonic() + snapshot["timeout"] if snapshot["timeout"] else None

    if snapshot["meme_id"] is None:
        _query, hits = assistant.search_ids(sessions, scope, snapshot["prompt"])
        _deadline_check(deadline, "choosing a meme")
        if not hits:
            raise TaskError("schedule_no_meme", f"no meme matches {snapshot['prompt']!r}", retryable=False)
        with sessions.begin() as session:
            hit = choose(hits, recent_memes(session, snapshot["job_id"]))
        if hit is None:
            return {
                "status": "skipped",
                "reason": f"no new meme: every match was sent in the last {NO_REPEAT_RUNS} runs",
            }
        with sessions.begin() as session:
            job = session.get(ScheduledJob, snapshot["job_id"], with_for_update=True)
            assert job is not None
            conversation = _conversation(session, job, scope)
            caption = _caption(snapshot["name"], hit)
            refs = assistant.artifact_refs(session, conversation, [hit])  # the chat's meme cards
            assistant.append_message(
                session,
                conversation,
                {
                    "role": "assistant",
                    "content": caption,
                    "mewdex": {"results": [hit.id], "offset": 1, "query": snapshot["prompt"]},
                    "schedule": {"job_id": str(snapshot["job_id"]), "run_id": str(run_id), "slot": snapshot["slot"]},
                },
                artifact_refs=refs,
                kind="push",
            )
            run = session.get(ScheduledJobRun, run_id, with_for_update=True)
            assert run is not None
            run.meme_id, run.conversation_id = UUID(hit.id), conversation.conversation_id
            conversation_id = conversation.conversation_id
    else:
        with sessions.begin() as session:
            found = search_service.hydrate(session, scope, [snapshot["meme_id"]], {snapshot["meme_id"]: 0.0})
        if not found:
            raise TaskError("schedule_no_meme", "the chosen meme was deleted", retryable=False)
        hit, conversation_id = found[0], snapshot["conversation_id"]
        caption = _caption(snapshot["name"], hit)

    detail: dict[str, Any] = {"type": "none"}
    if snapshot["notify"]:
        left = _deadline_check(deadline, "before the delivery")
        ctx.external_started(f"run_{run_id.hex}_{ctx.claim.attempt_count}")
        push = Push(
            snapshot["job_id"],
            snapshot["name"],
            run_id,
            snapshot["slot"],
            snapshot["scope_id"],
            snapshot["user_id"],
            hit,
            caption,
            conversation_id,
        )
        try:
            detail = deliver(sessions, snapshot["notify"], push, timeout=min(left, 30.0))
        except DeliveryError as exc:
            if deadline is not None and time.monotonic() >= deadline:
                raise TaskError(
                    "schedule_timeout", f"the delivery went over its timeout_seconds: {exc.message}", retryable=False
                ) from None
            raise TaskError(exc.code, f"delivery failed: {exc.message}", retryable=exc.retryable) from None
        _deadline_check(deadline, "the delivery")
    return {
        "status": "ok",
        "meme_id": hit.id,
        "conversation_id": str(conversation_id),
        "delivery": detail,
    }


def _error_text(task: Task) -> tuple[str, str]:
    error = task.error or {}
    if isinstance(error, dict):
        return str(error.get("code") or "error"), str(error.get("message") or error.get("code") or "failed")
    return "error", str(error)


def on_success(session: Session, claim: Claim, task: Task, result: Any, batch_id: str | None) -> None:
    """Record the run's outcome on the run and the job (in the task's write-back transaction)."""
    run = session.get(ScheduledJobRun, UUID(task.payload["run_id"]), with_for_update=True)
    if run is None:
        return
    job = session.get(ScheduledJob, run.job_id, with_for_update=True)
    run.finished_at = utcnow()
    if result.get("status") == "skipped":
        run.status, run.reason = "skipped", str(result.get("reason"))[:500]
        if job is not None:
            job.last_status, job.last_run_at = "skipped", run.finished_at
        return
    delivery = result.get("delivery") or {"type": "none"}
    run.status, run.error, run.error_code = "ok", None, None
    _meter(session, task, run)
    kind = str(delivery.get("type"))
    run.delivery_status = {"none": "none", "channel": "queued"}.get(kind, "succeeded")
    run.delivery_detail = delivery
    if job is not None:
        job.last_status, job.last_error, job.last_run_at = "ok", None, run.finished_at
        job.consecutive_failures = 0


def on_failure(session: Session, task: Task, outcome: str) -> None:
    """A retry keeps the run ``running`` with its last error; a final failure fails the run, counts
    against the job and disables it after :data:`DISABLE_AFTER_FAILURES` in a row."""
    run = session.get(ScheduledJobRun, UUID(task.payload["run_id"]), with_for_update=True)
    if run is None:
        return
    code, message = _error_text(task)
    run.error_code, run.error = code, message[:1000]
    if outcome == "retrying":
        return
    run.status, run.finished_at = "error", utcnow()
    if outcome != "cancelled":
        _meter(session, task, run)
    job = session.get(ScheduledJob, run.job_id, with_for_update=True)
    if outcome == "unknown_execution":  # died during the delivery: never resent
        run.delivery_status = "unknown"
    elif run.meme_id is not None and job is not None and job.notify:
        run.delivery_status = "failed"
    if job is None:
        return
    job.last_status, job.last_error, job.last_run_at = "error", f"{code}: {message}"[:500], run.finished_at
    if outcome == "cancelled":
        return
    job.consecutive_failures += 1
    if job.enabled and job.consecutive_failures >= DISABLE_AFTER_FAILURES:
        jobs.disable(
            job, f"disabled after {job.consecutive_failures} failed runs in a row; last error: {code}: {message}"
        )


# Every account's runs share the lane; each account runs at most its share of its slots at once
# (MEWDEX_SCHEDULE_SCOPE_CONCURRENCY), so one account's many jobs cannot hold them all.
register_lane(Lane(RUN_LANE, scope_share=lambda: settings().schedule_scope_concurrency))

register_task_type(
    TaskType(
        name=RUN_TASK_TYPE,
        handler=run_job,
        lane=RUN_LANE,
        resource_per_scope=True,
        retry=RetryPolicy(max_attempts=MAX_ATTEMPTS),
        external=True,
        on_success=on_success,
        on_failure=on_failure,
    )
)
