"""Process-local metrics, recorded where the work happens (README "Monitoring").

The series kept in this process's memory: HTTP requests (the web layer records them), search and
search-leg latency (``search.service``), search reads that left the replica for the main database.
They live in :data:`REGISTRY`, which ``GET /metrics`` renders together with the values read from the
database at scrape time (hook ``metric_collectors``: queue, tasks, deliveries, providers; and
``web.metrics``: pools, workers, disk), so the
API and worker processes share no memory. prometheus_client appends ``_total`` to counters and
``_bucket``/``_sum``/``_count`` to histograms.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
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
