"""Scheduled jobs: create, edit, pause, resume, delete (soft), list, their runs — owner-scoped.

Every function takes the caller's ``Session`` and a :class:`Viewer` (the caller's scope, and
whether it is an admin, who sees every scope's jobs). Another owner's (or a deleted) job raises
``ScheduleError("not_found")``. ``next_run_at`` is computed from "now" only when a job is created,
its ``cron``/``tz`` change or it is resumed; afterwards always from the previous slot
(:mod:`mewdex.schedules.dispatch`).

Limits (:func:`limits`): an account has at most ``schedule_max_jobs_per_account`` jobs
(``schedule_limit_reached``, 409) and a job's cron may not run more often than every
``schedule_min_interval_minutes`` (``schedule_too_frequent``, 422); both are settings
(``MEWDEX_SCHEDULE_…``) an admin can change at run time (``PATCH /api/v1/admin/settings``).

``notify`` (optional, the guaranteed delivery target besides the conversation):
``{"type": "webhook", "definition_id": "<webhook connector definition>"}`` or
``{"type": "channel", "channel": "<a channel binding of the owner, e.g. telegram>"}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mewdex.db.models import ScheduledJob, ScheduledJobRun, Scope, ScopeContext, utcnow
from mewdex.platform import instance, owners
from mewdex.schedules import clock, cron
from mewdex.schedules.errors import ScheduleError
from mewdex.schedules.settings import settings as schedule_settings

MODES = ("isolated", "persistent")
MAX_NAME = 200
MAX_PROMPT = 2000
MAX_TIMEOUT_SECONDS = 3600
NOTIFY_TYPES = ("webhook", "channel")
EDITABLE = (
    "name",
    "prompt",
    "cron",
    "tz",
    "mode",
    "notify",
    "timeout_seconds",
    "expires_at",
    "max_runs",
    "cost_cap_cny",
    "model_profile",
)


LIMIT_SETTINGS = ("schedule_max_jobs_per_account", "schedule_min_interval_minutes")


def limits(session: Session) -> dict[str, int]:
    """``{"schedule_max_jobs_per_account", "schedule_min_interval_minutes"}``: the admin's run-time
    value (``platform_settings``) of each, else the setting's."""
    settings = schedule_settings()
    return {
        key: int(value) if (value := instance.get_setting(session, key, None)) is not None else getattr(settings, key)
        for key in LIMIT_SETTINGS
    }


def check_interval(session: Session, expr: str) -> None:
    """The one "too frequent" rule, asked by create, update, resume and dispatch: ``expr`` may not run
    more often than every ``schedule_min_interval_minutes`` (the admin's run-time value). Raises
    ``ScheduleError("schedule_too_frequent")`` (422)."""
    minimum = limits(session)["schedule_min_interval_minutes"]
    gap = cron.shortest_gap_minutes(expr)
    if gap < minimum:
        raise ScheduleError(
            "schedule_too_frequent",
            f"{expr!r} runs every {gap:g} minute(s); schedules run at most every {minimum} minutes",
            {"min_interval_minutes": minimum},
        )


def _check_job_count(session: Session, scope_id: str) -> None:
    maximum = limits(session)["schedule_max_jobs_per_account"]
    count = session.execute(
        select(func.count())
        .select_from(ScheduledJob)
        .where(ScheduledJob.scope_id == scope_id, ScheduledJob.deleted_at.is_(None))
    ).scalar_one()
    if count >= maximum:
        raise ScheduleError(
            "schedule_limit_reached",
            f"this account has {count} schedules, the most it may have; delete one first",
            {"max_jobs": maximum},
        )


@dataclass(frozen=True)
class Viewer:
    """Who asks: ``scope`` (jobs are created there) and ``is_admin`` (sees and manages every scope's jobs)."""

    scope: ScopeContext
    is_admin: bool = False


def _id(value: Any) -> UUID:
    try:
        return value if isinstance(value, UUID) else UUID(str(value))
    except ValueError:
        raise ScheduleError("not_found", "no such schedule") from None


def get(session: Session, viewer: Viewer, job_id: Any, *, lock: bool = False) -> ScheduledJob:
    """The job (not deleted) of the viewer's scope (any scope for an admin); ``not_found`` otherwise."""
    stmt = select(ScheduledJob).where(ScheduledJob.job_id == _id(job_id), ScheduledJob.deleted_at.is_(None))
    if not viewer.is_admin:
        stmt = stmt.where(ScheduledJob.scope_id == viewer.scope.scope_id)
    if lock:
        stmt = stmt.with_for_update()
    job = session.execute(stmt).scalar_one_or_none()
    if job is None:
        raise ScheduleError("not_found", "no such schedule")
    return job


