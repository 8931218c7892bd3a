"""Task types, the runtime and the periodic scheduler (issue 12).

- a task type registered by a module of the test itself runs through real ``mewdex worker``
  processes (loaded with ``MEWDEX_TASK_MODULES``), retries by its own policy, and runs its hooks;
- the worker entry point never imports FastAPI or ``mewdex.web``;
- N schedulers ticking the same schedule at once enqueue each slot exactly once, even after the
  slot's task already finished.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid

import pytest
from sqlalchemy import select, text

from conftest import wait_until
from mewdex.db.models import Task
from mewdex.queue import registry
from mewdex.queue.scheduler import Schedule, Scheduler, enqueue_slot, slots_taken
from queue_helpers import exit_code, log_tail, start_workers, status_counts, stop_workers, wait_started

TASK_MODULE = '''
"""A task type of the test: echoes its payload from inside the worker process."""
import os
import sys

from sqlalchemy import text

from mewdex.queue.registry import RetryPolicy, TaskContext, TaskError, task_type

NAME = "{name}"


def _log(session, task_id, note):
    session.execute(text("INSERT INTO {table} (task_id, note) VALUES (:t, :n)"), {{"t": task_id, "n": note}})


def on_success(session, claim, task, result, batch_id):  # in the fenced write-back transaction
    _log(session, claim.task_id, "succeeded " + str(result["echo"]))


def on_failure(session, task, outcome):  # in the transaction that records the failure
    _log(session, task.id, outcome)


@task_type(NAME, lane="{lane}", retry=RetryPolicy(max_attempts={attempts}, base_seconds=0, cap_seconds=0),
           on_success=on_success, on_failure=on_failure)
def echo(ctx: TaskContext) -> dict:
    if ctx.payload.get("linger"):  # leaves a thread pool's worker busy for 2 minutes behind it
        import concurrent.futures
        import time

        concurrent.futures.ThreadPoolExecutor(1).submit(time.sleep, 120)
    if ctx.payload.get("fail") == "always" or (ctx.payload.get("fail") == "first" and ctx.claim.attempt_count == 1):
        raise TaskError("flaky", "failed on purpose")
    return {{"echo": ctx.payload["value"], "pid": os.getpid(), "attempt": ctx.claim.attempt_count,
            "fastapi": "fastapi" in sys.modules,
            "web": sorted(m for m in sys.modules if m == "mewdex.web" or m.startswith("mewdex.web."))}}
'''


@pytest.fixture
def task_module(tmp_path):
    """A module (on a PYTHONPATH of its own) that registers a task type with a lane of its own."""
    suffix = uuid.uuid4().hex[:8]
    name, lane, module = f"test_echo_{suffix}", f"t-echo-{suffix}", f"mewdex_test_tasks_{suffix}"
    table = f"test_hook_log_{suffix}"
    (tmp_path / f"{module}.py").write_text(TASK_MODULE.format(name=name, lane=lane, attempts=2, table=table))
    sys.path.insert(0, str(tmp_path))
    try:  # the test process registers it too, as every process does (MEWDEX_TASK_MODULES)
        registry.load([module])
    finally:
        sys.path.remove(str(tmp_path))
    env = {  # the workers' environment that loads it
        "MEWDEX_TASK_MODULES": json.dumps([module]),
        "MEWDEX_WORKER_POLL_SECONDS": "0.05",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    return {"name": name, "lane": lane, "module": module, "table": table, "env": env}


def test_a_task_type_registered_by_the_test_runs_in_real_worker_processes(sessions, scope, mewdex_env, task_module):
    env = task_module["env"]
    ids = {}
    with sessions.begin() as session:
        session.execute(text(f"CREATE TABLE {task_module['table']} (task_id text, note text)"))
        for i in range(8):
            fail = {0: "first", 1: "always"}.get(i)
            task = registry.submit(  # known here too: the fixture registered it in this process
                session, scope_id=scope.scope_id, task_type=task_module["name"], payload={"value": i, "fail": fail}
            )
            assert (task.lane, task.max_attempts) == (task_module["lane"], 2)  # the type's lane and policy
            ids[i] = task.id
    procs = start_workers(mewdex_env, 2, concurrency=2, lanes=task_module["lane"], extra_env=env)
    try:
        wait_until(
            lambda: status_counts(sessions, scope) == {"succeeded": 7, "failed": 1},
            120,
            0.2,
            "the test's task type to run",
        )
        wait_started(sessions, procs)  # one may still be starting (the other did all the work): exit 0 needs it up
    finally:
        stop_workers(procs)
    with sessions.begin() as session:
        log = {}
        for task_id, note in session.execute(text(f"SELECT task_id, note FROM {task_module['table']}")):
            log.setdefault(task_id, []).append(note)
        session.execute(text(f"DROP TABLE {task_module['table']}"))
        tasks = {i: session.get(Task, task_id) for i, task_id in ids.items()}
        for i, task in tasks.items():
            if i == 1:  # failed twice: its own policy allows 2 attempts; the failure hook saw both
                assert (task.status, task.attempt_count, task.error["code"]) == ("failed", 2, "flaky")
                assert log[task.id] == ["retrying", "failed"]
                continue
            assert task.status == "succeeded" and task.result["echo"] == i
            assert task.result["attempt"] == (2 if i == 0 else 1)  # the first task was retried
            assert log[task.id] == (["retrying", f"succeeded {i}"] if i == 0 else [f"succeeded {i}"])
            assert task.result["fastapi"] is False and task.result["web"] == []  # a worker never loads the web layer
        pids = {task.result["pid"] for task in tasks.values() if task.result}
        assert pids <= {p.pid for p in procs}
        held = session.execute(
            text("SELECT count(*) FROM task_lane_slots WHERE lane = :l AND task_id IS NOT NULL"),
            {"l": task_module["lane"]},
        ).scalar_one()
        assert held == 0
    assert [p.returncode for p in procs] == [0, 0], [log_tail(p) for p in procs]


def test_the_worker_entry_point_imports_neither_fastapi_nor_the_web_layer():
    code = textwrap.dedent(
        """
        import sys
        from mewdex import runtime
        from mewdex.cli import app, worker  # the console entry (mewdex = "mewdex.cli:app") and the command
        runtime.load_plugins()  # every task type a worker runs
        import mewdex.queue.worker, mewdex.queue.scheduler, mewdex.runtime.maintenance
        runtime.scheduler
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("fastapi", "starlette")
                        or m == "mewdex.web" or m.startswith("mewdex.web."))
        print(loaded)
        assert loaded == [], loaded
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MEWDEX_TASK_MODULES": "[]"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_concurrent_schedulers_enqueue_each_slot_once(sessions, scope):
    schedule = Schedule(f"test-{uuid.uuid4().hex[:8]}", "noop", 60, scope.scope_id)
    slots = range(1000, 1012)
    barrier = threading.Barrier(6)
    enqueued: list[str] = []
    errors: list[BaseException] = []

    def run():
        try:
            barrier.wait()
            for slot in slots:
                with sessions.begin() as session:
                    task = enqueue_slot(session, schedule, slot)
                    if task is not None:
                        enqueued.append(task.dedupe_key)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert sorted(enqueued) == sorted(schedule.dedupe_key(s) for s in slots)  # one enqueuer won each slot
    with sessions.begin() as session:
        rows = session.execute(select(Task.dedupe_key, Task.payload).where(Task.scope_id == scope.scope_id)).all()
        assert len(rows) == len(slots) and {r.payload["slot"] for r in rows} == set(slots)
        # A slot whose task already finished is not enqueued again (the dedupe is on every status).
        session.execute(
            text("UPDATE tasks SET status = 'succeeded', completed_at = now() WHERE scope_id = :s"),
            {"s": scope.scope_id},
        )
    with sessions.begin() as session:
        assert enqueue_slot(session, schedule, slots[0]) is None


