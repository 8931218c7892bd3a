"""Commands that run mewdex: ``serve``, ``worker``, ``migrate``, ``db stop``."""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated, Any

import typer

from mewdex.cli.common import (
    ExitCode,
    _prepare,
    _setup_logging,
    announce_server,
    console,
    err,
    get_settings,
    watched_folders,
)


def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (default MEWDEX_HOST, 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default MEWDEX_PORT, 8275).")] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=0, max=32, help="Workers (default MEWDEX_WORKERS; MEWDEX_WORKER_MODE says processes or threads)."
        ),
    ] = None,
    processes: Annotated[
        str | None,
        typer.Option(
            "--processes",
            help="Web processes answering on the port, 1–16 or `auto` = min(2, cores) (default "
            "MEWDEX_WEB_PROCESSES, 1): searches use more than one core; each loads the search models.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve the web UI and the API, with workers processing the queue."""
    import uvicorn

    from mewdex.config import get_settings as cached_settings

    if processes is not None:  # the setting MEWDEX_WEB_PROCESSES, for this process and its web processes
        if processes != "auto" and not (processes.isdigit() and 1 <= int(processes) <= 16):
            raise typer.BadParameter("a number from 1 to 16, or auto", param_hint="'--processes'")
        os.environ["MEWDEX_WEB_PROCESSES"] = processes
        cached_settings.cache_clear()
    settings = get_settings()
    if problem := _port_problem(host or settings.host, port or settings.port):
        err.print(f"[red]error:[/red] {problem}")
        raise typer.Exit(ExitCode.CONFLICT)  # in use, as a database in use is
    _setup_logging()
    from mewdex.platform.auth import startup_problem

    if problem := startup_problem(host or settings.host):
        err.print(f"[red]error:[/red] {problem}")
        raise typer.Exit(ExitCode.USAGE)
    web_processes = settings.serving_processes
    if web_processes > 1 and not (port or settings.port):
        err.print(
            "[red]error:[/red] port 0 (any free port) needs one web process: each of several binds the port "
            "itself; choose a port with --port or MEWDEX_PORT, or serve with --processes 1"
        )
        raise typer.Exit(ExitCode.USAGE)
    state = None
    stop_watching = forget = lambda: None
    try:
        if web_processes > 1:  # before anything loads prometheus_client (runtime.share_metrics)
            from mewdex.runtime import prepare_serve_dir, share_metrics

            state = prepare_serve_dir()
            share_metrics(state / "metrics")
        _prepare()  # fails early with a clear message when the database cannot start
        folders = watched_folders(settings.watch_dirs, "MEWDEX_WATCH_DIRS") if settings.watch_dirs else []
        console.print(
            f"mewdex serving on http://{host or settings.host}:{port or settings.port}  (data: {settings.data_dir}"
            + (f"; {web_processes} web processes)" if web_processes > 1 else ")")
        )
        _print_setup_code()
        # The options are the settings MEWDEX_HOST/MEWDEX_WORKERS for this process; uvicorn builds the app from
        # its import string, so `cli` never imports `web` (import-linter: the interfaces are independent).
        os.environ["MEWDEX_HOST"] = host or settings.host
        if workers is not None:
            os.environ["MEWDEX_WORKERS"] = str(workers)
        cached_settings.cache_clear()
        bound = host or settings.host
        forget = announce_server(f"http://{f'[{bound}]' if ':' in bound else bound}:{port or settings.port}")
        stop_watching = _start_watching(folders)
        options: dict[str, Any] = {
            "factory": True,
            "host": host or settings.host,
            "port": port or settings.port,
            "log_level": "warning",
        }
        if state is None:
            # The app decides the client address itself (web.security.client_address, from
            # MEWDEX_TRUSTED_PROXIES); uvicorn's own X-Forwarded-For handling, which trusts 127.0.0.1 by
            # default, would let any local process or TCP tunnel pick its address.
            uvicorn.run("mewdex.web.app:create_app", proxy_headers=False, **options)
        else:
            _serve_processes(web_processes, state, options)
    finally:
        stop_watching()
        forget()
        if state is not None:
            from mewdex.runtime import remove_serve_dir

            remove_serve_dir(state)


def _serve_processes(count: int, state, options: dict[str, Any]) -> None:
    """``serve`` with ``count`` web processes (``cli.web_processes``): their sockets bound here (an
    address taken since the check at the start is the same error), until SIGTERM/SIGINT."""
    from mewdex.cli.web_processes import listening_sockets, serve_processes

    try:
        sockets = listening_sockets(options["host"], options["port"], count)
    except OSError as exc:
        err.print(f"[red]error:[/red] {_port_in_use(options['host'], options['port'])} ({exc.strerror or exc})")
        raise typer.Exit(ExitCode.CONFLICT) from exc
    try:
        if not serve_processes(sockets, state, options):
            err.print(
                "[red]error:[/red] stopped: a web process could not start, or they kept dying (see the log above)"
            )
            raise typer.Exit(ExitCode.FAILED)
    finally:
        for sock in sockets:
            sock.close()


def _start_watching(folders: list):
    """Watch ``folders`` beside the server (a thread of this process); returns the function that stops it."""
    if not folders:
        return lambda: None
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library import watch
    from mewdex.storage import blob_store

    console.print("watching " + ", ".join(str(f.root) for f in folders), soft_wrap=True)
    return watch.start(get_sessionmaker(), blob_store(), folders)


def _port_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be served (already in use: by mewdex or something else), or None."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return f"cannot resolve {host!r}: {exc}"
    family, _type, _proto, _name, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError:
            pass
        else:
            return None
    return _port_in_use(host, port)


def _port_in_use(host: str, port: int) -> str:
    return (
        f"port {port} on {host} is already in use (is mewdex already serving? open http://{host}:{port}); "
        f"stop that process or choose another with --port or MEWDEX_PORT"
    )


def _print_setup_code() -> None:
    """No account yet: print the one-time code that lets a browser sign up as the admin."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.platform.setup import issue_setup_code

    with get_sessionmaker().begin() as session:
        code = issue_setup_code(session)
    if code:
        console.print(
            f"no account yet (this machine needs none). To add the admin, sign up at /login with the "
            f"one-time setup code {code}  — or run: mewdex user create EMAIL --admin"
        )


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
    concurrency: Annotated[
        int, typer.Option("--concurrency", "--threads", "-c", min=1, max=64, help="Worker threads in this process.")
    ] = 2,
    lanes: Annotated[
        str | None, typer.Option(help="Comma-separated lanes to serve (default: all: default,visual,agent,embedding).")
    ] = None,
    grace: Annotated[
        float | None,
        typer.Option(
            help="Seconds SIGTERM waits for running tasks before releasing them (default MEWDEX_WORKER_GRACE_SECONDS)."
        ),
    ] = None,
    parent_pid: Annotated[
        int | None, typer.Option(hidden=True, help="Stop when this process (the starter) dies.")
    ] = None,
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
        raise typer.Exit(ExitCode.FAILED) from exc
    if released:
        err.print(f"released {released} running tasks back to the queue")
    console.print("mewdex worker: stopped")
    # Every task is finished or handed back: end the process here. The interpreter's own shutdown
    # would wait for anything a handler left running (a thread pool's worker in a long poll, a native
    # library's threads): a stopped worker then outlived its grace period until it was killed.
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(0)


def migrate() -> None:
    """Upgrade the database schema to the newest revision."""
    from mewdex.db.engine import get_engine
    from mewdex.db.migrate import upgrade

    console.print(f"schema at revision {upgrade(get_engine())}")


def db_stop(
    force: Annotated[bool, typer.Option("--force", help="Stop even while other processes use the database.")] = False,
) -> None:
    """Stop the embedded PostgreSQL server of this data dir (refuses while other processes use it)."""
    from mewdex.db.embedded import clients, stop

    pgdata = get_settings().pgdata
    if not force and (users := clients(pgdata)):
        err.print("[red]error:[/red] the database is in use by:")
        for line in users:
            err.print(f"  {line}")
        err.print("stop those first (Ctrl-C in `mewdex serve`/`mewdex worker`), or run `mewdex db stop --force`")
        raise typer.Exit(ExitCode.CONFLICT)
    stopped = stop(pgdata)
    console.print("stopped" if stopped else "not running")
