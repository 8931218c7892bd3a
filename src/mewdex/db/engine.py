"""Engine and sessions for the configured database (external URL or the embedded server)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from mewdex.config import Settings, get_settings
from mewdex.db.embedded import embedded_url

_lock = threading.Lock()
_engine: Engine | None = None
_sessions: sessionmaker[Session] | None = None


def database_url(settings: Settings) -> str:
    """``MEWDEX_DATABASE_URL`` (driver normalised to psycopg 3), else the embedded server's URL."""
    if settings.database_url:
        url = settings.database_url
        for prefix in ("postgresql://", "postgres://"):
            if url.startswith(prefix):
                return "postgresql+psycopg://" + url[len(prefix) :]
        return url
    return embedded_url(settings.pgdata)


def get_engine() -> Engine:
    """The process-wide engine (created on first use, starting the embedded server if needed)."""
    global _engine, _sessions
    with _lock:
        if _engine is None:
            settings = get_settings()
            _engine = create_engine(database_url(settings), pool_size=10, max_overflow=10, pool_pre_ping=True,
                                    connect_args=_application_name())
            event.listen(_engine, "connect", _register_vector)
            _sessions = sessionmaker(_engine, expire_on_commit=False)
        return _engine


def _application_name() -> dict:
    """Name this process's connections ``mewdex <command>:<pid>`` (unless ``PGAPPNAME`` names it, as
    workers do), so ``mewdex db stop`` can say which processes still use the database."""
    if os.environ.get("PGAPPNAME"):
        return {}
    command = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    if command == "mewdex" and len(sys.argv) > 1:
        command = f"mewdex {sys.argv[1]}"
    return {"application_name": f"{command}:{os.getpid()}"[:63]}


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


def reset_engine() -> None:
    """Dispose the engine (tests that switch data dirs, and after ``fork``)."""
    global _engine, _sessions
    with _lock:
        if _engine is not None:
            _engine.dispose()
        _engine = None
        _sessions = None
