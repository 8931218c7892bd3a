"""Probes and metrics (README "Monitoring"): ``GET /livez``, ``GET /readyz``, ``GET /metrics``.

- ``/livez``: 200 while the process answers; it reads nothing, so a stalled queue or a busy
  database never makes an orchestrator restart a working server.
- ``/readyz``: 200 when the database answers, its schema is at this mewdex's newest migration and
  the server is not shutting down; else 503 with the reasons (``database_unreachable``,
  ``migrations_pending``, ``shutting_down``): their details (the schema revisions) only to a caller
  who may read ``/metrics``, a fixed sentence per code to anyone else.
- ``/metrics``: the Prometheus text format (prometheus_client). The web processes' series
  (:mod:`mewdex.telemetry`: HTTP requests, search latency per leg; summed over every web process of
  the server) and, read at scrape time by
  :class:`DatabaseCollector`, what lives in the database: each capability's series (hook
  ``metric_collectors``: queue, tasks, deliveries, provider calls and cost), so API and worker
  processes share no memory. Readable from loopback (no forwarding headers), by an admin (token or
  session), or from an address in ``MEWDEX_METRICS_ALLOW``; 404 to anyone else.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import time
from collections.abc import Iterable, Iterator
from typing import Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from sqlalchemy import text
from starlette.exceptions import HTTPException as StarletteHTTPException

from mewdex import hooks, telemetry
from mewdex.config import get_settings
from mewdex.db import engine as db_engine
from mewdex.db import replica
from mewdex.runtime import worker_processes
from mewdex.storage import blob_store
from mewdex.web import security, server_state

log = logging.getLogger(__name__)
router = APIRouter(tags=["health"])

#: Each statement of a scrape gives up after this long (a scrape must not pile up behind a lock).
STATEMENT_TIMEOUT_MS = 2000

_limiter: anyio.CapacityLimiter | None = None


def _probe_limiter() -> anyio.CapacityLimiter:
    """Threads of the probes' own (they answer while every request thread is busy)."""
    global _limiter
    if _limiter is None:
        _limiter = anyio.CapacityLimiter(4)
    return _limiter


# --- probes ------------------------------------------------------------------------------------------


@router.get("/livez", include_in_schema=False)
async def livez() -> JSONResponse:
    """200 ``{"status": "ok"}`` while the process answers (it reads nothing)."""
    return JSONResponse({"status": "ok"}, headers={"Cache-Control": "no-store"})


_head: str | None = None


def _schema_head() -> str:
    """This mewdex's newest migration (read once per process)."""
    global _head
    if _head is None:
        from mewdex.db.migrate import head_revision

        _head = head_revision()
    return _head


