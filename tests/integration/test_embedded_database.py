"""The embedded PostgreSQL is shared by every mewdex process on a data dir and outlives any of them."""

from __future__ import annotations

import os
import signal
import subprocess

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
