"""Engine and sessions for the configured database (external URL or the embedded server)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import URL, Engine, create_engine, event, exc
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import QueuePool

from mewdex.config import Settings, get_settings
from mewdex.db.embedded import embedded_url
from mewdex.db.pools import pool_sizes

_lock = threading.Lock()
_engine: Engine | None = None
_sessions: sessionmaker[Session] | None = None
_search_engine: Engine | None = None
_search_sessions: sessionmaker[Session] | None = None
_primary_search_engine: Engine | None = None
_primary_search_sessions: sessionmaker[Session] | None = None
_search_fallback_engine: Engine | None = None
_search_fallback_sessions: sessionmaker[Session] | None = None
REPLICA_CONNECT_TIMEOUT_SECONDS = 3


def database_url(settings: Settings) -> str:
    """``MEWDEX_DATABASE_URL`` (driver normalised to psycopg 3), else the embedded server's URL."""
    if settings.database_url:
        return _psycopg(settings.database_url)
    return embedded_url(settings.pgdata)


def _psycopg(url: str) -> str:
    """``postgresql://…`` / ``postgres://…`` as SQLAlchemy's psycopg 3 URL; other URLs unchanged."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def get_engine() -> Engine:
    """The process-wide engine (created on first use, starting the embedded server if needed)."""
    global _engine, _sessions
    with _lock:
        if _engine is None:
            settings = get_settings()
            sizes = pool_sizes(settings, _worker_threads)
            _engine, _sessions = _pool(
                database_url(settings),
                embedded=not settings.database_url,
                pool_size=sizes["pool_size"],
                max_overflow=sizes["max_overflow"],
                pool_timeout=10,
                connect_args=_application_name(),
            )
        return _engine


class WaitCountingPool(QueuePool):
    """SQLAlchemy's ``QueuePool`` that counts the threads waiting for a connection (``waiting``; read
    by ``/metrics`` beside ``checkedout()``).

    It logs under SQLAlchemy's own name for the pool (``sqlalchemy.pool.impl.QueuePool``), not under
    this module's: SQLAlchemy holds its loggers at WARNING unless asked, so the pool's INFO lines
    ("Pool disposed. Pool size: 45 … Current Overflow: -44") stay out of mewdex's INFO log."""

    _sqla_logger_namespace = "sqlalchemy.pool.impl.QueuePool"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waiting = 0
        self._waiting_lock = threading.Lock()

    def _do_get(self) -> Any:
        # Only a thread that finds every connection out (none idle, no overflow left) waits; one that
        # takes an idle connection or opens a new one is not counted, however long the connect takes.
        if self.checkedin() > 0 or self._max_overflow < 0 or self.checkedout() < self.size() + self._max_overflow:
            return super()._do_get()
        with self._waiting_lock:
            self.waiting += 1
        try:
            return super()._do_get()
        finally:
            with self._waiting_lock:
                self.waiting -= 1


def _pool(url: str | URL, *, embedded: bool = False, **options: Any) -> tuple[Engine, sessionmaker[Session]]:
    """An engine on ``url`` with ``options`` (``create_engine``'s), pgvector's types registered on
    every connection and idle connections pinged (:func:`_ping_when_idle`), and its sessionmaker.
    ``embedded``: ``url`` is this data dir's embedded server (its backends run at this process's
    niceness: :func:`_backend_at_our_niceness`)."""
    engine = create_engine(url, poolclass=WaitCountingPool, **options)
    event.listen(engine, "connect", _register_vector)
    if embedded:
        event.listen(engine, "connect", _backend_at_our_niceness)
    _ping_when_idle(engine)
    return engine, sessionmaker(engine, expire_on_commit=False)


def _application_name() -> dict:
    """Name this process's connections ``mewdex <command>:<pid>`` (unless ``PGAPPNAME`` names it, as
    workers do), so ``mewdex db stop`` can say which processes still use the database."""
    if os.environ.get("PGAPPNAME"):
        return {}
    command = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    if command == "mewdex" and len(sys.argv) > 1:
        command = f"mewdex {sys.argv[1]}"
    return {"application_name": f"{command}:{os.getpid()}"[:63]}


#: Worker threads of this process when it is a ``mewdex worker`` process (set by
#: :func:`size_for_worker_threads` before the engine exists); None: ``workers`` in thread mode.
_worker_threads: int | None = None


def size_for_worker_threads(threads: int) -> None:
    """Size this process's main pool for ``threads`` worker threads (``mewdex worker -c N``, whose
    threads the settings do not count). Call before the engine is created; raises ``RuntimeError``
    after."""
    global _worker_threads
    with _lock:
        if _engine is not None:
            raise RuntimeError("the engine exists already: size its pool before first use")
        _worker_threads = threads


#: A pooled connection idle at least this long (seconds) is pinged before use; one in steady use is
#: not: a ping per checkout was a round trip per request and three per search (a fifth of the
#: search statements under load). A connection that breaks while in use (the database restarted)
#: fails that statement, and SQLAlchemy then replaces every pooled connection older than it.
IDLE_PING_SECONDS = 1.0


