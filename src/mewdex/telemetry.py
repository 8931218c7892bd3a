"""Process-local metrics, recorded where the work happens (README "Monitoring").

The series kept in this process's memory: HTTP requests (the web layer records them), search and
search-leg latency (``search.service``), search reads that left the replica for the main database.
They live in :data:`REGISTRY`, which ``GET /metrics`` renders (:func:`exposition`) together with the
values read from the database at scrape time (hook ``metric_collectors``: queue, tasks, deliveries,
providers; and ``web.metrics``: pools, workers, disk), so the
API and worker processes share no memory. prometheus_client appends ``_total`` to counters and
``_bucket``/``_sum``/``_count`` to histograms.

A ``serve`` with several web processes (``MEWDEX_WEB_PROCESSES``) keeps these values in
prometheus_client's multiprocess files instead (``PROMETHEUS_MULTIPROC_DIR``, set by its parent before
any of them loads prometheus_client: :func:`mewdex.runtime.share_metrics`), and a scrape, which one
of them answers, sums every one's (:func:`exposition`).
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.process_collector import ProcessCollector

#: Window of the scrape-time "recent" series (``*_5m``: tasks finished, deliveries, provider calls
#: and cost), in seconds; the collectors of hook ``metric_collectors`` use it.
WINDOW_SECONDS = 300

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)  # process_resident_memory_bytes, process_cpu_seconds_total, open fds

# Seconds; from a fast API answer (a few ms) to a slow upload or export (tens of seconds).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

HTTP_REQUESTS = Counter(
    "mewdex_http_requests",
    "HTTP requests answered, by method, route template (`unmatched` for no route) and status code.",
    ["method", "route", "status"],
    registry=REGISTRY,
)
HTTP_LATENCY = Histogram(
    "mewdex_http_request_duration_seconds",
    "Time from the request's arrival to the end of its answer, by method and route template.",
    ["method", "route"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
SEARCH_LATENCY = Histogram(
    "mewdex_search_duration_seconds",
    "Whole text searches (embedding, legs, fusion, hydration).",
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
SEARCHES_SHARED = Counter(
    "mewdex_searches_shared",
    "Searches answered with the answer of an identical search already running in the process.",
    registry=REGISTRY,
)
SEARCH_LEG_LATENCY = Histogram(
    "mewdex_search_leg_duration_seconds",
    "One search leg's statement (keyword, e5, use, extra legs), by leg and the database it read (replica|primary).",
    ["leg", "database"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
SEARCH_REPLICA_FALLBACKS = Counter(
    "mewdex_search_replica_fallbacks",
    "Search legs that read the main database instead of MEWDEX_SEARCH_DATABASE_URL, by reason (unreachable|lagging).",
    ["reason"],
    registry=REGISTRY,
)

#: prometheus_client's variable: the folder of the multiprocess files, in every web process of a
#: ``serve`` with several (set by :func:`mewdex.runtime.share_metrics`).
SHARED_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
_shared: CollectorRegistry | None = None


def exposition() -> bytes:
    """The series of :data:`REGISTRY` in the Prometheus text format: this process's values, or, in a
    web process of a ``serve`` with several, the counters and histograms of all of them summed (the
    same names and labels; no ``_created`` samples) and ``process_*`` of the process that answers."""
    global _shared
    directory = os.environ.get(SHARED_DIR_ENV)
    if not directory:
        return generate_latest(REGISTRY)
    if _shared is None:
        registry = CollectorRegistry(auto_describe=True)
        MultiProcessCollector(registry, path=directory)
        ProcessCollector(registry=registry)
        _shared = registry
    return generate_latest(_shared)


def child_environment() -> dict[str, str]:
    """This process's environment for a child process whose series must stay its own (a ``mewdex
    worker`` of ``serve``: its values never were in ``serve``'s ``/metrics``)."""
    return {name: value for name, value in os.environ.items() if name != SHARED_DIR_ENV}
