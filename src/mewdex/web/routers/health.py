"""``GET /health``: liveness, database reachability, worker liveness and queue depth per lane."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from mewdex.db.engine import get_engine, get_sessionmaker
# ``mewdex worker`` processes connect with this application_name prefix (runtime.run_worker sets PGAPPNAME).
from mewdex.runtime import WORKER_APPLICATION_PREFIX

router = APIRouter(tags=["health"])


@router.get("/health")
def health(request: Request):
    """``{"status", "database", "workers": {"pool": {...} | None, "processes": n}, "queues": {lane: {...}}}``.

    ``workers.pool`` describes the workers this server started: ``{"processes", "alive", "pids", "lanes"}``
    for child processes (``MEWDEX_WORKER_MODE=process``), ``{"threads", "alive", "busy", "lanes"}`` for
    threads; ``workers.processes`` counts live ``mewdex worker`` processes connected to the database
    (its children included);
    ``queues`` has per lane the tasks ``queued`` (due or backing off), ``running`` and ``parked`` (held by a batch)."""
    from mewdex.queue.service import queue_depth

    try:
        with get_engine().connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:
        return JSONResponse({"status": "unavailable", "database": str(exc)[:200]}, status_code=503)
    with get_sessionmaker().begin() as session:
        processes = session.execute(
            text("SELECT count(DISTINCT application_name) FROM pg_stat_activity WHERE application_name LIKE :p"),
            {"p": f"{WORKER_APPLICATION_PREFIX}:%"},
        ).scalar_one()
        depth = queue_depth(session)
    pool = getattr(request.app.state, "worker_pool", None)
    return {
        "status": "ok",
        "database": "ok",
        "workers": {"pool": pool.status() if pool is not None else None, "processes": processes},
        "queues": depth,
    }