def list_jobs(session: Session, viewer: Viewer, *, limit: int = 200) -> list[ScheduledJob]:
    """The viewer's jobs (an admin: everyone's), newest first."""
    stmt = select(ScheduledJob).where(ScheduledJob.deleted_at.is_(None))
    if not viewer.is_admin:
        stmt = stmt.where(ScheduledJob.scope_id == viewer.scope.scope_id)
    return list(session.execute(stmt.order_by(ScheduledJob.created_at.desc()).limit(limit)).scalars())


def runs(session: Session, viewer: Viewer, job_id: Any, *, limit: int = 50) -> list[ScheduledJobRun]:
    """The job's runs, the latest slot first (skipped slots included)."""
    job = get(session, viewer, job_id)
    return list(
        session.execute(
            select(ScheduledJobRun)
            .where(ScheduledJobRun.job_id == job.job_id)
            .order_by(ScheduledJobRun.slot.desc())
            .limit(limit)
        ).scalars()
    )


def _text(value: Any, field: str, limit: int) -> str:
    out = " ".join(str(value or "").replace("\x00", "").split()) if field == "name" else str(value or "").strip()
    out = out.replace("\x00", "")
    if not out:
        raise ScheduleError("schedule_invalid", f"{field} is empty")
    if len(out) > limit:
        raise ScheduleError("schedule_invalid", f"{field} is over {limit} characters")
    return out


def check_notify(value: Any) -> dict[str, Any] | None:
    """The normalised delivery target, or None; ``schedule_invalid`` for a bad shape."""
    if value is None or value == {}:
        return None
    if not isinstance(value, dict) or value.get("type") not in NOTIFY_TYPES:
        raise ScheduleError(
            "schedule_invalid", "notify: {'type': 'webhook', 'definition_id': …} or {'type': 'channel', 'channel': …}"
        )
    if value["type"] == "webhook":
        try:
            return {"type": "webhook", "definition_id": str(UUID(str(value.get("definition_id"))))}
        except ValueError:
            raise ScheduleError("schedule_invalid", "notify: definition_id is not a connector id") from None
    channel = str(value.get("channel") or "").strip()
    if not channel or len(channel) > 64:
        raise ScheduleError("schedule_invalid", "notify: channel is empty")
    return {"type": "channel", "channel": channel}


