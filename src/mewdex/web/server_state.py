"""The server's state (:func:`health_state`): what ``GET /health`` answers and, cached for a few
seconds (:func:`page_state`), the page header's badge."""

from __future__ import annotations

import logging
import time

from fastapi import Request
from sqlalchemy import text

from mewdex.config import get_settings
from mewdex.db.engine import get_engine, get_sessionmaker

log = logging.getLogger(__name__)
PAGE_STATE_SECONDS = 5.0  # how long the page header's state is reused


DATABASE_UNREACHABLE = {"code": "database_unreachable", "message": "the database does not answer"}
# What a probe tells a caller who may not see the details (:func:`reasons_for`): per reason code one
# fixed sentence, so that no version, schema revision, path, setting or process detail reaches them.
PUBLIC_REASONS = {
    "database_unreachable": DATABASE_UNREACHABLE["message"],
    "migrations_pending": "the database schema is not the one this server needs",
    "shutting_down": "the server is shutting down",
    "workers_down": "workers of this server are not running",
    "queue_stalled": "queued work has no consumer",
}
UNKNOWN_REASON = "not_ready"


def reasons_for(reasons: list[dict[str, str]], *, detailed: bool) -> list[dict[str, str]]:
    """The ``[{"code", "message"}]`` of ``reasons`` that a probe (``/readyz``, ``/health``) may answer:
    as they are to an operator (``detailed``: an admin, loopback, ``MEWDEX_METRICS_ALLOW``), else each
    code with its fixed sentence of :data:`PUBLIC_REASONS` (a code not listed there becomes
    ``not_ready``). Every probe answer to an anonymous caller goes through here."""
    if detailed:
        return reasons
    public = []
    for reason in reasons:
        code = reason.get("code", "")
        if code not in PUBLIC_REASONS:
            public.append({"code": UNKNOWN_REASON, "message": "the server is not ready"})
        else:
            public.append({"code": code, "message": PUBLIC_REASONS[code]})
    return public


def health_state(app) -> tuple[str, list[dict[str, str]]]:
    """``(status, reasons)``: ``degraded`` when the database does not answer, fewer workers of this
    server run than it started, or queued work has had no consumer for ``MEWDEX_QUEUE_STALL_SECONDS``,
    else ``ok``. ``reasons``: ``[{"code", "message"}]`` (``database_unreachable``, ``workers_down``,
    ``queue_stalled``)."""
    from mewdex.queue.service import stalled_lanes

    try:
        with get_engine().connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception:
        log.warning("health: the database is unreachable", exc_info=True)
        return "degraded", [DATABASE_UNREACHABLE]
    reasons = []
    pool = getattr(app.state, "worker_pool", None)
    pool_status = pool.status() if pool is not None else None
    if pool_status:
        configured = pool_status.get("processes", pool_status.get("threads", 0))
        if pool_status.get("alive", 0) < configured:
            last = pool_status.get("last_exit")
            reasons.append(
                {
                    "code": "workers_down",
                    "message": f"{pool_status['alive']} of {configured} workers run"
                    + (f"; the last one {last}" if last else ""),
                }
            )
    seconds = get_settings().queue_stall_seconds
    with get_sessionmaker().begin() as session:
        stalled = stalled_lanes(session, seconds)
    if stalled:
        reasons.append(
            {
                "code": "queue_stalled",
                "message": f"queued work in lane(s) {', '.join(stalled)} has had no consumer for {seconds:.0f} s",
            }
        )
    return ("degraded" if reasons else "ok"), reasons


def page_state(request: Request) -> str:
    """The server's state for the page header, reused for :data:`PAGE_STATE_SECONDS`: ``ok``,
    ``degraded``, or ``unavailable`` (the banner's words for a degraded state whose reason is the
    database)."""
    cached = getattr(request.app.state, "health_page_state", None)
    if cached is not None and cached[0] > time.monotonic():
        return cached[1]
    try:
        status, reasons = health_state(request.app)
        if DATABASE_UNREACHABLE in reasons:
            status = "unavailable"
    except Exception:
        log.warning("health: the state could not be read", exc_info=True)
        status = "unavailable"
    request.app.state.health_page_state = (time.monotonic() + PAGE_STATE_SECONDS, status)
    return status
