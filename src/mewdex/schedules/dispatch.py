"""Claiming due jobs: the ``scheduled_job_dispatch`` task type the periodic scheduler enqueues every
:data:`DISPATCH_INTERVAL_SECONDS` (``runtime/maintenance.py``).

:func:`dispatch_due` locks the due jobs ``FOR UPDATE SKIP LOCKED`` (any number of processes may
dispatch at once; each job is handled by one of them), and for each:

- collects its due slots (from ``next_run_at`` through the cron, up to now);
- pauses the job when its cron runs more often than the minimum interval now allows
  (:func:`jobs.check_interval`; an admin raised it since);
- ends the job when it expired (``expires_at``), reached ``max_runs`` or spent its ``cost_cap_cny``
  (``disabled_reason`` says which); skips the slot while the owner's monthly budget is spent;
- runs only the latest due slot: after downtime the missed slots are coalesced into that one run
  (``coalesced`` = how many it stands for) and the earlier ones are recorded ``skipped`` (at most
  :data:`MAX_SKIPPED_ROWS` rows) — never a burst;
- inserts the run row (unique on job and slot) and enqueues one ``scheduled_job_run`` task keyed
  by (job, slot) in the job's scope; moves ``next_run_at`` to the first slot after the run's slot
  (computed from the slot, never from now).
"""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.db.models import ScheduledJob, ScheduledJobRun, User, utcnow
from mewdex.platform import owners
from mewdex.platform.users import on_account_change
from mewdex.queue import registry
from mewdex.queue.maintenance import MAINTENANCE_LANE
from mewdex.queue.registry import RetryPolicy, TaskContext, task_type
from mewdex.schedules import clock, cron, jobs
from mewdex.schedules.errors import ScheduleError

log = logging.getLogger(__name__)
DISPATCH_INTERVAL_SECONDS = 1
MAX_JOBS_PER_DISPATCH = 200
MAX_SKIPPED_ROWS = 100
MAX_SLOTS_COUNTED = 10_000
RUN_TASK_TYPE = "scheduled_job_run"
RUN_LANE = "schedules"


def slot_key(slot: datetime) -> str:
    """The slot as in dedupe keys and payloads: ``2026-12-07T01:00:00Z``."""
    return cron._iso_utc(slot)


def _due_slots(job: ScheduledJob, now: datetime) -> tuple[list[datetime], int]:
    """The job's due slots (≤ now, the latest :data:`MAX_SKIPPED_ROWS` + 1 kept) and how many there were."""
    kept: list[datetime] = []
    count = 0
    slot: datetime | None = job.next_run_at
    iterator = cron.runs(job.cron, job.tz, job.next_run_at)
    while slot is not None and slot <= now:
        count += 1
        kept.append(slot)
        if len(kept) > MAX_SKIPPED_ROWS + 1:
            kept.pop(0)
        if count >= MAX_SLOTS_COUNTED:  # years of downtime: count no further (the next slot is after now)
            break
        slot = next(iterator, None)
    return kept, count


def _record_skipped(session: Session, job: ScheduledJob, slots: list[datetime], reason: str) -> None:
    if not slots:
        return
    session.execute(
        insert(ScheduledJobRun)
        .values(
            [
                {"job_id": job.job_id, "scope_id": job.scope_id, "slot": s, "status": "skipped", "reason": reason}
                for s in slots
            ]
        )
        .on_conflict_do_nothing(constraint="uq_scheduled_job_runs_job_slot")
    )


def job_cost(session: Session, job_id: Any) -> Decimal:
    """What the job's runs cost so far (CNY)."""
    return Decimal(
        session.execute(
            select(func.coalesce(func.sum(ScheduledJobRun.cost_cny), 0)).where(ScheduledJobRun.job_id == job_id)
        ).scalar_one()
    )


def _budget_spent(session: Session, job: ScheduledJob) -> bool:
    from mewdex.platform import usage
    from mewdex.platform.grants import BUDGET_KINDS

    budget = jobs.monthly_budget(session, job.scope_id)
    return budget is not None and usage.month_cost(session, job.scope_id, BUDGET_KINDS) >= budget


