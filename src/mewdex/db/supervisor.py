"""Database supervision: notice a lost database within seconds, restart the embedded server, say so once.

``mewdex serve`` calls :func:`start` once at start-up: a daemon thread checks the database every
:data:`CHECK_SECONDS`. For the embedded server it looks at the postmaster's pid (no connection) and,
when the postmaster is gone (killed, crashed), starts it again on the same data directory and drops the
engine's pooled connections to the dead one; an external database (``MEWDEX_DATABASE_URL``) is only
probed. The web processes of a ``serve`` with several (``MEWDEX_WEB_PROCESSES``) check without
restarting (``restart=False``): their parent restarts it, they only notice the outage and its end.
While the database is unreachable :func:`unavailable_since` says since when; the web layer answers
``503 database_unavailable`` with ``Retry-After: RETRY_AFTER_SECONDS`` (see ``mewdex.web.failures``)
and the log says so once per :data:`LOG_INTERVAL_SECONDS`, not once per request.

:func:`is_connection_lost` tells a lost connection from other database errors; workers use it to hand
back their tasks after an outage (``mewdex.queue.reconnect``).
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from mewdex.config import get_settings
from mewdex.db import embedded
from mewdex.db.engine import get_engine

log = logging.getLogger(__name__)
CHECK_SECONDS = 2.0
RETRY_AFTER_SECONDS = 5
LOG_INTERVAL_SECONDS = 30.0
# SQLSTATEs of a server going away or not yet back: connection exceptions (08…), admin/crash
# shutdown (57P01, 57P02), starting up (57P03).
_LOST_SQLSTATES = ("57P01", "57P02", "57P03")

_lock = threading.Lock()
_down_since: float | None = None  # time.time() when the outage was first noticed
_reason: str | None = None
_next_log = 0.0
_refused = 0


def is_connection_lost(exc: BaseException) -> bool:
    """True for errors meaning the database is gone or not answering (connection refused or closed,
    server shut down or starting up); False for every other error (constraint, syntax, deadlock…)."""
    cause: BaseException | None = exc
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        cause = exc.orig  # the driver's error
    if isinstance(cause, psycopg.InterfaceError):
        return True
    if isinstance(cause, psycopg.OperationalError):
        state = cause.sqlstate
        return state is None or state.startswith("08") or state in _LOST_SQLSTATES
    return False


def first_line(exc: BaseException | None) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]


_last_outage_warning = 0.0


def log_loop_error(logger: logging.Logger, what: str, exc: BaseException, *, every_seconds: float = 30) -> None:
    """Log an error a background loop survived: a lost database connection as one warning line at
    most every ``every_seconds`` per process (the supervisor reports the outage itself), anything
    else with its traceback."""
    global _last_outage_warning
    if is_connection_lost(exc):
        now = time.monotonic()
        if now - _last_outage_warning >= every_seconds:
            _last_outage_warning = now
            logger.warning("%s: the database is unavailable (%s); retrying", what, first_line(exc))
        return
    logger.error("%s", what, exc_info=exc)


def unavailable_since() -> float | None:
    """``time.time()`` when the current outage was noticed; None while the database answers."""
    return _down_since


def mark_unavailable(reason: str) -> None:
    """Record an outage (the first call of an outage logs it)."""
    global _down_since, _reason, _next_log
    with _lock:
        if _down_since is None:
            _down_since, _reason = time.time(), reason
            _next_log = time.monotonic() + LOG_INTERVAL_SECONDS
            log.error("database unavailable: %s; requests answer 503 until it is back", reason)


def mark_available() -> None:
    global _down_since, _reason, _refused
    with _lock:
        if _down_since is not None:
            log.warning(
                "database available again after %.1f s (%d requests answered 503)", time.time() - _down_since, _refused
            )
        _down_since, _reason, _refused = None, None, 0


def note_refused(reason: str) -> None:
    """A request was answered 503 for ``reason``; logs a summary at most once per LOG_INTERVAL_SECONDS."""
    global _refused, _next_log
    mark_unavailable(reason)
    with _lock:
        _refused += 1
        if time.monotonic() >= _next_log:
            _next_log = time.monotonic() + LOG_INTERVAL_SECONDS
            log.error("database still unavailable (%s): %d requests answered 503 so far", _reason, _refused)


def check_once(*, restart: bool = True) -> bool:
    """One check: restart the embedded server if its postmaster is gone (``restart``; else say it is
    unavailable), then probe with ``SELECT 1``. Returns whether the database answers."""
    settings = get_settings()
    if not settings.database_url and not embedded.is_running(settings.pgdata):
        mark_unavailable("the embedded PostgreSQL is not running")
        if not restart:
            return False
        try:
            embedded.ensure_running(settings.pgdata)
        except embedded.EmbeddedDatabaseError as exc:
            note_restart_failure(exc)
            return False
        log.warning("embedded PostgreSQL restarted in %s", settings.pgdata)
        get_engine().dispose()  # pooled connections point at the dead server
    elif _down_since is None and not settings.database_url:
        return True  # the postmaster runs: no need to spend a connection every few seconds
    try:
        with get_engine().connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:
        mark_unavailable(f"{type(exc).__name__}: {first_line(exc)}")
        return False
    mark_available()
    return True


def note_restart_failure(exc: Exception) -> None:
    global _next_log
    with _lock:
        if time.monotonic() < _next_log:
            return
        _next_log = time.monotonic() + LOG_INTERVAL_SECONDS
    log.error("%s; retrying every %.0f s", exc, CHECK_SECONDS)


def _loop(stop: threading.Event, restart: bool) -> None:
    while not stop.wait(CHECK_SECONDS):
        try:
            check_once(restart=restart)
        except Exception:  # never let the supervisor die
            log.exception("database check failed")


def start(stop: threading.Event, *, restart: bool = True) -> threading.Thread:
    """Start supervising the database until ``stop`` is set (one daemon thread); returns the thread.
    ``restart=False``: only check (another process of this server restarts the embedded one)."""
    thread = threading.Thread(target=_loop, args=(stop, restart), name="database-supervisor", daemon=True)
    thread.start()
    return thread
