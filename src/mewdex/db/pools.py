"""The connection budget: the pools one process opens (:func:`pool_sizes`, used by :mod:`mewdex.db.engine`)
and the connections a database needs for one ``mewdex serve`` (:func:`server_connections`, the
embedded server's ``max_connections``: :mod:`mewdex.db.embedded`)."""

from __future__ import annotations

from mewdex.config import Settings

SEARCH_LEGS = 3  # keyword, e5, use: the connections one search's legs hold at once


def pool_sizes(settings: Settings, worker_threads: int | None = None) -> dict[str, int]:
    """The connection pools of a process (each web process of ``serve`` has its own), from its settings
    (connections are opened on demand, so a process uses only what it needs):

    - the main pool (requests, workers, maintenance): ``pool_size`` = ``api_concurrency`` (request
      threads, one connection each) + 3 × in-process worker threads (``worker_threads``, else
      ``workers`` in thread mode: the worker's, its heartbeat's and its writer thread's) + 4
      (scheduler, maintenance, health, start-up); ``max_overflow`` 10 for async routes that open
      their own transactions;
    - the search-leg pool (:func:`mewdex.db.engine.get_search_sessionmaker`): ``search_pool`` = 3 legs ×
      ``search_concurrency``, exactly one per leg thread, so a leg never waits for a connection and
      never takes one from the main pool that its request holds one of."""
    if worker_threads is not None:
        threads = worker_threads
    else:
        threads = settings.workers if settings.worker_mode == "thread" else 0
    return {
        "pool_size": settings.api_concurrency + 3 * threads + 4,
        "max_overflow": 10,
        "search_pool": SEARCH_LEGS * settings.search_concurrency,
    }


#: PostgreSQL's default ``max_connections``: one web process of ``serve`` with the default pools (78 at
#: peak), its workers and a few commands fit in it.
BASE_CONNECTIONS = 100


def server_connections(settings: Settings) -> int:
    """The ``max_connections`` a database needs for one ``mewdex serve``: :data:`BASE_CONNECTIONS`, plus
    the peak of each further web process (``MEWDEX_WEB_PROCESSES``): its main pool with its overflow
    and its search legs' pool (:func:`pool_sizes`; 78 with the defaults)."""
    sizes = pool_sizes(settings, 0)  # a web process of several runs no worker threads
    peak = sizes["pool_size"] + sizes["max_overflow"] + sizes["search_pool"]
    return BASE_CONNECTIONS + (settings.serving_processes - 1) * peak