def test_the_schedulers_statements_read_an_index_not_every_task(sessions, scope):
    """A schedule's slot lookup and prune find its tasks through an index: a library keeps three
    pipeline tasks per meme, and every tick of every schedule runs both statements."""
    from sqlalchemy import event

    schedule = Schedule(f"test-{uuid.uuid4().hex[:8]}", "noop", 60, scope.scope_id)
    statements: list[tuple[str, object]] = []
    with sessions.begin() as session:
        connection = session.connection()

        def capture(conn, cursor, statement, parameters, context, executemany):
            if " tasks" in statement and statement.lstrip().upper().startswith(("SELECT", "DELETE")):
                statements.append((statement, parameters))

        event.listen(connection, "before_cursor_execute", capture)
        try:
            assert enqueue_slot(session, schedule, 7) is not None
            assert slots_taken(session, [(schedule, 7), (schedule, 8)]) == {
                schedule.dedupe_key(7),
                schedule.dedupe_key(8),
            }
        finally:
            event.remove(connection, "before_cursor_execute", capture)
        assert any(s.lstrip().upper().startswith("DELETE") for s, _ in statements)
        assert any(s.lstrip().upper().startswith("SELECT") for s, _ in statements)
        session.execute(text("SET LOCAL enable_seqscan = off"))  # the test database is small
        for statement, parameters in statements:
            plan = "\n".join(r[0] for r in connection.exec_driver_sql("EXPLAIN " + statement, parameters))
            assert "ix_tasks_standalone_dedupe" in plan, plan  # not the scope's every task (scan or index)