def _dispatch_job(session: Session, job: ScheduledJob, now: datetime) -> dict[str, Any]:
    due, count = _due_slots(job, now)
    if job.expires_at is not None:
        due = [s for s in due if s < job.expires_at]
    outcome: dict[str, Any] = {"job_id": str(job.job_id), "due": count}
    if not due:  # everything due was at or after the expiry
        jobs.disable(job, "expired")
        job.last_status = "skipped"
        return {**outcome, "ended": "expired"}
    run_slot, missed = due[-1], due[:-1]
    coalesced = count - 1
    if job.max_runs is not None and job.run_count >= job.max_runs:
        jobs.disable(job, f"finished: reached its maximum of {job.max_runs} runs")
        return {**outcome, "ended": "max_runs"}
    if job.cost_cap_cny is not None and job_cost(session, job.job_id) >= job.cost_cap_cny:
        _record_skipped(session, job, due, f"cost cap reached ({job.cost_cap_cny} CNY)")
        jobs.disable(job, f"cost cap reached: its runs cost {job_cost(session, job.job_id)} CNY of {job.cost_cap_cny}")
        job.last_status = "skipped"
        return {**outcome, "ended": "cost_cap"}
    _record_skipped(session, job, missed, f"missed (coalesced into the run of {slot_key(run_slot)})")
    if _budget_spent(session, job):
        _record_skipped(session, job, [run_slot], "the owner's monthly budget is spent")
        job.last_status, job.last_error = "skipped", "the owner's monthly budget is spent"
        outcome["skipped"] = "budget"
    else:
        run_id = session.execute(
            insert(ScheduledJobRun)
            .values(job_id=job.job_id, scope_id=job.scope_id, slot=run_slot, status="queued", coalesced=coalesced)
            .on_conflict_do_nothing(constraint="uq_scheduled_job_runs_job_slot")
            .returning(ScheduledJobRun.run_id)
        ).scalar_one_or_none()
        if run_id is not None:
            key = slot_key(run_slot)
            task = registry.submit(
                session,
                scope_id=job.scope_id,
                task_type=RUN_TASK_TYPE,
                dedupe_key=f"scheduled_job:{job.job_id}:{key}",
                payload={"job_id": str(job.job_id), "run_id": str(run_id), "slot": key},
                submission_mode="standalone",
            )
            session.execute(update(ScheduledJobRun).where(ScheduledJobRun.run_id == run_id).values(task_id=task.id))
            job.run_count += 1
            job.last_task_id = task.id
            outcome.update(run_id=str(run_id), slot=key, coalesced=coalesced)
    # from the slot, never from now (only past the counting limit does "now" decide)
    nxt = cron.next_run(job.cron, job.tz, now if count >= MAX_SLOTS_COUNTED else run_slot)
    if nxt is None:
        jobs.disable(job, "no further run: the expression has no date in the next 50 years")
    else:
        job.next_run_at = nxt
        if job.expires_at is not None and nxt >= job.expires_at:
            jobs.disable(job, "expired")
        elif job.max_runs is not None and job.run_count >= job.max_runs:
            jobs.disable(job, f"finished: reached its maximum of {job.max_runs} runs")
    return outcome


def dispatch_due(session: Session, now: datetime | None = None) -> list[dict[str, Any]]:
    """Dispatch every due job this caller could lock (``SKIP LOCKED``), in the caller's transaction;
    returns what happened to each (``{"job_id", "due", "run_id", "slot", "coalesced"}``, or
    ``"ended"``/``"skipped"``)."""
    now = now or clock.now()
    due_jobs = (
        session.execute(
            select(ScheduledJob)
            .where(
                ScheduledJob.enabled.is_(True),
                ScheduledJob.deleted_at.is_(None),
                ScheduledJob.next_run_at <= now,
            )
            .order_by(ScheduledJob.next_run_at)
            .limit(MAX_JOBS_PER_DISPATCH)
            .with_for_update(skip_locked=True)
        )
        .scalars()
        .all()
    )
    out = []
    for job in due_jobs:
        if not owners.owner_active(session, job.scope_id):  # the account hook paused it; a straggler waits
            jobs.disable(job, jobs.OWNER_DISABLED_REASON)
            out.append({"job_id": str(job.job_id), "skipped": "owner_disabled"})
            continue
        try:  # an admin raised the minimum interval since the job was saved: paused, with the reason
            jobs.check_interval(session, job.cron)
        except ScheduleError as exc:
            jobs.disable(job, f"paused: {exc.message}; change its schedule to resume it")
            out.append({"job_id": str(job.job_id), "ended": "too_frequent"})
            continue
        try:
            with session.begin_nested():
                out.append(_dispatch_job(session, job, now))
        except Exception as exc:  # one broken job (a zone gone from tzdata) must not stop the others
            log.warning("schedule %s: dispatch failed: %s", job.job_id, exc)
            jobs.disable(job, f"schedule error: {exc}")
            job.last_status, job.last_error = "error", str(exc)[:500]
    return out


def on_account(session: Session, user: User, event: str) -> None:
    """Pause an account's jobs when it is disabled (``disabled_reason`` :data:`jobs.OWNER_DISABLED_REASON`),
    restore those (next slot after now) when it is enabled, delete them when it is deleted."""
    live = select(ScheduledJob).where(ScheduledJob.scope_id == user.scope_id, ScheduledJob.deleted_at.is_(None))
    if event == "disabled":
        for job in session.execute(live.where(ScheduledJob.enabled.is_(True)).with_for_update()).scalars():
            jobs.disable(job, jobs.OWNER_DISABLED_REASON)
    elif event == "enabled":
        paused = live.where(ScheduledJob.disabled_reason == jobs.OWNER_DISABLED_REASON).with_for_update()
        for job in session.execute(paused).scalars():
            job.enabled, job.disabled_reason, job.disabled_at = True, None, None
            jobs.restart_from(job, clock.now())
    elif event == "deleted":
        for job in session.execute(live.with_for_update()).scalars():
            job.enabled, job.deleted_at = False, utcnow()


on_account_change("schedules", on_account)


@task_type("scheduled_job_dispatch", lane=MAINTENANCE_LANE, retry=RetryPolicy(max_attempts=1))
def scheduled_job_dispatch(ctx: TaskContext) -> dict[str, Any]:
    """Dispatch the due scheduled jobs; ``{"dispatched": [...]}`` (see :func:`dispatch_due`)."""
    with ctx.sessions.begin() as session:
        return {"dispatched": dispatch_due(session)}
