"""Whether the search legs read the replica (``MEWDEX_SEARCH_DATABASE_URL``) or the main database.

The replica is used while it answers and its replay lag is at most
``MEWDEX_SEARCH_REPLICA_MAX_LAG_SECONDS``; otherwise the legs read the main database (through
``get_search_sessionmaker(primary=True)``) until the next check. The state is checked at most every
:data:`CHECK_SECONDS` per process, on one connection of the legs' pool, and marked down at once when
a leg loses its replica connection (:func:`mark_unreachable`). See docs/scaling.md.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from sqlalchemy import text

from mewdex.config import get_settings

log = logging.getLogger(__name__)
CHECK_SECONDS = 2.0

# Seconds since the last replayed transaction while WAL waits to be replayed; 0 when everything
# received is replayed (an idle primary sends nothing to replay: no lag).
LAG_SQL = text(
    "SELECT CASE WHEN NOT pg_is_in_recovery() THEN 0 "
    "WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0 "
    "ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0) END"
)


@dataclass(frozen=True)
class ReplicaState:
    """``use``: the legs read the replica; ``lag_seconds``: its replay lag (None: unreachable or not
    configured); ``reason``: why not (``unreachable``, ``lagging``) or None."""

    use: bool
    lag_seconds: float | None
    reason: str | None


_lock = threading.Lock()
_state: tuple[float, ReplicaState] | None = None  # (valid until, state)


def configured() -> bool:
    return bool(get_settings().search_database_url)


def state(options: str = "") -> ReplicaState:
    """The replica's state, checked at most every :data:`CHECK_SECONDS` (reads no database without a
    replica); ``options`` are the legs' connection options (``get_search_sessionmaker``'s, in case
    this check creates the pool)."""
    global _state
    if not configured():
        return ReplicaState(use=False, lag_seconds=None, reason=None)
    now = time.monotonic()
    with _lock:
        if _state is not None and _state[0] > now:
            return _state[1]
    fresh = _check(options)
    with _lock:
        _state = (time.monotonic() + CHECK_SECONDS, fresh)
    return fresh


def _check(options: str) -> ReplicaState:
    from mewdex.db.engine import get_search_sessionmaker

    try:
        with get_search_sessionmaker(options)() as session:
            lag = float(session.execute(LAG_SQL).scalar_one())
    except Exception as exc:  # connection refused, timeout, shutting down
        log.warning("search replica unreachable; the search legs read the main database: %s", exc.__class__.__name__)
        return ReplicaState(use=False, lag_seconds=None, reason="unreachable")
    if lag > get_settings().search_replica_max_lag_seconds:
        log.warning("search replica %.1f s behind; the search legs read the main database", lag)
        return ReplicaState(use=False, lag_seconds=lag, reason="lagging")
    return ReplicaState(use=True, lag_seconds=lag, reason=None)


def mark_unreachable() -> None:
    """A leg lost its replica connection: read the main database until the next check."""
    global _state
    with _lock:
        _state = (time.monotonic() + CHECK_SECONDS, ReplicaState(use=False, lag_seconds=None, reason="unreachable"))


def cached() -> ReplicaState | None:
    """The last state checked by this process (None: none yet, or no replica); checks nothing."""
    with _lock:
        return _state[1] if _state is not None and configured() else None


def reset() -> None:
    """Forget the cached state (tests)."""
    global _state
    with _lock:
        _state = None