def test_a_tick_reads_which_due_slots_are_taken_in_one_statement(sessions, scope):
    """Every process's scheduler is due at the same moment, and all but one find the slots enqueued: a tick
    learns that from one read for all its due schedules, and enqueues only the slots nobody took."""
    from sqlalchemy import event

    t0 = 1_000_000_000.0
    schedules = [Schedule(f"test-{uuid.uuid4().hex[:8]}", "noop", 10, scope.scope_id) for _ in range(3)]
    with sessions.begin() as session:  # another process enqueued the first schedule's slot already
        assert enqueue_slot(session, schedules[0], 100_000_001) is not None
    scheduler = Scheduler(sessions, schedules, started=t0)
    reads: list[str] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("SELECT TASKS."):
            reads.append(statement)

    event.listen(sessions.kw["bind"], "before_cursor_execute", capture)
    try:
        made = scheduler.tick(t0 + 10)
    finally:
        event.remove(sessions.kw["bind"], "before_cursor_execute", capture)
    assert sorted(t.dedupe_key for t in made) == sorted(s.dedupe_key(100_000_001) for s in schedules[1:])
    # One read for the three due slots, then each enqueue's own check under its lock (two).
    assert len(reads) == 3, reads
    assert scheduler.tick(t0 + 15) == []  # nothing due
    made = Scheduler(sessions, schedules, started=t0).tick(t0 + 10)  # a second process, same moment: all taken
    assert made == []


def test_a_scheduler_ticks_once_per_interval_after_its_first(sessions, scope):
    schedule = Schedule(f"test-{uuid.uuid4().hex[:8]}", "noop", 10, scope.scope_id)
    t0 = 1_000_000_000.0
    first, second = Scheduler(sessions, [schedule], started=t0), Scheduler(sessions, [schedule], started=t0 + 3)
    assert first.tick(t0 + 5) == [] and second.tick(t0 + 5) == []  # nothing in the first interval
    made = first.tick(t0 + 10) + second.tick(t0 + 13.5)  # both due in slot 100,000,001: one task
    assert [t.dedupe_key for t in made] == [schedule.dedupe_key(100_000_001)]
    assert first.tick(t0 + 12) == []  # not due again before the next slot
    # No worker took the first slot's task yet: the next slots add no second one beside it.
    assert second.tick(t0 + 20) == []
    with sessions.begin() as session:  # it waits out a retry's back-off instead: the next slot comes
        session.execute(
            text("UPDATE tasks SET available_at = now() + interval '1 hour' WHERE scope_id = :s"),
            {"s": scope.scope_id},
        )
    assert [t.dedupe_key for t in first.tick(t0 + 25)] == [schedule.dedupe_key(100_000_002)]
    with sessions.begin() as session:
        session.execute(
            text("UPDATE tasks SET status = 'succeeded', completed_at = now() WHERE scope_id = :s"),
            {"s": scope.scope_id},
        )
    assert [t.dedupe_key for t in second.tick(t0 + 30)] == [schedule.dedupe_key(100_000_003)]
    with sessions.begin() as session:
        lanes = set(session.execute(select(Task.lane).where(Task.scope_id == scope.scope_id)).scalars())
    assert lanes == {registry.get("noop").lane}


def test_a_stopped_worker_exits_although_a_handler_left_a_thread_running(sessions, scope, mewdex_env, task_module):
    """Interpreter shutdown joins every thread pool's workers; a stopped worker must not wait for what
    a handler left behind (a long poll), or it outlives its grace period and gets killed."""
    env = task_module["env"]
    with sessions.begin() as session:
        session.execute(text(f"CREATE TABLE {task_module['table']} (task_id text, note text)"))
        registry.submit(
            session, scope_id=scope.scope_id, task_type=task_module["name"], payload={"value": 1, "linger": True}
        )
    procs = start_workers(mewdex_env, 1, concurrency=1, lanes=task_module["lane"], extra_env=env)
    try:
        wait_until(lambda: status_counts(sessions, scope) == {"succeeded": 1}, 120, 0.2, "the lingering task to run")
        wait_started(sessions, procs)
        procs[0].send_signal(signal.SIGTERM)
        assert exit_code(procs[0], timeout=20) == 0, log_tail(procs[0])
        assert "mewdex worker: stopped" in log_tail(procs[0])
    finally:
        stop_workers(procs)
        with sessions.begin() as session:
            session.execute(text(f"DROP TABLE {task_module['table']}"))
