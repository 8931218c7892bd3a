"""The embedded PostgreSQL is shared by every mewdex process on a data dir and outlives any of them."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx

from conftest import MEWDEX_BIN, wait_until


def postmaster_pid(data_dir) -> int:
    return int((data_dir.resolve() / "pgdata" / "postmaster.pid").read_text().splitlines()[0])


def test_serve_killed_leaves_the_server_running_and_the_next_command_reuses_it(mewdex_env, scope):
    before = postmaster_pid(mewdex_env.data_dir)
    env = {**os.environ, **mewdex_env.env, "MEWDEX_WORKERS": "1"}
    serve = subprocess.Popen(
        [str(MEWDEX_BIN), "serve", "--port", "8291"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def healthy() -> bool:
        try:
            return httpx.get("http://127.0.0.1:8291/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, 60, 0.3, "serve to become healthy")
    finally:
        serve.send_signal(signal.SIGKILL)
        serve.wait(10)

    status = mewdex_env.cli("status", "--json", scope=scope.scope_id, check=True)
    assert '"memes": 0' in status.stdout
    assert postmaster_pid(mewdex_env.data_dir) == before  # reused, not restarted or duplicated


def test_a_data_dir_too_long_for_a_socket_path_uses_a_short_private_socket_dir(tmp_path):
    """Issue 13 point 14: a Unix socket path holds at most 107 bytes; a deeper data dir gets its socket
    directory under /tmp/mewdex-pg-<uid>/, 0700 like pgdata, and works."""
    from sqlalchemy import create_engine, text

    from mewdex.db.embedded import SOCKET_PATH_MAX, embedded_url, stop

    data_dir = tmp_path / ("d" * max(1, SOCKET_PATH_MAX - len(str(tmp_path))))
    data_dir.mkdir()
    pgdata = data_dir / "pgdata"
    assert len(str(pgdata / ".s.PGSQL.5432").encode()) > SOCKET_PATH_MAX
    try:
        engine = create_engine(embedded_url(pgdata))
        with engine.connect() as connection:
            assert connection.execute(text("SELECT 1")).scalar_one() == 1
        engine.dispose()
        socket_dir = Path((pgdata / "postmaster.pid").read_text().splitlines()[4])
        assert socket_dir != pgdata and str(socket_dir).startswith("/tmp/mewdex-pg-"), socket_dir
        assert len(str(socket_dir / ".s.PGSQL.5432").encode()) <= SOCKET_PATH_MAX
        assert socket_dir.stat().st_mode & 0o777 == 0o700
        assert socket_dir.stat().st_uid == pgdata.stat().st_uid
    finally:
        stop(pgdata)
        for leftover in Path("/tmp").glob(f"mewdex-pg-{os.getuid()}/*"):
            if leftover.is_dir() and not any(leftover.iterdir()):
                leftover.rmdir()
