"""Start-up shared by every entry point (``serve``, ``worker``, CLI commands): the database
(migrate, default scope, storage recovery, search-model check), the task types, model warm-up, and
the worker process. Sits between the interfaces (``cli``, ``web``) and the services; never imports
FastAPI or ``mewdex.web`` (``mewdex worker`` runs without them).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import socket
import time

from mewdex import hooks
from mewdex.config import get_settings
from mewdex.db.engine import get_engine, get_sessionmaker, size_for_worker_threads
from mewdex.db.migrate import upgrade
from mewdex.runtime.recovery import SYSTEM_SCOPE, recover_storage  # noqa: F401 - part of the runtime's API

log = logging.getLogger(__name__)

# /health counts live worker processes by their connections' application_name.
WORKER_APPLICATION_PREFIX = "mewdex-worker"


def load_plugins() -> None:
    """Import every plugin (:func:`mewdex.hooks.load_all`: the built-ins, ``MEWDEX_TASK_MODULES``, the
    entry points; idempotent): what a worker and a server do, since a worker runs any task type.
    Other commands import a plugin only when they use what it provides (:mod:`mewdex.hooks`).
    Validates every plugin's settings (hook ``settings``): a bad one stops the start with
    :class:`mewdex.config.ConfigError`, as a core setting does."""
    hooks.load_all()
    settings = get_settings()
    for group in hooks.implementations("settings").values():
        settings.group(group)


def prepare_database() -> None:
    """Migrate to head, make sure the default scope exists, and recover interrupted storage work.

    Every entry point (serve, worker, CLI commands) calls this, so a killed import is finished
    or undone by whatever mewdex command runs next. It also checks the configured text models
    against the active search generations and starts a rebuild where they differ (VEC-03).
    """
    from mewdex.db.models import ScopeContext
    from mewdex.library.scopes import default_scope, ensure_scope
    from mewdex.search import generations

    upgrade(get_engine())
    with get_sessionmaker().begin() as session:
        ensure_scope(session, default_scope())
        ensure_scope(session, ScopeContext(SYSTEM_SCOPE))
    recover_storage()
    generations.check_text_models(get_sessionmaker())
    check_search_recipe()
    check_keyword_recipe()
    check_name_rules()
    configure_providers()


SEARCH_RECIPE_SETTING = "search_recipe"


def _queue_on_change(setting: str, current, queue) -> tuple[object, list[str]]:
    """Start-up: when ``platform_settings.<setting>`` differs from ``current`` (nothing recorded counts
    as a change: a data dir from before it was recorded; a fresh one has no library to queue for),
    call ``queue(session, scope_id)`` for every library (:func:`mewdex.library.listing.library_scopes`)
    and record ``current`` — one transaction under an advisory lock named after the setting, so
    processes starting together queue once. Returns (the value recorded before, the scopes queued)."""
    from sqlalchemy import text

    from mewdex.library import listing
    from mewdex.platform.instance import get_setting, set_setting

    with get_sessionmaker().begin() as session:
        session.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": setting})
        stored = get_setting(session, setting, None)
        if stored == current:
            return stored, []
        scopes = listing.library_scopes(session)
        for scope_id in scopes:
            queue(session, scope_id)
        set_setting(session, setting, current)
    return stored, scopes


def _libraries(n: int) -> str:
    return f"{n} librar{'y' if n == 1 else 'ies'}"


def check_search_recipe() -> list[str]:
    """Start-up check: when the search recipe (:func:`mewdex.search.documents.recipe`) differs from
    the one the stored vectors were built with (``platform_settings.search_recipe``), start a rebuild
    of every leg of every library (``search_reindex`` tasks, reason ``recipe_changed``; each new
    generation is switched to through the eval gate; progress on the admin page). None recorded
    counts as a change when a library is indexed (a data dir from before the recipe was recorded);
    a fresh one only records it. Returns the scopes whose rebuild was started."""
    from mewdex.search import generations
    from mewdex.search.documents import recipe

    current = recipe()
    stored, scopes = _queue_on_change(
        SEARCH_RECIPE_SETTING,
        current,
        lambda session, scope_id: generations.start_reindex(session, scope_id, reason="recipe_changed"),
    )
    if scopes:
        log.warning(
            "search: the search recipe changed (%s → %s): rebuilding the vectors of %s in the background "
            "(task type search_reindex; search serves the old ones until each new one passes the eval gate)",
            stored,
            current,
            _libraries(len(scopes)),
        )
    return scopes


KEYWORD_RECIPE_SETTING = "keyword_recipe"


def check_keyword_recipe() -> list[str]:
    """Start-up check: when the keyword recipe (:data:`mewdex.search.documents.KEYWORD_VERSION`) differs
    from the one recorded (``platform_settings.keyword_recipe``; none recorded: a library indexed before
    it had a version), queue the rewrite of every library's keyword documents (``keyword_rebuild``
    tasks) and record it. Keyword search serves the old documents until each is rewritten. Returns the
    scopes queued."""
    from mewdex.pipeline import keyword_rebuild
    from mewdex.search.documents import KEYWORD_VERSION

    stored, scopes = _queue_on_change(KEYWORD_RECIPE_SETTING, KEYWORD_VERSION, keyword_rebuild.submit_keyword_rebuild)
    if scopes:
        log.warning(
            "search: the keyword recipe changed (%s → %s): rewriting the keyword documents of %s in the "
            "background (task type keyword_rebuild)",
            stored,
            KEYWORD_VERSION,
            _libraries(len(scopes)),
        )
    return scopes


NAME_RULES_SETTING = "name_rules"


def check_name_rules() -> list[str]:
    """Start-up check: when the naming rules (:data:`mewdex.pipeline.name_repair.NAME_RULES`) differ from
    the ones recorded (``platform_settings.name_rules``; none recorded: a library named before the rules
    had a version), queue the name repair of every library (``meme_name_repair`` tasks; manual names are
    never touched) and record them. Returns the scopes whose repair was queued."""
    from mewdex.pipeline import name_repair

    stored, scopes = _queue_on_change(NAME_RULES_SETTING, name_repair.NAME_RULES, name_repair.submit_name_repair)
    if scopes:
        log.warning(
            "names: the naming rules changed (%s → %s): renaming the memes of %s in the background "
            "(task type meme_name_repair; names people gave are kept)",
            stored,
            name_repair.NAME_RULES,
            _libraries(len(scopes)),
        )
    return scopes


def configure_providers() -> None:
    """The platform connector from ``MEWDEX_OPENAI_*`` (created or updated; a bad value is logged,
    never fatal: mewdex works without a provider). Without ``MEWDEX_OPENAI_BASE_URL`` nothing is
    imported (the client and its HTTP stack stay unloaded for a light command)."""
    if not get_settings().openai_base_url:
        return
    from mewdex.providers.errors import ProviderError
    from mewdex.providers.openai_compat import configure_from_env

    try:
        configure_from_env(get_sessionmaker())
    except ProviderError as exc:
        log.error("MEWDEX_OPENAI_BASE_URL is not usable (%s): %s", exc.code, exc.message)


def warm_models() -> None:
    """Load the query embedders and the visual model now so the first search does not pay for it."""
    from mewdex.inference import models
    from mewdex.pipeline.visual import visual_model
    from mewdex.search.text import tokenize

    try:
        tokenize("预热 warm-up")
        for embedder in models.text_embedders().values():
            embedder.embed_query("warm-up")
        visual_model().load()
    except Exception:
        log.exception("could not load a model; its search leg is unavailable until it loads")


def scheduler():
    """A scheduler of the built-in maintenance schedules (:mod:`mewdex.runtime.maintenance`)."""
    from mewdex.queue.scheduler import Scheduler
    from mewdex.runtime import maintenance

    return Scheduler(get_sessionmaker(), maintenance.schedules())


def start_workers(count: int):
    """Start ``count`` workers for ``serve`` / ``import --wait`` (``MEWDEX_WORKER_MODE``); the
    maintenance schedules run in them. Returns the pool (``stop()``, ``status()``)."""
    from mewdex.queue.worker import start_workers as start

    load_plugins()
    return start(get_sessionmaker(), count, scheduler=scheduler())


def start_scheduler():
    """A scheduler thread for a process without worker threads (``serve`` with no workers, or with
    child processes): it only enqueues; any worker runs the tasks. Returns it (``stop()``)."""
    from mewdex.queue.scheduler import SchedulerThread
    from mewdex.runtime import maintenance

    load_plugins()
    thread = SchedulerThread(get_sessionmaker(), maintenance.schedules())
    thread.start()
    return thread


def queue_processors(session) -> list[str]:
    """The processes connected to the database that process the queue: ``mewdex worker`` processes
    (:data:`WORKER_APPLICATION_PREFIX`) and ``mewdex serve`` (its workers run inside it unless
    ``--workers 0``), by ``application_name`` (see ``db.engine``). Empty: queued tasks wait."""
    from sqlalchemy import text

    return list(
        session.execute(
            text(
                "SELECT DISTINCT application_name FROM pg_stat_activity WHERE application_name LIKE :w"
                " OR application_name LIKE 'mewdex serve:%' ORDER BY 1"
            ),
            {"w": f"{WORKER_APPLICATION_PREFIX}:%"},
        ).scalars()
    )


def worker_processes(session) -> int:
    """How many ``mewdex worker`` processes are connected to the database now (by
    ``application_name``, :data:`WORKER_APPLICATION_PREFIX`); ``/health`` and ``/metrics`` show it."""
    from sqlalchemy import text

    return int(
        session.execute(
            text("SELECT count(DISTINCT application_name) FROM pg_stat_activity WHERE application_name LIKE :p"),
            {"p": f"{WORKER_APPLICATION_PREFIX}:%"},
        ).scalar_one()
    )


def lower_priority() -> None:
    """Add ``MEWDEX_WORKER_NICE`` to this worker process's niceness (the ``mewdex worker`` process,
    also each one ``serve`` and ``import --wait`` start), so that on a busy small machine the pipeline
    (OCR, embeddings, index writes) yields the CPU to searches and pages instead of sharing it evenly;
    its connections' backends of the embedded database follow it (:func:`mewdex.db.engine.get_engine`).
    Call before the process starts threads (Linux keeps a niceness per thread; new ones inherit it)."""
    nice = get_settings().worker_nice
    if nice:
        try:
            os.nice(nice)
        except OSError:  # not permitted here: run at the normal priority
            pass


def run_worker(
    concurrency: int, lanes: list[str] | None, grace: float | None, parent_pid: int | None, announce=print
) -> int:
    """The ``mewdex worker`` process: prepare, run ``concurrency`` worker threads (their maintenance
    thread ticks the scheduler) until SIGTERM/SIGINT, then stop within the grace period. Returns how
    many running tasks had to be released."""
    from mewdex.queue.worker import WorkerPool, die_with_parent

    lower_priority()  # first: every thread this process starts inherits it
    os.environ["PGAPPNAME"] = f"{WORKER_APPLICATION_PREFIX}:{socket.gethostname()}:{os.getpid()}"[:63]
    # The handlers only append to a list: an Event.set() there could wait forever on the lock that the
    # interrupted main thread holds inside Event.wait() (both run in the main thread).
    stop: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):  # before start-up: a stop during it is a clean stop
        signal.signal(sig, lambda signum, _frame: stop.append(signum))
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # every thread's stack to stderr: a stuck worker
    if parent_pid is not None:
        die_with_parent(parent_pid)
    size_for_worker_threads(concurrency)
    prepare_database()
    load_plugins()
    if stop:
        return 0
    pool = WorkerPool(get_sessionmaker(), concurrency, lanes=lanes, scheduler=scheduler())
    pool.start()
    announce(
        f"mewdex worker: {concurrency} threads, lanes {','.join(pool.workers[0].lanes)}; "
        "SIGTERM stops after the current tasks"
    )
    while not stop:
        time.sleep(0.2)
    return pool.stop(grace)