def _check(values: dict[str, Any], session: Session, scope_id: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key == "name":
            out[key] = _text(value, "name", MAX_NAME)
        elif key == "prompt":
            out[key] = _text(value, "prompt", MAX_PROMPT)
        elif key == "cron":
            out[key] = cron.check_cron(value)
            check_interval(session, out[key])
        elif key == "tz":
            cron.zone(value)
            out[key] = str(value).strip()
        elif key == "mode":
            if value not in MODES:
                raise ScheduleError("schedule_invalid", "mode is 'isolated' or 'persistent'")
            out[key] = value
        elif key == "notify":
            out[key] = check_notify(value)
        elif key == "timeout_seconds":
            if not isinstance(value, int) or not 0 <= value <= MAX_TIMEOUT_SECONDS:
                raise ScheduleError("schedule_invalid", f"timeout_seconds is 0 (none) to {MAX_TIMEOUT_SECONDS}")
            out[key] = value
        elif key == "expires_at":
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise ScheduleError("schedule_invalid", "expires_at needs an offset (e.g. 2027-01-01T00:00Z)")
            out[key] = value
        elif key == "max_runs":
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ScheduleError("schedule_invalid", "max_runs is at least 1")
            out[key] = value
        elif key == "cost_cap_cny":
            out[key] = _cost_cap(session, scope_id, value)
        elif key == "model_profile":
            out[key] = str(value or "").strip()[:200]
    return out


def _cost_cap(session: Session, scope_id: str, value: Any) -> Decimal | None:
    """A per-job cost cap: positive and not above the owner's monthly budget (when they have one)."""
    if value is None:
        return None
    try:
        cap = Decimal(str(value))
    except InvalidOperation:
        raise ScheduleError("schedule_invalid", "cost_cap_cny is a number") from None
    if not cap.is_finite() or cap <= 0:
        raise ScheduleError("schedule_invalid", "cost_cap_cny is positive")
    budget = monthly_budget(session, scope_id)
    if budget is not None and cap > budget:
        raise ScheduleError(
            "schedule_invalid",
            f"cost_cap_cny ({cap}) is above the owner's monthly budget ({budget})",
            {"analysis_cost_per_month": float(budget)},
        )
    return cap


def monthly_budget(session: Session, scope_id: str) -> Decimal | None:
    """The scope owner's monthly spending limit (``analysis_cost_per_month``), None without one."""
    from mewdex.platform.quotas import limits_for

    user = owners.user_for_scope(session, scope_id)
    if user is None:
        return None
    limit = limits_for(user).analysis_cost_per_month
    return None if limit is None else Decimal(str(limit))


def _next_from_now(job: ScheduledJob, now: datetime) -> None:
    nxt = cron.next_run(job.cron, job.tz, now)
    if nxt is None:  # check_cron refused expressions that never run; a date past 50 years lands here
        raise ScheduleError("cron_never_runs", f"{job.cron!r} has no run in the next 50 years")
    job.next_run_at = nxt


def create(session: Session, viewer: Viewer, values: dict[str, Any], *, now: datetime | None = None) -> ScheduledJob:
    """A new enabled job in the viewer's scope (its owner: the scope's user). ``values``: ``name``,
    ``prompt``, ``cron`` (required), ``tz`` (default Asia/Shanghai), ``mode``, ``notify``,
    ``timeout_seconds``, ``expires_at``, ``max_runs``, ``cost_cap_cny``, ``model_profile``.
    Raises ``ScheduleError`` (``schedule_invalid``, ``cron_invalid``, ``timezone_invalid``,
    ``schedule_too_frequent``, ``schedule_limit_reached``, …)."""
    for required in ("name", "prompt", "cron"):
        if values.get(required) is None:
            raise ScheduleError("schedule_invalid", f"{required} is required")
    scope_id = viewer.scope.scope_id
    checked = _check({k: v for k, v in values.items() if k in EDITABLE}, session, scope_id)
    checked.setdefault("tz", cron.DEFAULT_TZ)
    # one account's creations queue here (its scope row locked), so parallel requests cannot pass the limit
    session.execute(select(Scope.id).where(Scope.id == scope_id).with_for_update())
    _check_job_count(session, scope_id)
    owner = owners.user_for_scope(session, scope_id)
    job = ScheduledJob(scope_id=scope_id, user_id=owner.user_id if owner else None, enabled=True, **checked)
    _next_from_now(job, now or clock.now())
    session.add(job)
    session.flush()
    return job


def update(
    session: Session, viewer: Viewer, job_id: Any, values: dict[str, Any], *, now: datetime | None = None
) -> ScheduledJob:
    """Change the given fields (:data:`EDITABLE`); a new ``cron`` or ``tz`` recomputes ``next_run_at``
    from now (an enabled job's next slot)."""
    job = get(session, viewer, job_id, lock=True)
    checked = _check({k: v for k, v in values.items() if k in EDITABLE}, session, job.scope_id)
    for key, value in checked.items():
        setattr(job, key, value)
    if "cron" in checked or "tz" in checked:
        _next_from_now(job, now or clock.now())
    if checked.get("mode") == "isolated":
        job.bound_task_id = None
    job.updated_at = utcnow()
    return job


def pause(session: Session, viewer: Viewer, job_id: Any) -> ScheduledJob:
    """Disable the job by hand (no reason recorded: the owner chose); a queued run is skipped."""
    job = get(session, viewer, job_id, lock=True)
    job.enabled, job.disabled_reason, job.disabled_at = False, None, utcnow()
    return job


def resume(session: Session, viewer: Viewer, job_id: Any, *, now: datetime | None = None) -> ScheduledJob:
    """Enable the job again (also one that was disabled automatically: the reason and the failure
    count are cleared); slots missed while it was disabled are not run: the next is the first after now.
    A cron more frequent than the minimum interval now allows is refused (``schedule_too_frequent``)."""
    job = get(session, viewer, job_id, lock=True)
    check_interval(session, job.cron)
    job.enabled, job.disabled_reason, job.disabled_at, job.consecutive_failures = True, None, None, 0
    _next_from_now(job, now or clock.now())
    return job


def delete(session: Session, viewer: Viewer, job_id: Any) -> ScheduledJob:
    """Soft-delete the job (its runs and conversations stay; a queued run is skipped)."""
    job = get(session, viewer, job_id, lock=True)
    job.deleted_at = job.disabled_at = utcnow()
    job.enabled = False
    return job


OWNER_DISABLED_REASON = "paused: the owner's account is disabled"


def restart_from(job: ScheduledJob, now: datetime) -> None:
    """The job's next slot is the first after ``now`` (slots missed while it was stopped are not run)."""
    _next_from_now(job, now)


def disable(job: ScheduledJob, reason: str) -> None:
    """Stop a (locked) job automatically, keeping ``reason`` for its owner."""
    job.enabled, job.disabled_reason, job.disabled_at = False, reason[:500], utcnow()
