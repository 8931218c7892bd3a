"""``serve``'s supervision of its web processes (``cli/web_processes.py``), with real spawned
processes and sockets: one that cannot start, whatever failed, ends with exit code 3 (its parent
stops instead of starting it again); web processes that keep dying stop the supervisor; the
parent's workers as a web process sees them when their status cannot be read."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading

import pytest
import uvicorn

from mewdex.cli import web_processes
from mewdex.cli.web_processes import WebProcesses, listening_sockets, run_web_process
from mewdex.config import get_settings


def failing_factory():
    raise RuntimeError("the app cannot be built")


def dying_factory():
    os._exit(1)  # a crash: no exception, no exit code of its choosing


@pytest.fixture
def sock():
    [sock] = listening_sockets("127.0.0.1", 0, 1)
    yield sock
    sock.close()


def _config(app: str) -> uvicorn.Config:
    return uvicorn.Config(app, factory=True, log_level="critical", proxy_headers=False)


@pytest.mark.parametrize("app", ["broken_app:create_app", f"{__name__}:failing_factory"])
def test_a_web_process_that_cannot_start_exits_with_3(sock, app, tmp_path, monkeypatch):
    """The app's module cannot import what it needs, or the app factory raises: exit code 3."""
    (tmp_path / "broken_app.py").write_text("import mewdex_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the spawned process starts with this sys.path
    multiprocessing.allow_connection_pickling()
    process = multiprocessing.get_context("spawn").Process(
        target=run_web_process, args=(_config(app), sock, os.getpid())
    )
    process.start()
    process.join(60)
    assert process.exitcode == 3


def test_web_processes_that_keep_dying_stop_the_supervisor(sock, monkeypatch):
    monkeypatch.setattr(web_processes, "MAX_DEATHS", 2)
    monkeypatch.setattr(web_processes, "RESTART_BACKOFF_SECONDS", 0.0)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    # Without the limit it would start them forever: SIGTERM ends that (and run() says all was well).
    watchdog = threading.Timer(90, os.kill, (os.getpid(), signal.SIGTERM))
    watchdog.start()
    try:
        assert WebProcesses(_config(f"{__name__}:dying_factory"), [sock]).run() is False
    finally:
        watchdog.cancel()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_a_status_that_cannot_be_read_counts_the_workers_as_down(tmp_path, monkeypatch):
    """``/health`` takes an empty status for "no workers here": one that cannot be read is every
    configured worker down, with the reason."""
    from mewdex.runtime import PublishedPool

    monkeypatch.setenv("MEWDEX_WORKERS", "2")
    monkeypatch.setenv("MEWDEX_WORKER_MODE", "process")
    get_settings.cache_clear()
    try:
        (tmp_path / "torn.json").write_text('{"status": {"alive"')
        for path in (tmp_path / "missing.json", tmp_path / "torn.json"):
            status = PublishedPool(path).status()
            assert status["processes"] == 2 and status["alive"] == 0, status
            assert "no readable status" in status["last_exit"]
    finally:
        get_settings.cache_clear()


def test_each_serve_has_a_folder_of_its_own_and_the_abandoned_ones_are_removed(tmp_path, monkeypatch):
    """Two ``serve`` processes on one data dir (two containers, both pid 1) get two folders; a folder
    whose lock nobody holds (its serve was killed) is removed by the next one."""
    from mewdex.runtime import SERVE_DIR_ENV, prepare_serve_dir, remove_serve_dir, serve_dir

    monkeypatch.setenv("MEWDEX_DATA_DIR", str(tmp_path))
    monkeypatch.delenv(SERVE_DIR_ENV, raising=False)
    get_settings.cache_clear()
    run = tmp_path.resolve() / "run"
    killed, starting = run / "serve-killed", run / "serve-starting"
    killed.mkdir(parents=True)
    (killed / "lock").touch()
    starting.mkdir()  # no lock yet: one being made now
    try:
        first = prepare_serve_dir()
        second = prepare_serve_dir()
        assert first != second and first.exists() and serve_dir() == second
        assert not killed.exists() and starting.exists()
        remove_serve_dir(second)
        remove_serve_dir(first)
        assert not first.exists() and not second.exists() and SERVE_DIR_ENV not in os.environ
    finally:
        get_settings.cache_clear()
