"""The FastAPI application: API, media, pages; runs migrations and worker threads on start."""

from __future__ import annotations

import logging
import threading
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from mewdex.config import get_settings
from mewdex.db import supervisor
from mewdex.db.engine import get_engine, get_sessionmaker
from mewdex.db.migrate import upgrade
from mewdex.library.scopes import default_scope, ensure_scope
from mewdex.pipeline import models
from mewdex.pipeline.visual import visual_model
from mewdex.search import generations
from mewdex.search.text import tokenize
from mewdex.queue.worker import start_workers
from mewdex.storage import blob_store, journal
from mewdex.web import errors, failures, security
from mewdex.web.guards import RequestGuards
from mewdex.web.hygiene import JsonTextGuard
from mewdex.web.routers import account_pages, admin, auth, collections, health, memes, pages, search, tasks, usage, visual

log = logging.getLogger(__name__)
RECOVERY_INTERVAL_SECONDS = 300
# A staging file older than this belongs to a write that died (writes take milliseconds).
STAGING_MAX_AGE_SECONDS = 3600


def prepare_database() -> None:
    """Migrate to head, make sure the default scope exists, and recover interrupted storage work.

    Every entry point (serve, worker, CLI commands) calls this, so a killed import is finished
    or undone by whatever mewdex command runs next. It also checks the configured text models
    against the active search generations and starts a rebuild where they differ (VEC-03).
    """
    upgrade(get_engine())
    with get_sessionmaker().begin() as session:
        ensure_scope(session, default_scope())
    recover_storage()
    generations.check_text_models(get_sessionmaker())


def recover_storage() -> None:
    """Complete or compensate interrupted uploads, renames and deletes; remove stale staging files."""
    with get_sessionmaker().begin() as session:
        journal.recover(session, blob_store())
    blob_store().clean_staging(older_than_seconds=STAGING_MAX_AGE_SECONDS)


def _recovery_loop(stop: threading.Event) -> None:
    while not stop.wait(RECOVERY_INTERVAL_SECONDS):
        try:
            recover_storage()
        except Exception:
            log.exception("storage recovery failed")


def _warm_models() -> None:
    """Load the query embedders now so the first search does not pay for it."""
    try:
        tokenize("预热 warm-up")
        for embedder in models.text_embedders().values():
            embedder.embed_query("warm-up")
        visual_model().load()
    except Exception:
        log.exception("could not load a model; its search leg is unavailable until it loads")


def _disk_rescan_loop(stop: threading.Event) -> None:
    from mewdex.platform.quotas import rescan

    while not stop.wait(get_settings().disk_rescan_seconds):
        try:
            if fixed := rescan(get_sessionmaker()):
                log.warning("disk usage drift corrected: %s", fixed)
        except Exception:
            log.exception("disk usage rescan failed")


def create_app(*, workers: int | None = None, host: str | None = None) -> FastAPI:
    """The app; ``workers`` workers (default ``MEWDEX_WORKERS``, see ``MEWDEX_WORKER_MODE``) run while it is up; ``host``
    is the bind address (default ``MEWDEX_HOST``), which decides the automatic auth mode."""
    count = get_settings().workers if workers is None else workers

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        prepare_database()
        threading.Thread(target=_warm_models, name="warm-models", daemon=True).start()
        stop = threading.Event()
        recovery = threading.Thread(target=_recovery_loop, args=(stop,), name="storage-recovery", daemon=True)
        recovery.start()
        threading.Thread(target=_disk_rescan_loop, args=(stop,), name="disk-rescan", daemon=True).start()
        supervisor.start(stop)  # a crashed database is noticed and (embedded) restarted within seconds
        pool = start_workers(get_sessionmaker(), count)
        _app.state.worker_pool = pool
        yield
        stop.set()
        pool.stop()

    # Every route may answer these errors (auth, scope 404s, validation, quotas, rate limits).
    app = FastAPI(title="mewdex", version="0.1.0", lifespan=lifespan,
                  responses=errors.error_responses(400, 401, 403, 404, 409, 413, 415, 422, 429, 503))
    app.state.bind_host = host or get_settings().host
    errors.install(app)
    failures.install(app)
    app.add_middleware(RequestGuards)
    app.add_middleware(JsonTextGuard)  # 422 invalid_text for NULs and lone surrogates in JSON bodies
    security.install(app, app.state.bind_host)  # Host allow-list, peer rule, body limits, headers: before the guards
    for module in (health, search, memes, visual, collections, tasks, pages, auth, usage, admin, account_pages):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static")
    return app
