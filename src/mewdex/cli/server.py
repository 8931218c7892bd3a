"""Commands that run mewdex: ``serve``, ``worker``, ``migrate``, ``db stop``."""

from __future__ import annotations

from typing import Annotated

import typer

from mewdex.cli.common import _prepare, _setup_logging, console, err
from mewdex.config import get_settings


def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (default MEWDEX_HOST, 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default MEWDEX_PORT, 8275).")] = None,
    workers: Annotated[int | None, typer.Option(help="Workers (default MEWDEX_WORKERS; MEWDEX_WORKER_MODE says processes or threads).")] = None,
) -> None:
    """Serve the web UI and the API, with workers processing the queue."""
    import os

    import uvicorn

    _setup_logging()
    settings = get_settings()
    from mewdex.platform.auth import startup_problem

    if problem := startup_problem(host or settings.host):
        err.print(f"[red]error:[/red] {problem}")
        raise typer.Exit(2)
    _prepare()  # fails early with a clear message when the database cannot start
    console.print(f"mewdex serving on http://{host or settings.host}:{port or settings.port}  (data: {settings.data_dir})")
    _print_setup_code()
    # The options are the settings MEWDEX_HOST/MEWDEX_WORKERS for this process; uvicorn builds the app from
    # its import string, so `cli` never imports `web` (import-linter: the interfaces are independent).
    os.environ["MEWDEX_HOST"] = host or settings.host
    if workers is not None:
        os.environ["MEWDEX_WORKERS"] = str(workers)
    get_settings.cache_clear()
    uvicorn.run("mewdex.web.app:create_app", factory=True, host=host or settings.host, port=port or settings.port,
                log_level="warning")


def _print_setup_code() -> None:
    """No account yet: print the one-time code that lets a browser sign up as the admin."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.platform.setup import issue_setup_code

    with get_sessionmaker().begin() as session:
        code = issue_setup_code(session)
    if code:
        console.print(f"no account yet (this machine needs none). To add the admin, sign up at /login with the "
                      f"one-time setup code {code}  — or run: mewdex user create EMAIL --admin")


def _limit_memory() -> None:
    """Cap this worker's address space (``MEWDEX_WORKER_MEMORY_LIMIT_MB``): an image that slips past
    the decode budgets fails its task with MemoryError instead of taking the machine down."""
    import resource

    limit_mb = get_settings().worker_memory_limit_mb
    if limit_mb:
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def worker(
    concurrency: Annotated[int, typer.Option("--concurrency", "--threads", "-c", min=1, max=64,
                                             help="Worker threads in this process.")] = 2,
    lanes: Annotated[str | None, typer.Option(help="Comma-separated lanes to serve (default: all: "
                                                   "default,visual,agent,embedding).")] = None,
    grace: Annotated[float | None, typer.Option(help="Seconds SIGTERM waits for running tasks before releasing "
                                                     "them (default MEWDEX_WORKER_GRACE_SECONDS).")] = None,
    parent_pid: Annotated[int | None, typer.Option(hidden=True, help="Stop when this process (the starter) dies.")] = None,
) -> None:
    """Run queue workers only (scale out with more of these against the same database).

    SIGTERM/SIGINT: stop claiming, let running tasks finish within the grace period, release the rest."""
    from mewdex.db.embedded import EmbeddedDatabaseError
    from mewdex.runtime import run_worker

    lane_list = [lane.strip() for lane in lanes.split(",") if lane.strip()] if lanes else None
    _setup_logging()
    _limit_memory()
    try:
        released = run_worker(concurrency, lane_list, grace, parent_pid, announce=console.print)
    except EmbeddedDatabaseError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc
    if released:
        err.print(f"released {released} running tasks back to the queue")


def migrate() -> None:
    """Upgrade the database schema to the newest revision."""
    from mewdex.db.engine import get_engine
    from mewdex.db.migrate import upgrade

    console.print(f"schema at revision {upgrade(get_engine())}")


def db_stop() -> None:
    """Stop the embedded PostgreSQL server of this data dir."""
    from mewdex.db.embedded import stop

    stopped = stop(get_settings().pgdata)
    console.print("stopped" if stopped else "not running")
