"""``GET /health``: liveness, database reachability, worker liveness and queue depth per lane."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from mewdex.config import get_settings
from mewdex.db.engine import get_engine, get_sessionmaker

# ``mewdex worker`` processes connect with this application_name prefix (runtime.run_worker sets PGAPPNAME).
from mewdex.runtime import WORKER_APPLICATION_PREFIX
from mewdex.storage import blob_store

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


@router.get("/health")
def health(request: Request):
    """Anyone: ``{"status": "ok"|"degraded"}`` (200; degraded: a worker it started died) or
    ``{"status": "unavailable"}`` (503, the database is unreachable; the reason goes to the server
    log, never into the answer). Admins additionally get
    ``{"database", "workers": {"pool": {...} | None, "processes": n}, "queues": {lane: {...}}}``.

    ``workers.pool`` describes the workers this server started: ``{"processes", "alive", "pids", "lanes"}``
    for child processes (``MEWDEX_WORKER_MODE=process``), ``{"threads", "alive", "busy", "lanes"}`` for
    threads; ``workers.processes`` counts live ``mewdex worker`` processes connected to the database
    (its children included);
    ``queues`` has per lane the tasks ``queued`` (due or backing off), ``running`` and ``parked`` (held by a batch);
    ``disk`` is ``{"free_bytes", "low"}`` of the blob store's file system (``low`` below
    ``MEWDEX_DISK_LOW_BYTES``: uploads will soon fail with 507), and ``warnings`` lists such conditions."""
    from mewdex.queue.service import queue_depth

    try:
        with get_engine().connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception:
        log.exception("health: the database is unreachable")
        return JSONResponse({"status": "unavailable"}, status_code=503)
    pool = getattr(request.app.state, "worker_pool", None)
    pool_status = pool.status() if pool is not None else None
    status = "ok"
    if pool_status and pool_status.get("alive", 0) < pool_status.get("processes", pool_status.get("threads", 0)):
        status = "degraded"  # a worker this server started has died
    if not _is_admin(request):
        return {"status": status}
    with get_sessionmaker().begin() as session:
        processes = session.execute(
            text("SELECT count(DISTINCT application_name) FROM pg_stat_activity WHERE application_name LIKE :p"),
            {"p": f"{WORKER_APPLICATION_PREFIX}:%"},
        ).scalar_one()
        depth = queue_depth(session)
    free = blob_store().free_bytes()
    low = free < get_settings().disk_low_bytes
    return {
        "status": status,
        "database": "ok",
        "workers": {"pool": pool_status, "processes": processes},
        "queues": depth,
        "disk": {"free_bytes": free, "low": low},
        "warnings": [f"disk_space_low: {free} bytes free in the data dir"] if low else [],
    }