def _ping_when_idle(engine: Engine) -> None:
    """Pessimistic disconnect handling for connections idle ≥ :data:`IDLE_PING_SECONDS`: a dead one
    is replaced at checkout (``DisconnectionError`` makes the pool open a new one)."""

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection, record) -> None:
        record.info["checked_in_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection, record, _proxy) -> None:
        checked_in_at = record.info.get("checked_in_at")
        if checked_in_at is None or time.monotonic() - checked_in_at < IDLE_PING_SECONDS:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception as error:
            raise exc.DisconnectionError(f"the idle connection is gone: {error}") from error
        if not alive:
            raise exc.DisconnectionError("the idle connection is gone")


def _backend_at_our_niceness(dbapi_connection, _record) -> None:
    """Give the embedded server's backend of a new connection this process's niceness when that is
    lower priority than the backend's: a worker process (``MEWDEX_WORKER_NICE``) then yields the CPU
    to searches in its database work too (index writes, HNSW inserts), not only in its models. The
    backend is a process of this host and user (the embedded server runs as whoever started it); one
    this process may not renice stays as it is."""
    nice = os.getpriority(os.PRIO_PROCESS, 0)  # this thread's: Linux keeps niceness per thread
    if nice <= 0:
        return
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    if not dbapi_connection.autocommit:
        dbapi_connection.rollback()  # the SELECT opened a transaction
    try:
        if os.getpriority(os.PRIO_PROCESS, pid) < nice:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
    except OSError:  # not ours (a server started by another user) or gone
        pass


def _register_vector(dbapi_connection, _record) -> None:
    from pgvector.psycopg import register_vector

    try:
        register_vector(dbapi_connection)
    except Exception:  # the extension does not exist yet: before the first migration
        dbapi_connection.rollback()


def get_sessionmaker() -> sessionmaker[Session]:
    """The process-wide session factory (``with sessions.begin() as session:``)."""
    get_engine()
    assert _sessions is not None
    return _sessions


@contextmanager
def session_scope() -> Iterator[Session]:
    """A session in a transaction: commits on success, rolls back on error."""
    with get_sessionmaker().begin() as session:
        yield session


def get_search_sessionmaker(options: str = "", *, primary: bool = False) -> sessionmaker[Session]:
    """Sessions of the search legs' own pool (``pool_sizes()["search_pool"]`` connections; see there):
    a search holds a connection of the main pool (its request's) while its legs run, so they must not
    wait for one from that pool.

    The pool's connections are in autocommit (a leg reads with single statements: no BEGIN/COMMIT
    round trips) and carry ``options`` (libpq ``-c name=value`` settings, given by the first caller:
    the search service's HNSW settings and plan mode). They go to ``MEWDEX_SEARCH_DATABASE_URL``
    when set (a read replica: the legs only read), else to the main database. ``primary=True``: the
    same kind of pool on the main database, where the legs read while the replica is unreachable or
    lagging (:mod:`mewdex.db.replica`; created on first use; without a replica, the one pool)."""
    global _search_engine, _search_sessions, _search_fallback_engine, _search_fallback_sessions
    engine = get_engine()
    settings = get_settings()
    with _lock:
        if primary and settings.search_database_url:
            if _search_fallback_sessions is None:
                _search_fallback_engine, _search_fallback_sessions = _pool(
                    engine.url,
                    embedded=not settings.database_url,
                    pool_size=pool_sizes(settings)["search_pool"],
                    max_overflow=0,
                    isolation_level="AUTOCOMMIT",
                    connect_args={"options": options} if options else {},
                )
            return _search_fallback_sessions
        if _search_sessions is None:
            size = pool_sizes(settings)["search_pool"]
            connect_args: dict[str, Any] = {"options": options} if options else {}
            if settings.search_database_url:  # a replica that went away must not hold a search for long
                connect_args["connect_timeout"] = REPLICA_CONNECT_TIMEOUT_SECONDS
            _search_engine, _search_sessions = _pool(
                _psycopg(settings.search_database_url) if settings.search_database_url else engine.url,
                embedded=not settings.database_url and not settings.search_database_url,
                pool_size=size,
                max_overflow=0,
                isolation_level="AUTOCOMMIT",
                connect_args=connect_args,
            )
        return _search_sessions


def search_engine() -> Engine | None:
    """The search legs' engine (the replica's when ``MEWDEX_SEARCH_DATABASE_URL`` is set), None before
    the first search of this process."""
    return _search_engine


def pools() -> dict[str, Any]:
    """This process's connection pools by name (``main``, ``search``, ``search_primary``,
    ``search_writes``): the SQLAlchemy pool of each one created so far (for ``/metrics``)."""
    named = {
        "main": _engine,
        "search": _search_engine,
        "search_primary": _search_fallback_engine,
        "search_writes": _primary_search_engine,
    }
    return {name: engine.pool for name, engine in named.items() if engine is not None}


def get_primary_search_sessionmaker() -> sessionmaker[Session]:
    """Sessions for what a search does besides its legs' reads, on the main database: the optional
    search steps' metered provider calls write grant reservations, usage events and audits.

    Without ``MEWDEX_SEARCH_DATABASE_URL`` this is the legs' pool (:func:`get_search_sessionmaker`);
    with it (the legs read a replica, where writes fail), a pool of the same size on the main
    database, created on first use. Never the request's pool, for the reason given there."""
    global _primary_search_engine, _primary_search_sessions
    settings = get_settings()
    if not settings.search_database_url:
        return get_search_sessionmaker()
    engine = get_engine()
    with _lock:
        if _primary_search_sessions is None:
            _primary_search_engine, _primary_search_sessions = _pool(
                engine.url,
                embedded=not settings.database_url,
                pool_size=pool_sizes(settings)["search_pool"],
                max_overflow=0,
                connect_args=_application_name(),
            )
        return _primary_search_sessions


def reset_engine() -> None:
    """Dispose the engines (tests that switch data dirs, and after ``fork``)."""
    global _engine, _sessions, _search_engine, _search_sessions, _primary_search_engine, _primary_search_sessions
    global _search_fallback_engine, _search_fallback_sessions
    with _lock:
        for engine in (_engine, _search_engine, _primary_search_engine, _search_fallback_engine):
            if engine is not None:
                engine.dispose()
        _engine = _search_engine = _primary_search_engine = _search_fallback_engine = None
        _sessions = _search_sessions = _primary_search_sessions = _search_fallback_sessions = None
