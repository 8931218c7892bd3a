"""The embedded PostgreSQL is shared by every mewdex process on a data dir and outlives any of them."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import MEWDEX_BIN, http_ok, wait_until


def postmaster_pid(data_dir) -> int:
    return int((data_dir.resolve() / "pgdata" / "postmaster.pid").read_text().splitlines()[0])


def test_serve_killed_leaves_the_server_running_and_the_next_command_reuses_it(mewdex_env, scope):
    before = postmaster_pid(mewdex_env.data_dir)
    env = {**os.environ, **mewdex_env.env, "MEWDEX_WORKERS": "1"}
    serve = subprocess.Popen(
        [str(MEWDEX_BIN), "serve", "--port", "8291"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def healthy() -> bool:
        return http_ok("http://127.0.0.1:8291/health", timeout=1)

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


@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as another OS user only when mewdex runs as root")
def test_as_root_the_server_runs_in_its_users_own_group_never_roots():
    """Issue 40, finding 9: run as root, the embedded server runs as the OS user embedded_postgres — in that
    user's own group (nogroup if that were root's), not in root's group 0 (``subprocess``'s ``user=`` alone
    kept gid 0) and with no supplementary groups; none of the server's files in pgdata belong to root's
    group, also those an older server made."""
    import grp
    import pwd
    import shutil
    import sys
    import tempfile

    from mewdex.db.embedded import stop

    # Not under pytest's basetemp: another pytest session starting meanwhile makes that 0700 again.
    pgdata = Path(tempfile.mkdtemp(prefix="mewdex-group-test-")) / "pgdata"
    start = [
        sys.executable,
        "-c",
        f"from pathlib import Path; from mewdex.db.embedded import embedded_url; embedded_url(Path({str(pgdata)!r}))",
    ]

    def check() -> None:
        user = pwd.getpwnam("embedded_postgres")
        group = user.pw_gid or grp.getgrnam("nogroup").gr_gid
        pid = int((pgdata / "postmaster.pid").read_text().splitlines()[0])
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        assert set(status["Uid"].split()) == {str(user.pw_uid)}, status["Uid"]
        assert set(status["Gid"].split()) == {str(group)} and group != 0, status["Gid"]
        assert status["Groups"].split() in ([], [str(group)]), status["Groups"]
        in_roots_group = [
            str(path)
            for path in [pgdata, *pgdata.rglob("*")]
            if path.exists() and not path.is_symlink() and (path.stat().st_uid, path.stat().st_gid) == (user.pw_uid, 0)
        ]
        assert in_roots_group == [], in_roots_group[:5]

    try:
        subprocess.run(start, check=True, timeout=120)  # noqa: S603 - a mewdex process starts the server
        check()
        # What an older mewdex left: a server stopped with its files in root's group.
        stop(pgdata)
        uid = pwd.getpwnam("embedded_postgres").pw_uid
        for path in [pgdata, *pgdata.rglob("*")]:
            if path.lstat().st_uid == uid:
                os.lchown(path, -1, 0)
        subprocess.run(start, check=True, timeout=120)  # noqa: S603
        check()
    finally:
        stop(pgdata)
        shutil.rmtree(pgdata.parent, ignore_errors=True)


def test_a_data_dir_copied_while_its_server_ran_is_refused_not_attached_to_the_original(mewdex_env, tmp_path):
    """A copy of a data dir taken while mewdex ran carries the original's ``postmaster.pid``, which names the
    original's running server and socket: attaching would read and migrate the original library. The copy
    is refused with a clear message and the original server keeps running; without the file it would be
    this copy's own server."""
    import shutil

    from mewdex.db.embedded import EmbeddedDatabaseError, embedded_url, is_running

    original = mewdex_env.data_dir.resolve() / "pgdata"
    assert is_running(original)
    copy = tmp_path / "copy" / "pgdata"
    copy.mkdir(parents=True)
    for name in ("PG_VERSION", "postmaster.pid"):  # what decides: the rest of a real copy plays no part
        shutil.copy(original / name, copy / name)
    with pytest.raises(EmbeddedDatabaseError) as raised:
        embedded_url(copy)
    message = str(raised.value)
    assert str(original) in message and "copied" in message and str(copy / "postmaster.pid") in message
    assert is_running(original)
    assert not (copy / "log").exists()  # nothing was started on the copy
