"""Helpers of the control-plane tests: enqueue no-op tasks fast, start real ``mewdex worker`` processes,
read task rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid

from sqlalchemy import text

from conftest import MEWDEX_BIN, wait_until


def enqueue_noops(
    sessions,
    scope,
    n: int,
    *,
    lane: str = "default",
    payload: dict | None = None,
    max_attempts: int = 3,
    batch_id: str | None = None,
) -> list[str]:
    """``n`` queued ``noop`` tasks of the scope in one statement; returns their ids (in creation order)."""
    from mewdex.queue import tasks as queue

    ids = [f"noop-{uuid.uuid4().hex}" for _ in range(n)]
    with sessions.begin() as session:
        queue.ensure_lane(session, lane, scope_id=scope.scope_id)
        session.execute(
            text(
                "INSERT INTO tasks (id, scope_id, task_type, lane, payload, status, max_attempts, available_at, "
                "created_at, updated_at, claim_generation, attempt_count, error_history) "
                "SELECT id, :s, 'noop', :lane, CAST(:p AS jsonb), 'queued', :m, clock_timestamp(), "
                "clock_timestamp() + make_interval(secs => ord / 1e6), now(), 0, 0, '[]' "
                "FROM unnest(CAST(:ids AS text[])) WITH ORDINALITY AS u(id, ord)"
            ),
            {"s": scope.scope_id, "lane": lane, "p": json.dumps(payload or {}), "m": max_attempts, "ids": ids},
        )
        if batch_id is not None:
            session.execute(
                text(
                    "INSERT INTO task_batch_items (scope_id, batch_id, task_id) "
                    "SELECT :s, :b, unnest(CAST(:ids AS text[]))"
                ),
                {"s": scope.scope_id, "b": batch_id, "ids": ids},
            )
    return ids


def start_workers(
    mewdex_env, n: int, *, concurrency: int = 2, lanes: str | None = None, extra_env: dict | None = None
) -> list[subprocess.Popen]:
    """``n`` real ``mewdex worker`` processes on the test database (their output goes to a log file)."""
    env = {**os.environ, **mewdex_env.env, **(extra_env or {})}
    procs = []
    for _i in range(n):
        args = [str(MEWDEX_BIN), "worker", "--concurrency", str(concurrency)]
        if lanes:
            args += ["--lanes", lanes]
        path = mewdex_env.data_dir / f"worker-{uuid.uuid4().hex[:6]}.log"
        proc = subprocess.Popen(args, env=env, stdout=path.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        proc.log_path = path  # type: ignore[attr-defined]  # read by log_tail() when a test fails
        procs.append(proc)
    return procs


def stop_workers(procs, sig=signal.SIGTERM, timeout: float = 30) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGUSR1)  # `mewdex worker` writes every thread's stack to its log first
            try:
                p.wait(2)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def log_tail(proc: subprocess.Popen, chars: int = 3000) -> str:
    """The end of the log of a worker from :func:`start_workers` (for failure messages)."""
    return proc.log_path.read_text(errors="replace")[-chars:]  # type: ignore[attr-defined]


def exit_code(proc: subprocess.Popen, timeout: float = 30) -> int:
    """``proc.wait(timeout)``; a worker still running by then fails the test with the end of its log."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        message = f"worker {proc.pid} still running after {timeout} s; its log ends:\n{log_tail(proc)}"
        raise AssertionError(message) from None


def wait_started(sessions, procs, timeout: float = 120) -> None:
    """Wait until each worker process is connected to the database (its SIGTERM handler is installed by
    then, so a stop is a clean exit 0 rather than death by the signal during start-up)."""
    from mewdex.runtime import WORKER_APPLICATION_PREFIX

    def connected() -> bool:
        with sessions.begin() as session:
            names = session.execute(text("SELECT application_name FROM pg_stat_activity")).scalars().all()
        workers = [n for n in names if n and n.startswith(WORKER_APPLICATION_PREFIX)]
        return all(any(n.endswith(f":{p.pid}") for n in workers) for p in procs)

    wait_until(connected, timeout, 0.2, "the worker processes to connect")


def status_counts(sessions, scope) -> dict[str, int]:
    with sessions.begin() as session:
        rows = session.execute(
            text("SELECT status, count(*) FROM tasks WHERE scope_id = :s GROUP BY status"), {"s": scope.scope_id}
        ).all()
    return {status: n for status, n in rows}
