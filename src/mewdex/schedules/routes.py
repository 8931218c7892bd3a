"""Schedules' routes (issue 18), imported by the web layer only, which mounts :data:`router`:

* ``/api/v1/schedules`` — cron jobs of the caller's scope (an admin sees and manages every scope's),
  their runs, and the preview of an expression in a zone;
* ``/schedules`` — the page (``schedules/page.html``); its script (``/static/schedules.js``, this
  package's ``static/``) talks to the API.

Errors: 404 ``not_found`` (missing, deleted or another owner's job), 422 ``cron_invalid`` /
``cron_never_runs`` / ``timezone_invalid`` / ``schedule_invalid``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from sqlalchemy.orm import Session

from mewdex.capability import web_kit
from mewdex.dto.scopes import ScopeContext
from mewdex.schedules import cron, jobs
from mewdex.schedules import shapes as dto
from mewdex.schedules.errors import ScheduleError
from mewdex.schedules.jobs import ScheduledJob, ScheduledJobRun, Viewer

#: The web layer's dependencies (lent once per process: mewdex.capability.lend).
web = web_kit()
current_scope, db_session = web.current_scope, web.db_session

api = APIRouter(prefix="/api/v1/schedules", tags=["schedules"])


def viewer(request: Request, scope: ScopeContext = Depends(current_scope)) -> Viewer:
    """The caller's scope, and whether it is an admin (who sees every scope's jobs)."""
    principal = getattr(request.state, "principal", None)
    return Viewer(scope, bool(principal is not None and principal.is_admin))


def parse_instant(value: str | None) -> datetime:
    """An ISO 8601 instant with an offset (``Z`` allowed); now when None. 422 ``schedule_invalid``."""
    if value is None or not value.strip():
        return datetime.now(UTC)
    try:
        instant = datetime.fromisoformat(value.strip().replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        raise ScheduleError("schedule_invalid", f"after: not an ISO 8601 instant: {value!r}") from None
    if instant.tzinfo is None:
        raise ScheduleError("schedule_invalid", "after: the instant needs an offset (e.g. 2027-03-27T01:30Z)")
    return instant


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def view(job: ScheduledJob) -> dict[str, Any]:
    """A job as :class:`mewdex.schedules.shapes.Schedule`."""
    return {
        "id": str(job.job_id),
        "scope_id": job.scope_id,
        "name": job.name,
        "prompt": job.prompt,
        "cron": job.cron,
        "tz": job.tz,
        "description": cron.explain(job.cron),
        "mode": job.mode,
        "notify": job.notify,
        "enabled": job.enabled,
        "timeout_seconds": job.timeout_seconds,
        "next_run": cron.run_view(job.next_run_at, job.tz),
        "last_run_at": _iso(job.last_run_at),
        "last_status": job.last_status,
        "last_error": job.last_error,
        "consecutive_failures": job.consecutive_failures,
        "run_count": job.run_count,
        "expires_at": _iso(job.expires_at),
        "max_runs": job.max_runs,
        "cost_cap_cny": float(job.cost_cap_cny) if job.cost_cap_cny is not None else None,
        "disabled_reason": job.disabled_reason,
        "disabled_at": _iso(job.disabled_at),
        "bound_conversation_id": str(job.bound_task_id) if job.bound_task_id else None,
        "created_at": job.created_at.isoformat(),
        "updated_at": job.updated_at.isoformat(),
    }


def run_view(run: ScheduledJobRun, tz: str) -> dict[str, Any]:
    """A run as :class:`mewdex.schedules.shapes.ScheduleRun` (its slot in UTC and in the job's zone)."""
    return {
        "id": str(run.run_id),
        "slot": cron.run_view(run.slot, tz),
        "status": run.status,
        "reason": run.reason,
        "coalesced": run.coalesced,
        "attempts": run.attempts,
        "conversation_id": str(run.conversation_id) if run.conversation_id else None,
        "meme_id": str(run.meme_id) if run.meme_id else None,
        "delivery_status": run.delivery_status,
        "delivery_detail": run.delivery_detail,
        "error_code": run.error_code,
        "error": run.error,
        "cost_cny": float(run.cost_cny or 0),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
    }


@api.get("/preview", response_model=dto.SchedulePreview)
def preview_schedule(
    cron_expr: str = Query(..., alias="cron", max_length=200, description="5-field cron expression"),
    tz: str = Query(cron.DEFAULT_TZ, max_length=100, description="IANA time zone"),
    after: str | None = Query(None, max_length=64, description="ISO instant; default now"),
    count: int = Query(5, ge=1, le=cron.MAX_PREVIEW),
    _scope: ScopeContext = Depends(current_scope),
):
    """The next ``count`` runs of ``cron`` in ``tz`` strictly after ``after``, in UTC and in the zone."""
    return cron.preview(cron_expr, tz, parse_instant(after), count)


@api.get("", response_model=dto.ScheduleList)
def list_schedules(session: Session = Depends(db_session), who: Viewer = Depends(viewer)):
    """``{"items"}`` newest first: the caller's jobs (an admin: everyone's)."""
    return {"items": [view(j) for j in jobs.list_jobs(session, who)]}


@api.post("", response_model=dto.Schedule, status_code=201)
def create_schedule(body: dto.ScheduleCreate, session: Session = Depends(db_session), who: Viewer = Depends(viewer)):
    """A new enabled job in the caller's scope; its first run is the first slot after now."""
    return view(jobs.create(session, who, body.model_dump()))


@api.get("/{job_id}", response_model=dto.Schedule)
def read_schedule(job_id: str, session: Session = Depends(db_session), who: Viewer = Depends(viewer)):
    return view(jobs.get(session, who, job_id))


@api.patch("/{job_id}", response_model=dto.Schedule)
def patch_schedule(
    job_id: str, body: dto.SchedulePatch, session: Session = Depends(db_session), who: Viewer = Depends(viewer)
):
    """Change the given fields; a new ``cron``/``tz`` moves the next run."""
    return view(jobs.update(session, who, job_id, body.model_dump(exclude_unset=True)))


@api.delete("/{job_id}", response_model=dto.Schedule)
def delete_schedule(job_id: str, session: Session = Depends(db_session), who: Viewer = Depends(viewer)):
    """Delete the job (its runs and conversations stay); answers the job as it was deleted."""
    return view(jobs.delete(session, who, job_id))


@api.post("/{job_id}/pause", response_model=dto.Schedule)
def pause_schedule(job_id: str, session: Session = Depends(db_session), who: Viewer = Depends(viewer)):
    return view(jobs.pause(session, who, job_id))


@api.post("/{job_id}/resume", response_model=dto.Schedule)
def resume_schedule(job_id: str, session: Session = Depends(db_session), who: Viewer = Depends(viewer)):
    """Enable again (clears an automatic disable and its failure count); the next run is after now.
    422 ``schedule_too_frequent`` when the job's cron runs more often than the minimum interval now allows."""
    return view(jobs.resume(session, who, job_id))


@api.get("/{job_id}/runs", response_model=dto.ScheduleRunList)
def list_schedule_runs(
    job_id: str,
    limit: int = Query(50, ge=1, le=200),
    session: Session = Depends(db_session),
    who: Viewer = Depends(viewer),
):
    """``{"items"}``: the job's runs, the latest slot first (skipped slots included)."""
    job = jobs.get(session, who, job_id)
    return {"items": [run_view(r, job.tz) for r in jobs.runs(session, who, job_id, limit=limit)]}


pages = APIRouter(include_in_schema=False)


@pages.get("/schedules")
def schedules_page(request: Request, scope: ScopeContext = Depends(current_scope)):
    return web.render(request, "schedules/page.html", {"page": "schedules"})


#: What the web layer mounts: the API, then the page.
router = APIRouter()
router.include_router(api)
router.include_router(pages)
