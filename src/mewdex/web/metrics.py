"""Probes and metrics (README "Monitoring"): ``GET /livez``, ``GET /readyz``, ``GET /metrics``.

- ``/livez``: 200 while the process answers; it reads nothing, so a stalled queue or a busy
  database never makes an orchestrator restart a working server.
- ``/readyz``: 200 when the database answers, its schema is at this mewdex's newest migration and
  the server is not shutting down; else 503 with the reasons (``database_unreachable``,
  ``migrations_pending``, ``shutting_down``): their details (the schema revisions) only to a caller
  who may read ``/metrics``, a fixed sentence per code to anyone else.
- ``/metrics``: the Prometheus text format (prometheus_client). This process's own series
  (:mod:`mewdex.telemetry`: HTTP requests, search latency per leg) and, read at scrape time by
  :class:`DatabaseCollector`, what lives in the database (queue, tasks, deliveries, provider
  calls and cost), so API and worker processes share no memory. Readable from loopback (no
  forwarding headers), by an admin (token or session), or from an address in
  ``MEWDEX_METRICS_ALLOW``; 404 to anyone else.
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

from mewdex import telemetry
from mewdex.config import get_settings
from mewdex.db import engine as db_engine
from mewdex.db import replica
from mewdex.queue.tasks import PARKED_AT, lane_names
from mewdex.storage import blob_store
from mewdex.web import security, server_state

log = logging.getLogger(__name__)
router = APIRouter(tags=["health"])

#: Window of the "recent" series (``*_5m``): tasks finished, deliveries, provider calls and cost.
WINDOW_SECONDS = 300
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
        from alembic.script import ScriptDirectory

        from mewdex.db.migrate import alembic_config

        _head = ScriptDirectory.from_config(alembic_config()).get_current_head() or ""
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
            run = session.execute
            yield from _queue(run)
            yield from _tasks(run)
            yield from _deliveries(run)
            yield from _providers(run)
            workers = run(
                text("SELECT count(DISTINCT application_name) FROM pg_stat_activity WHERE application_name LIKE :p"),
                {"p": f"{_worker_prefix()}:%"},
            ).scalar_one()
            yield _gauge("mewdex_worker_processes", "`mewdex worker` processes connected to the database.", workers)


def _worker_prefix() -> str:
    from mewdex.runtime import WORKER_APPLICATION_PREFIX

    return WORKER_APPLICATION_PREFIX


def _queue(run) -> Iterator[Metric]:
    depth = GaugeMetricFamily(
        "mewdex_queue_depth",
        "Tasks per lane and state: queued (due or backing off), running, parked (held by a batch).",
        labels=["lane", "state"],
    )
    oldest = GaugeMetricFamily(
        "mewdex_queue_oldest_age_seconds",
        "Per lane, how long the longest-waiting due task has waited since it became due (0: none waits).",
        labels=["lane"],
    )
    rows = run(
        text(
            "SELECT lane, count(*) FILTER (WHERE status = 'queued' AND available_at < :parked), "
            "count(*) FILTER (WHERE status = 'running'), "
            "count(*) FILTER (WHERE status = 'queued' AND available_at >= :parked), "
            "coalesce(extract(epoch FROM now() - min(available_at) "
            "FILTER (WHERE status = 'queued' AND available_at <= now())), 0) "
            "FROM tasks WHERE status IN ('queued', 'running') GROUP BY lane"
        ),
        {"parked": PARKED_AT},
    ).all()
    seen = {lane: (0, 0, 0, 0.0) for lane in lane_names()}
    seen |= {lane: (queued, running, parked, float(age)) for lane, queued, running, parked, age in rows}
    for lane, (queued, running, parked, age) in sorted(seen.items()):
        depth.add_metric([lane, "queued"], queued)
        depth.add_metric([lane, "running"], running)
        depth.add_metric([lane, "parked"], parked)
        oldest.add_metric([lane], max(age, 0.0))
    yield from (depth, oldest)


def _tasks(run) -> Iterator[Metric]:
    finished = GaugeMetricFamily(
        "mewdex_tasks_finished_5m",
        "Tasks that ended in the last 5 minutes, by task type and outcome (succeeded|failed).",
        labels=["task_type", "outcome"],
    )
    duration = GaugeMetricFamily(
        "mewdex_task_duration_seconds_5m",
        "Run time (claim to end) of the tasks that ended in the last 5 minutes, by task type, at the "
        "0.5 and 0.95 quantiles and the maximum (quantile 1).",
        labels=["task_type", "quantile"],
    )
    rows = run(
        text(
            "SELECT task_type, status, count(*), "
            "percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - started_at)), "
            "percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - started_at)), "
            "max(extract(epoch FROM completed_at - started_at)) "
            "FROM tasks WHERE status IN ('succeeded', 'failed') AND completed_at > now() - make_interval(secs => :w) "
            "GROUP BY task_type, status"
        ),
        {"w": WINDOW_SECONDS},
    ).all()
    durations: dict[str, list[tuple[int, float, float, float]]] = {}
    for task_type, status, count, p50, p95, top in rows:
        finished.add_metric([task_type, status], count)
        if p50 is not None:
            durations.setdefault(task_type, []).append((count, float(p50), float(p95), float(top)))
    for task_type, parts in sorted(durations.items()):
        # Both outcomes together: the larger group's quantiles (failures are usually few), the overall max.
        count, p50, p95, _ = max(parts)
        duration.add_metric([task_type, "0.5"], p50)
        duration.add_metric([task_type, "0.95"], p95)
        duration.add_metric([task_type, "1"], max(p[3] for p in parts))
    yield from (finished, duration)


def _deliveries(run) -> Iterator[Metric]:
    recent = GaugeMetricFamily(
        "mewdex_channel_deliveries_5m",
        "Channel deliveries created in the last 5 minutes, by channel and status "
        "(queued, retrying, sent, failed, cancelled, unknown).",
        labels=["channel", "status"],
    )
    for channel, status, count in run(
        text(
            "SELECT channel, status, count(*) FROM channel_deliveries "
            "WHERE created_at > now() - make_interval(secs => :w) GROUP BY channel, status"
        ),
        {"w": WINDOW_SECONDS},
    ):
        recent.add_metric([channel, status], count)
    pending = GaugeMetricFamily(
        "mewdex_channel_deliveries_pending",
        "Deliveries not yet sent (queued or retrying), by channel.",
        labels=["channel"],
    )
    for channel, count in run(
        text("SELECT channel, count(*) FROM channel_deliveries WHERE status IN ('queued', 'retrying') GROUP BY channel")
    ):
        pending.add_metric([channel], count)
    yield from (recent, pending)


def _providers(run) -> Iterator[Metric]:
    calls = GaugeMetricFamily(
        "mewdex_provider_calls_5m",
        "Calls to outside systems (connectors) in the last 5 minutes, by provider and outcome (ok|failed).",
        labels=["provider", "outcome"],
    )
    for provider, outcome, count in run(
        text(
            "SELECT coalesce(d.provider, 'unknown'), a.outcome, count(*) FROM external_system_audits a "
            "LEFT JOIN external_system_definitions d ON d.definition_id = a.definition_id "
            "WHERE a.created_at > now() - make_interval(secs => :w) GROUP BY 1, 2"
        ),
        {"w": WINDOW_SECONDS},
    ):
        calls.add_metric([provider, outcome], count)
    cost = GaugeMetricFamily(
        "mewdex_provider_cost_cny_5m",
        "Metered cost (CNY, from MEWDEX_PRICES) of the last 5 minutes' provider calls, by kind.",
        labels=["kind"],
    )
    for kind, total in run(
        text(
            "SELECT kind, sum(cost_cny) FROM usage_events "
            "WHERE created_at > now() - make_interval(secs => :w) GROUP BY kind"
        ),
        {"w": WINDOW_SECONDS},
    ):
        cost.add_metric([kind], float(total or 0))
    yield from (calls, cost)


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
    body = generate_latest(telemetry.REGISTRY) + generate_latest(scrape)
    return Response(body, media_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"})


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """The Prometheus text format (version 0.0.4); 404 ``not_found`` to a caller that may not read it."""
    return await anyio.to_thread.run_sync(_render, request, limiter=_probe_limiter())