def readiness(app) -> list[dict[str, str]]:
    """The reasons this server should get no traffic (``[]``: ready), ``[{"code", "message"}]``."""
    if getattr(app.state, "shutting_down", False):
        return [{"code": "shutting_down", "message": "the server is shutting down"}]
    try:
        with db_engine.get_engine().connect() as connection:
            connection.execute(text(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}"))
            current = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except Exception:
        log.warning("readyz: the database is unreachable", exc_info=True)
        return [{"code": "database_unreachable", "message": "the database does not answer"}]
    if current != _schema_head():
        return [
            {
                "code": "migrations_pending",
                "message": f"the database schema is at {current or 'nothing'}, this mewdex needs {_schema_head()}",
            }
        ]
    return []


def _readiness_for(request: Request) -> list[dict[str, str]]:
    """:func:`readiness` as the caller may read it (:func:`server_state.reasons_for`): the messages in
    full (schema revisions) only to those who may read ``/metrics``, a fixed sentence per code to
    everyone else (an orchestrator's probe, a stranger)."""
    reasons = readiness(request.app)
    if not reasons:
        return reasons
    try:
        detailed = metrics_allowed(request)
    except Exception:  # the database that would recognise an admin does not answer
        log.warning("readyz: the caller could not be recognised", exc_info=True)
        detailed = False
    return server_state.reasons_for(reasons, detailed=detailed)


@router.get("/readyz", include_in_schema=False)
async def readyz(request: Request) -> JSONResponse:
    """200 ``{"status": "ready"}``, or 503 ``{"status": "not_ready", "reasons": [{"code", "message"}]}``
    (``database_unreachable``, ``migrations_pending``, ``shutting_down``) with ``Retry-After``. Each
    message names versions or schema revisions only to a caller who may read ``/metrics``."""
    reasons = await anyio.to_thread.run_sync(_readiness_for, request, limiter=_probe_limiter())
    headers = {"Cache-Control": "no-store"}
    if reasons:
        return JSONResponse({"status": "not_ready", "reasons": reasons}, 503, headers={**headers, "Retry-After": "5"})
    return JSONResponse({"status": "ready"}, headers=headers)


def watch_shutdown(app) -> None:
    """Mark the app as shutting down (``/readyz`` 503) as soon as the process gets SIGTERM or SIGINT,
    before the server drains its connections; the server's own handlers still run (chained)."""

    def chain(previous):
        def handler(signum, frame):
            app.state.shutting_down = True
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:  # nobody else handles it: end the process as it would have
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        return handler

    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            signal.signal(sig, chain(signal.getsignal(sig)))
        except ValueError:  # not the main thread (an app run inside a test's thread): lifespan end marks it
            pass


# --- HTTP series --------------------------------------------------------------------------------------


class HttpMetrics:
    """Counts every HTTP answer by method, route template and status, and times it (outermost
    middleware: refusals of the security middleware count too)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = 500

        async def recording_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope["method"] if scope["method"] in _METHODS else "other"
            telemetry.HTTP_REQUESTS.labels(method=method, route=template, status=str(status)).inc()
            telemetry.HTTP_LATENCY.labels(method=method, route=template).observe(time.perf_counter() - started)


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


# --- scrape-time series -------------------------------------------------------------------------------


class DatabaseCollector(Collector):
    """What lives in the database, read when ``/metrics`` is scraped (one short transaction, each
    statement bounded by :data:`STATEMENT_TIMEOUT_MS`), and this process's pools, workers and disk.

    ``mewdex_database_up`` is 0 when the database could not be read; the database series are then
    missing from that scrape."""

    def __init__(self, app):
        self.app = app

    def collect(self) -> Iterator[Metric]:
        yield from self._process()
        try:
            families = list(self._database())
        except Exception:
            log.warning("metrics: the database could not be read", exc_info=True)
            yield _gauge("mewdex_database_up", "1 when this scrape could read the database, else 0.", 0)
            return
        yield _gauge("mewdex_database_up", "1 when this scrape could read the database, else 0.", 1)
        yield from families

    def _process(self) -> Iterator[Metric]:
        in_use = GaugeMetricFamily(
            "mewdex_db_pool_in_use", "Connections of this process's pool checked out, by pool.", labels=["pool"]
        )
        waiting = GaugeMetricFamily(
            "mewdex_db_pool_waiting", "Threads of this process waiting for a connection, by pool.", labels=["pool"]
        )
        size = GaugeMetricFamily(
            "mewdex_db_pool_size", "Connections a pool keeps (its overflow comes on top).", labels=["pool"]
        )
        for name, pool in db_engine.pools().items():
            in_use.add_metric([name], _call(pool, "checkedout"))
            waiting.add_metric([name], float(getattr(pool, "waiting", 0)))
            size.add_metric([name], _call(pool, "size"))
        yield from (in_use, waiting, size)
        pool = getattr(self.app.state, "worker_pool", None)
        status = pool.status() if pool is not None else {}
        restarts = CounterMetricFamily(
            "mewdex_worker_restarts", "Worker processes this server restarted after they died (since it started)."
        )
        restarts.add_metric([], float(status.get("restarts", 0)))
        yield restarts
        configured = status.get("processes", status.get("threads", 0))
        yield _gauge("mewdex_workers_configured", "Workers this server started (processes or threads).", configured)
        yield _gauge("mewdex_workers_alive", "Workers of this server that are running.", status.get("alive", 0))
        free = blob_store().free_bytes()
        if free is not None:  # an object store has no free-space figure
            yield _gauge("mewdex_disk_free_bytes", "Free bytes on the blob store's file system.", free)
        yield _gauge(
            "mewdex_disk_low_bytes", "MEWDEX_DISK_LOW_BYTES: /health warns below it.", get_settings().disk_low_bytes
        )
        state = replica.cached()
        if state is not None:
            if state.lag_seconds is not None:
                yield _gauge(
                    "mewdex_search_replica_lag_seconds", "Replay lag of the search replica.", state.lag_seconds
                )
            yield _gauge(
                "mewdex_search_replica_in_use", "1 while the search legs read the replica, else 0.", int(state.use)
            )

    def _database(self) -> Iterator[Metric]:
        with db_engine.get_sessionmaker().begin() as session:
            session.execute(text(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}"))
            for collect in hooks.implementations("metric_collectors").values():
                yield from collect(session.execute)
            workers = worker_processes(session)
            yield _gauge("mewdex_worker_processes", "`mewdex worker` processes connected to the database.", workers)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=float(value))


def _call(pool: Any, method: str) -> float:
    try:
        return float(getattr(pool, method)())
    except (AttributeError, TypeError):  # a pool class without that figure
        return 0.0


# --- /metrics -----------------------------------------------------------------------------------------


def metrics_allowed(request: Request) -> bool:
    """This machine (``security.is_local``), a client address (``security.client_ip``) in
    ``MEWDEX_METRICS_ALLOW``, or an admin."""
    if security.is_local(request):
        return True
    if _in_allow_list(security.client_ip(request), get_settings().metrics_allow):
        return True
    if "authorization" not in request.headers and not request.cookies:
        return False
    from mewdex.web.routers.health import _is_admin  # the one "is this caller an admin" check of /health

    return _is_admin(request)


def _in_allow_list(address: str, entries: Iterable[str]) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return False
    for entry in entries:
        try:
            if ip in ipaddress.ip_network(entry.strip(), strict=False):
                return True
        except ValueError:
            continue
    return False


_registries: dict[int, Any] = {}


def _render(request: Request) -> Response:
    from prometheus_client import CollectorRegistry

    if not metrics_allowed(request):
        raise StarletteHTTPException(404)  # the same answer as an unknown path
    app_id = id(request.app)
    scrape = _registries.get(app_id)
    if scrape is None:
        scrape = CollectorRegistry(auto_describe=False)
        scrape.register(DatabaseCollector(request.app))
        _registries[app_id] = scrape
    body = telemetry.exposition() + generate_latest(scrape)
    return Response(body, media_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"})


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """The Prometheus text format (version 0.0.4); 404 ``not_found`` to a caller that may not read it."""
    return await anyio.to_thread.run_sync(_render, request, limiter=_probe_limiter())
