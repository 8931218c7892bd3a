"""``GET /health``: liveness, database reachability, worker liveness and queue depth per lane; the
same state (:func:`mewdex.web.server_state.health_state`) feeds the page header's badge."""

from __future__ import annotations

import logging
import os

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mewdex.backups.service import health as backup_health
from mewdex.config import get_settings
from mewdex.db.engine import get_sessionmaker
from mewdex.dto.common import HealthStatus
from mewdex.runtime import worker_processes
from mewdex.storage import blob_store
from mewdex.web.server_state import DATABASE_UNREACHABLE, health_state, reasons_for

log = logging.getLogger(__name__)
router = APIRouter(tags=["health"])


def _is_admin(request: Request) -> bool:
    """Whether the caller may see the details (an admin, or the local admin of no-login mode)."""
    from mewdex.web.deps import current_principal
    from mewdex.web.errors import ApiError

    try:
        with get_sessionmaker().begin() as session:
            return current_principal(request, session).is_admin
    except ApiError:
        return False


_limiter: anyio.CapacityLimiter | None = None


@router.get(
    "/health",
    response_model=HealthStatus,
    responses={503: {"model": HealthStatus, "description": "degraded (the same shape as ok; not an error body)"}},
)
async def health(request: Request):
    """Anyone: ``{"status": "ok"}`` (200) or ``{"status": "degraded"}`` (503: a worker this server
    started is not running, or queued work has had no consumer for a while); when the database is
    unreachable, ``{"status": "degraded", "reasons": [{"code": "database_unreachable", ...}]}`` (503,
    ``Retry-After``: no one can be recognised as an admin then; the error itself goes to the server
    log, never into the answer). Admins additionally get ``{"reasons": [{"code", "message"}], "database",
    "workers": {"pool": {...} | None, "processes": n}, "web": {"processes", "pid"}, "queues": {lane: {...}},
    "disk", "warnings"}``.

    ``workers.pool`` describes the workers this server started: ``{"processes", "alive", "pids",
    "lanes", "restarts", "last_exit"}`` for child processes (``MEWDEX_WORKER_MODE=process``),
    ``{"threads", "alive", "busy", "lanes"}`` for threads; ``workers.processes`` counts live ``mewdex
    worker`` processes connected to the database (its children included); ``web`` says how many web
    processes answer on the server's port (``MEWDEX_WEB_PROCESSES``) and which one answered (``pid``);
    ``queues`` has per lane the tasks ``queued`` (due or backing off), ``running`` and ``parked`` (held
    by a batch); ``disk`` is
    ``{"free_bytes", "low"}`` of the blob store's file system (``low`` below ``MEWDEX_DISK_LOW_BYTES``:
    uploads will soon fail with 507), ``backup`` is ``{"configured", "last", "stale"}`` (the last backup's
    result, :func:`mewdex.backups.service.health`), and ``warnings`` lists such conditions.

    Runs on threads of its own, so it answers while every request thread is busy."""
    global _limiter
    if _limiter is None:
        _limiter = anyio.CapacityLimiter(4)
    return await anyio.to_thread.run_sync(_health, request, limiter=_limiter)


def _health(request: Request):
    from mewdex.queue.service import queue_depth

    status, reasons = health_state(request.app)
    code = 200 if status == "ok" else 503
    if DATABASE_UNREACHABLE in reasons:
        public = reasons_for(reasons, detailed=False)  # no one can be recognised as an admin now
        return JSONResponse({"status": status, "reasons": public}, status_code=code, headers={"Retry-After": "5"})
    if not _is_admin(request):
        return JSONResponse({"status": status}, status_code=code)
    pool = getattr(request.app.state, "worker_pool", None)
    with get_sessionmaker().begin() as session:
        processes = worker_processes(session)
        depth = queue_depth(session)
        backups = backup_health(session)
    free = blob_store().free_bytes()  # None: an object store (no free-space figure)
    low = free is not None and free < get_settings().disk_low_bytes
    warnings = [f"disk_space_low: {free} bytes free in the data dir"] if low else []
    if backups["stale"]:
        warnings.append("backup_stale: no successful backup within twice the MEWDEX_BACKUP_CRON interval")
    last = backups["last"] or {}
    if last.get("status") in ("failed", "incomplete"):
        warnings.append(f"backup_{last['status']}: {last.get('code')}: {last.get('message')}")
    return JSONResponse(
        {
            "status": status,
            "reasons": reasons,
            "database": "ok",
            "workers": {"pool": pool.status() if pool is not None else None, "processes": processes},
            "web": {"processes": get_settings().serving_processes, "pid": os.getpid()},
            "queues": depth,
            "disk": {"free_bytes": free, "low": low},
            "backup": backups,
            "warnings": warnings,
        },
        status_code=code,
    )
