"""The FastAPI application: API, media, pages; on start, :mod:`mewdex.runtime` prepares the database and starts the
workers."""

from __future__ import annotations

import logging
import multiprocessing
import threading
from contextlib import asynccontextmanager
from pathlib import Path

from anyio import to_thread
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.routing import Route

from mewdex import runtime
from mewdex.config import get_settings, package_version
from mewdex.runtime import prepare_database, recover_storage  # noqa: F401 - re-exported (benches, older callers)
from mewdex.web import capabilities, errors, failures, metrics, route_table, security
from mewdex.web.base_path import BasePath
from mewdex.web.guards import RequestGuards
from mewdex.web.hygiene import JsonTextGuard
from mewdex.web.mcp_mount import McpMount
from mewdex.web.routers import (
    account_pages,
    admin,
    api_docs,
    auth,
    collection_pages,
    collection_shares,
    collections,
    feedback,
    health,
    library_pages,
    meme_pages,
    memes,
    pwa,
    recaption,
    search,
    search_marks,
    search_pages,
    share_pages,
    sso,
    tag_pages,
    tags,
    task_pages,
    tasks,
    trash,
    usage,
    visual,
)

log = logging.getLogger(__name__)

#: What every route may answer besides its own (auth, scope 404s, validation, quotas, rate limits).
ERROR_RESPONSES = errors.error_responses(400, 401, 403, 404, 409, 413, 415, 422, 429, 503)


def create_app(*, workers: int | None = None, host: str | None = None, web_process: bool = False) -> FastAPI:
    """The app; ``workers`` workers (default ``MEWDEX_WORKERS``, see ``MEWDEX_WORKER_MODE``) run while it is up;
    ``host`` is the bind address (default ``MEWDEX_HOST``), which decides the automatic auth mode.
    ``web_process``: the app of a web process of a ``serve`` with several (:func:`create_web_process_app`),
    whose parent process prepared the database and runs the workers: it starts none."""
    count = get_settings().workers if workers is None else workers
    mcp_http = McpMount(f"http://{host or get_settings().host}:{get_settings().port}")

    # Every router, ours then each capability package's (web.capabilities: the connectors', the
    # assistant's, the channel framework's, each channel package's, the schedules'), from the process's
    # one route table (web.route_table: FastAPI builds their request state once per process, not per app).
    routers = [
        module.router
        for module in (
            metrics,
            health,
            search,
            search_marks,
            feedback,
            memes,
            tags,
            trash,
            recaption,
            visual,
            collections,
            collection_shares,
            share_pages,
            tasks,
            search_pages,
            meme_pages,
            library_pages,
            collection_pages,
            tag_pages,
            task_pages,
            auth,
            sso,
            usage,
            admin,
            account_pages,
            pwa,
        )
    ]
    table = route_table.table([*routers, *capabilities.routers()], ERROR_RESPONSES)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        # Requests worked on at once (sync routes run on these threads); the database pool is sized
        # from the same setting (db.pools.pool_sizes), so a request never waits for its connection.
        to_thread.current_default_thread_limiter().total_tokens = get_settings().api_concurrency
        _app.state.shutting_down = False
        metrics.watch_shutdown(_app)  # /readyz answers 503 from the first signal on
        if not web_process:
            runtime.prepare_database()
        if get_settings().warm_models:
            threading.Thread(target=runtime.warm_models, name="warm-models", daemon=True).start()
        # The database's supervision (a crashed one is noticed and, embedded, restarted within seconds)
        # and the workers; periodic maintenance runs as scheduled tasks, which the workers' schedulers
        # enqueue (without workers, this process's scheduler, for the workers of other processes).
        server = runtime.join_server() if web_process else runtime.start_server(count)
        _app.state.worker_pool = server.pool
        async with mcp_http.running():  # the MCP transport's task group (/mcp, built at its first request)
            # The routers' own start-up and shut-down (on_startup/on_shutdown, a lifespan), which FastAPI
            # merged into the table when it included them: run by every app that serves the table.
            async with table.lifespan_context(_app) as state:
                yield state
        _app.state.shutting_down = True
        server.stop()

    app = FastAPI(
        title="mewdex",
        version=package_version(),
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc come from api_docs (assets served here, CSP-clean)
        redoc_url=None,
        responses=ERROR_RESPONSES,
    )
    app.state.bind_host = host or get_settings().host
    errors.install(app)
    failures.install(app)
    app.add_middleware(RequestGuards)
    app.add_middleware(JsonTextGuard)  # 422 invalid_text for NULs and lone surrogates in JSON bodies
    security.install(app, app.state.bind_host)  # Host allow-list, peer rule, body limits, headers: before the guards
    app.add_middleware(metrics.HttpMetrics)  # every answer counts, refusals included
    app.add_middleware(BasePath)  # MEWDEX_BASE_PATH as the ASGI root_path (web.base_path)
    app.add_middleware(route_table.ServingApp)  # outermost: the app whose dependency_overrides apply
    app.router.routes.extend(table.routes)
    # MCP over streamable HTTP: the SDK's app (bearer auth by personal API token), built at the first
    # request to these paths (web.mcp_mount), serves them.
    for path in mcp_http.PATHS:
        app.router.routes.append(Route(path, endpoint=mcp_http, include_in_schema=False))
    api_docs.install(app)
    # The shell's scripts and styles, then each capability package's static/ folder, under one /static/.
    static = StaticFiles(
        directory=Path(__file__).parent / "static",
        packages=[(name, "static") for name in capabilities.static_packages()],
    )
    app.mount("/static", static, name="static")
    return app


def create_web_process_app() -> FastAPI:
    """The app of one web process of a ``serve`` with several (``MEWDEX_WEB_PROCESSES``; uvicorn's
    factory in each process it starts): it answers requests only; the parent that started it prepared
    the database and runs the workers, the scheduler and the database's supervision
    (:func:`mewdex.runtime.join_server`)."""
    runtime.become_web_process()
    assert multiprocessing.parent_process() is not None, "a web process is started by serve (cli.web_processes)"
    return create_app(workers=0, web_process=True)
