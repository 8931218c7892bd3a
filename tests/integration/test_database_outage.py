"""A crash of the embedded PostgreSQL under a running ``mewdex serve`` (issue 20 point 3).

The test runs its own data dir (its own embedded server) so that killing the postmaster does not
disturb the session's database.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time

import httpx
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from conftest import MEWDEX_BIN, TEST_ENV, http_ok, wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _postmaster_pid(pgdata) -> int:
    return int((pgdata / "postmaster.pid").read_text().splitlines()[0])


def _wait_healthy(base: str, proc: subprocess.Popen, timeout: float) -> None:
    def healthy() -> bool:
        assert proc.poll() is None, "serve exited"
        return http_ok(base + "/health", timeout=2)

    wait_until(healthy, timeout, 0.3, "serve to become healthy")


def test_killed_postmaster_is_restarted_with_json_503s_meanwhile_and_held_task_handed_back(tmp_path):
    from mewdex.db.embedded import embedded_url, stop
    from mewdex.db.models import Task
    from mewdex.queue import tasks as queue
    from mewdex.queue.reconnect import hand_back

    data_dir = tmp_path / "data"
    pgdata = data_dir.resolve() / "pgdata"
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, **TEST_ENV, "MEWDEX_DATA_DIR": str(data_dir), "MEWDEX_WORKERS": "0"}
    env.pop("MEWDEX_DATABASE_URL", None)
    env.pop("MEWDEX_DEFAULT_SCOPE", None)
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        serve = subprocess.Popen(
            [str(MEWDEX_BIN), "serve", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    engine = None
    try:
        _wait_healthy(base, serve, timeout=180)
        engine = create_engine(embedded_url(pgdata), pool_pre_ping=True)
        sessions = sessionmaker(engine, expire_on_commit=False)
        with sessions.begin() as session:  # a task held by a worker when the database dies
            task_id = queue.enqueue(session, scope_id="local", task_type="noop").id
        with sessions.begin() as session:
            claim = queue.claim(session, owner="pytest-outage", lanes=["default"], lease_seconds=600)
        assert claim is not None and claim.task_id == task_id

        before = _postmaster_pid(pgdata)
        os.kill(before, signal.SIGKILL)
        killed_at = time.monotonic()
        handed: list[bool] = []
        worker = threading.Thread(
            target=lambda: handed.append(hand_back(sessions, claim, wait_seconds=60, poll_seconds=0.2))
        )
        worker.start()

        refused, back_at = [], None
        with httpx.Client(base_url=base, timeout=10) as client:

            def refused_then_back() -> bool:
                response = client.get("/api/v1/memes")
                if response.status_code != 200:
                    refused.append(response)
                return response.status_code == 200 and bool(refused)

            wait_until(
                refused_then_back, 45, 0.1, lambda: f"the API to refuse and then answer ({len(refused)} refused)"
            )
            back_at = time.monotonic()
        assert refused, "no request noticed the outage"
        for response in refused:  # never plain text, never a 500
            assert response.status_code == 503, response.text[:300]
            assert response.headers["content-type"].startswith("application/json")
            assert response.json()["error"]["code"] == "database_unavailable"
            assert int(response.headers["retry-after"]) > 0
        assert back_at is not None and back_at - killed_at < 30, "the database was not back within 30 s"
        assert _postmaster_pid(pgdata) != before

        worker.join(60)
        assert handed == [True]
        with sessions.begin() as session:
            task = session.get(Task, task_id)
            assert (task.status, task.lease_owner, task.lease_expires_at) == ("queued", None, None)
        log_text = log_path.read_text()
        assert "database unavailable" in log_text
        assert "Traceback" not in log_text, log_text[-3000:]
    finally:
        serve.terminate()
        try:
            serve.wait(30)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
        if engine is not None:
            engine.dispose()
        stop(pgdata)


def test_worker_hands_its_task_back_when_the_database_dies_under_it(tmp_path):
    """A worker thread runs a task while the postmaster is killed: once the database is back (restarted
    here as the serve supervisor would), the task is queued again and done, long before its lease."""
    from mewdex.db.embedded import embedded_url, ensure_running, stop
    from mewdex.db.models import ScopeContext, Task
    from mewdex.library.scopes import ensure_scope
    from mewdex.queue import tasks as queue
    from mewdex.queue.worker import Worker
    from mewdex.runtime import load_plugins

    load_plugins()  # the worker runs registered task types (noop among them)
    data_dir = tmp_path / "data"
    pgdata = data_dir.resolve() / "pgdata"
    env = {**os.environ, **TEST_ENV, "MEWDEX_DATA_DIR": str(data_dir)}
    env.pop("MEWDEX_DATABASE_URL", None)
    engine, thread, worker = None, None, None
    handler_seconds = 3  # the noop task's run, during which the database dies
    try:
        subprocess.run([str(MEWDEX_BIN), "migrate"], env=env, check=True, capture_output=True, timeout=300)
        engine = create_engine(embedded_url(pgdata), pool_pre_ping=True)
        sessions = sessionmaker(engine, expire_on_commit=False)
        with sessions.begin() as session:
            ensure_scope(session, ScopeContext("local"))
            task_id = queue.enqueue(session, scope_id="local", task_type="noop", payload={"sleep": handler_seconds}).id
        worker = Worker(sessions, lanes=["default"], maintenance=False)
        assert worker.settings.worker_lease_seconds >= 60
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        wait_until(lambda: worker.current is not None, 30, 0.05, "the worker to claim the task")
        os.kill(_postmaster_pid(pgdata), signal.SIGKILL)  # mid-task
        killed_at = time.monotonic()
        time.sleep(handler_seconds + 1)  # the task's handler ends meanwhile; its write-back finds no database
        for _ in range(20):
            try:
                ensure_running(pgdata)
                break
            except Exception:
                time.sleep(0.5)

        def succeeded():
            with sessions.begin() as session:
                task = session.get(Task, task_id)
            assert time.monotonic() - killed_at < 40, (
                f"task still {task.status} ({task.lease_owner}) {task.error} {task.message} "
                f"{task.attempt_count}/{task.max_attempts}"
            )
            return task if task.status == "succeeded" else None

        task = wait_until(succeeded, 40, 0.2, "the task to succeed")
        assert task.attempt_count == 2  # the handed-back attempt, then the one that succeeded
    finally:
        if worker is not None:
            worker.stop_event.set()
        if thread is not None:
            thread.join(30)
        if engine is not None:
            engine.dispose()
        stop(pgdata)
