"""The main pool of a ``mewdex worker -c N`` process counts its N threads (db.pools.pool_sizes)."""

import json
import os
import subprocess
import sys

_PROBE = """
import json, sys
from mewdex.config import get_settings
from mewdex.db import engine
threads = int(sys.argv[1])
if threads:
    engine.size_for_worker_threads(threads)
pool = engine.get_engine().pool
try:
    engine.size_for_worker_threads(1)
    late = "accepted"
except RuntimeError:
    late = "refused"
print(json.dumps({"size": pool.size(), "api": get_settings().api_concurrency, "late": late}))
"""


def _probe(threads: int) -> dict:
    # A URL no server answers: creating the engine opens no connection.
    env = {**os.environ, "MEWDEX_DATABASE_URL": "postgresql://nobody@127.0.0.1:9/none", "MEWDEX_WORKER_MODE": "process"}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(threads)], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_worker_process_sizes_its_pool_for_its_threads() -> None:
    worker = _probe(20)
    plain = _probe(0)
    # three connections per thread (its own, its heartbeat's, its writer's) on top of the base
    assert worker["size"] == plain["size"] + 3 * 20
    assert plain["size"] == plain["api"] + 4
    # sizing an engine that exists would be silently ignored: refused instead
    assert worker["late"] == "refused"


def test_pool_lines_stay_out_of_the_default_log():
    """At the default level (INFO) a disposed pool logs nothing: "Pool disposed. Pool size: 45
    Connections in pool: 0 Current Overflow: -44" is SQLAlchemy's debugging, not mewdex's news."""
    probe = (
        "from mewdex.cli.common import _setup_logging\n"
        "from mewdex.db import engine\n"
        "_setup_logging()\n"
        "import logging; logging.getLogger('mewdex.probe').info('probe line')\n"
        "engine.get_engine().dispose()\n"
    )
    env = {**os.environ, "MEWDEX_DATABASE_URL": "postgresql://nobody@127.0.0.1:9/none", "MEWDEX_LOG_LEVEL": "INFO"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert "probe line" in out.stderr  # INFO lines of mewdex do show
    assert "Pool" not in out.stderr and "Overflow" not in out.stderr, out.stderr


def test_the_database_allows_the_pools_of_each_further_web_process():
    """``max_connections`` of the embedded server (db.pools.server_connections): PostgreSQL's 100 for one
    web process, plus each further one's main pool, overflow and search legs' pool."""
    from mewdex.config import Settings
    from mewdex.db.pools import server_connections

    one = Settings(web_processes=1, api_concurrency=40, search_concurrency=8, workers=2, worker_mode="thread")
    assert server_connections(one) == 100
    two = one.model_copy(update={"web_processes": 2})
    assert server_connections(two) == 100 + (40 + 4 + 10) + 3 * 8  # its web processes run no worker threads
    assert server_connections(two.model_copy(update={"web_processes": 4, "api_concurrency": 16})) == 100 + 3 * 54


def test_the_embedded_server_keeps_its_own_max_connections_with_one_web_process(monkeypatch):
    """``mewdex.conf`` (included at the end of ``postgresql.conf``) sets ``max_connections`` only where
    ``serve`` needs more than PostgreSQL's default: with one web process one set in
    ``postgresql.conf`` holds."""
    from mewdex.config import get_settings
    from mewdex.db.embedded import server_settings

    monkeypatch.setenv("MEWDEX_WEB_PROCESSES", "1")
    get_settings.cache_clear()
    try:
        assert "max_connections" not in server_settings(4 << 30)
        monkeypatch.setenv("MEWDEX_WEB_PROCESSES", "2")
        get_settings.cache_clear()
        assert int(server_settings(4 << 30)["max_connections"]) > 100
    finally:
        get_settings.cache_clear()
