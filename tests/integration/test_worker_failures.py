"""Worker failures (issue 20): an exception between a task's handler and its commit takes the task's
failure path (retried with backoff, lane slot freed at once), never leaves it ``running`` until its lease
expires."""

from __future__ import annotations

import errno
import threading
import time
import uuid

from sqlalchemy import text

from conftest import wait_until
from mewdex.db.models import Task, TaskAttempt
from mewdex.queue import registry
from mewdex.queue.registry import RetryPolicy, TaskType
from mewdex.queue.tasks import Lane
from mewdex.queue.worker import Worker, WorkerPool


def _register(on_success=None, handler=None) -> TaskType:
    suffix = uuid.uuid4().hex[:8]
    tt = TaskType(
        name=f"test_write_back_{suffix}",
        lane=f"t-wb-{suffix}",
        handler=handler or (lambda ctx: {"ok": 1}),
        on_success=on_success,
        retry=RetryPolicy(max_attempts=3, base_seconds=0, cap_seconds=0),
    )
    registry.register_task_type(tt)
    return tt


def _held_slots(session, lane: str) -> int:
    return session.execute(
        text("SELECT count(*) FROM task_lane_slots WHERE lane = :l AND task_id IS NOT NULL"), {"l": lane}
    ).scalar_one()


def _run_until(worker: Worker, sessions, task_id: str, predicate, limit: int = 40) -> Task:
    """Run the worker's loop (which also serves the internal maintenance lane) until the task's row
    satisfies ``predicate``; returns the row."""
    for _ in range(limit):
        worker.run_once()
        with sessions.begin() as session:
            task = session.get(Task, task_id)
            if predicate(task):
                return task
    raise AssertionError(f"task {task_id}: {task.status}, attempt {task.attempt_count}")


def _submit(sessions, scope, tt: TaskType) -> str:
    with sessions.begin() as session:
        return registry.submit(session, scope_id=scope.scope_id, task_type=tt.name, payload={}).id


def _only_its_lane(worker: Worker, tt: TaskType) -> Worker:
    """Serve ``tt``'s lane alone, not the internal lanes every worker also serves: in a full run earlier
    tests leave tasks there (a channel's long poll, ``maintenance``), and a worker that claims one of
    those holds it as ``current`` where the test expects its own task or none."""
    worker.lanes = [tt.lane]
    return worker


def test_a_full_disk_in_the_success_hook_retries_at_once_and_frees_the_slot(sessions, scope):
    calls = []

    def on_success(session, claim, task, result, batch_id):  # e.g. the visual stage writing its blob
        calls.append(claim.attempt_count)
        if claim.attempt_count == 1:
            raise OSError(errno.ENOSPC, "No space left on device")

    tt = _register(on_success=on_success)
    task_id = _submit(sessions, scope, tt)
    worker = _only_its_lane(Worker(sessions, lanes=[tt.lane]), tt)
    # the write-back raises: before the fix this escaped and left the task running until its lease expired
    task = _run_until(worker, sessions, task_id, lambda t: t.attempt_count == 1 and t.status != "running")
    assert task.status == "queued" and task.lease_owner is None
    assert task.error["code"] == "insufficient_storage"
    with sessions.begin() as session:
        assert _held_slots(session, tt.lane) == 0  # released at once, not when the lease expires
    task = _run_until(worker, sessions, task_id, lambda t: t.status == "succeeded")  # retried at once (backoff 0)
    assert task.attempt_count == 2
    with sessions.begin() as session:
        assert _held_slots(session, tt.lane) == 0
    assert calls == [1, 2]


def test_a_result_that_cannot_be_stored_fails_the_task_not_the_next_claim(sessions, scope):
    """A type without a success hook is completed in the next claim's transaction: its failing write-back
    must neither leave it running nor roll back that claim."""

    def handler(ctx):
        return {"bad": {1, 2}} if ctx.claim.attempt_count == 1 else {"ok": 2}  # a set is not JSON

    tt = _register(handler=handler)
    task_id = _submit(sessions, scope, tt)
    other_id = _submit(sessions, scope, tt)
    worker = _only_its_lane(Worker(sessions, lanes=[tt.lane]), tt)
    _run_until(worker, sessions, other_id, lambda t: t.status == "succeeded")
    _run_until(worker, sessions, task_id, lambda t: t.status == "succeeded")
    with sessions.begin() as session:
        first = session.get(Task, task_id)
        other = session.get(Task, other_id)
        assert first.status == "succeeded" and first.result == {"ok": 2}
        assert [e["code"] for e in first.error_history] == ["write_back_failed"]
        assert other.status == "succeeded"
        assert _held_slots(session, tt.lane) == 0


def test_any_exception_in_the_success_hook_is_a_retryable_failure(sessions, scope):
    def on_success(session, claim, task, result, batch_id):
        raise ValueError("a bug in the hook")

    tt = _register(on_success=on_success)
    task_id = _submit(sessions, scope, tt)
    worker = _only_its_lane(Worker(sessions, lanes=[tt.lane]), tt)
    _run_until(worker, sessions, task_id, lambda t: t.status == "failed")
    with sessions.begin() as session:
        task = session.get(Task, task_id)
        assert (task.status, task.attempt_count) == ("failed", 3)  # its retry policy's 3 attempts, then failed
        assert task.error["code"] == "write_back_failed"
        assert _held_slots(session, tt.lane) == 0


# ------------------------------------------------------------------ the write-back overlapping the next task


def _run_in_thread(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def _run_loop_until_succeeded(worker: Worker, sessions, task_ids: list[str], timeout: float = 30) -> None:
    """Run ``worker.run`` in a thread until every task succeeded (AssertionError after ``timeout``
    seconds), then stop the worker and wait for its loop to end."""
    thread = _run_in_thread(worker)

    def succeeded() -> bool:
        with sessions.begin() as session:
            return all(session.get(Task, t).status == "succeeded" for t in task_ids)

    try:
        wait_until(succeeded, timeout, 0.05, "the tasks to succeed")
    finally:
        worker.stop_event.set()
        thread.join(10)


def test_run_starts_the_next_task_while_the_last_ones_write_back_is_in_flight(sessions, scope):
    """Under ``run`` a hook's write-back runs beside the next handler (the models are not idle meanwhile),
    one at a time and in order; both end succeeded with their slots freed."""
    events: list[tuple[str, str]] = []
    second_started = threading.Event()
    overlapped: list[bool] = []

    def handler(ctx):
        events.append(("run", ctx.claim.task_id))
        if sum(kind == "run" for kind, _ in events) == 2:
            second_started.set()
        return {"ok": 1}

    def on_success(session, claim, task, result, batch_id):
        events.append(("write-back", claim.task_id))
        if not overlapped:  # the first write-back waits for the next handler (inline, it never comes)
            overlapped.append(second_started.wait(10))
        events.append(("written", claim.task_id))
        return False

    tt = _register(on_success=on_success, handler=handler)
    ids = [_submit(sessions, scope, tt), _submit(sessions, scope, tt)]
    # only this lane, as a pool's worker thread (no inline maintenance): the tasks that earlier tests left
    # in the internal lanes (a channel's long poll) must not be what the loop runs meanwhile
    worker = _only_its_lane(Worker(sessions, lanes=[tt.lane], maintenance=False), tt)
    _run_loop_until_succeeded(worker, sessions, ids, timeout=60)
    assert overlapped == [True]
    first, second = events[0][1], next(task for kind, task in events if kind == "run" and task != events[0][1])
    # one write-back in flight at most, in claim order
    assert [e for e in events if e[0] != "run"] == [
        ("write-back", first),
        ("written", first),
        ("write-back", second),
        ("written", second),
    ]
    with sessions.begin() as session:
        assert _held_slots(session, tt.lane) == 0


def test_a_pool_stopped_during_a_write_back_in_flight_lets_it_commit(sessions, scope):
    """Past the grace period too: ``mewdex worker`` exits with os._exit right after ``stop()``, which would
    roll the write-back back and leave the task running until its lease expired."""
    started = threading.Event()
    threads: list[str] = []

    def on_success(session, claim, task, result, batch_id):
        threads.append(threading.current_thread().name)
        started.set()
        time.sleep(1.5)
        return False

    tt = _register(on_success=on_success)
    task_id = _submit(sessions, scope, tt)
    pool = WorkerPool(sessions, 1, lanes=[tt.lane])
    for worker in pool.workers:  # else the thread may claim an earlier test's leftover next: released
        _only_its_lane(worker, tt)
    pool.start()
    assert started.wait(20)
    assert pool.stop(grace=0) == 0  # nothing to release: the task's result was written
    with sessions.begin() as session:
        assert session.get(Task, task_id).status == "succeeded"
        assert _held_slots(session, tt.lane) == 0
    assert "write-back" in threads[0]  # it was the writer thread's


def test_a_worker_told_to_stop_during_a_handler_writes_its_result_back_inline(sessions, scope):
    """Its thread keeps the task as ``current`` while writing back, so a pool releasing the running tasks
    after the grace period waits for that write-back instead of finding nothing to release."""
    threads: list[str] = []
    worker = Worker(sessions, lanes=[])

    def handler(ctx):
        worker.stop_event.set()  # SIGTERM arrives while the task runs
        return {"ok": 1}

    def on_success(session, claim, task, result, batch_id):
        threads.append(threading.current_thread().name)
        assert worker.current is not None and worker.current.task_id == claim.task_id
        return False

    tt = _register(on_success=on_success, handler=handler)
    _only_its_lane(worker, tt)
    task_id = _submit(sessions, scope, tt)
    thread = _run_in_thread(worker)
    thread.join(20)
    assert not thread.is_alive()
    with sessions.begin() as session:
        assert session.get(Task, task_id).status == "succeeded"
    assert len(threads) == 1 and "write-back" not in threads[0]


def test_a_failing_write_back_in_flight_takes_the_failure_path(sessions, scope):
    threads: list[str] = []

    def on_success(session, claim, task, result, batch_id):
        threads.append(threading.current_thread().name)
        if claim.attempt_count == 1:
            raise ValueError("a bug in the hook")
        return False

    tt = _register(on_success=on_success)
    task_id = _submit(sessions, scope, tt)
    worker = _only_its_lane(Worker(sessions, lanes=[tt.lane]), tt)
    _run_loop_until_succeeded(worker, sessions, [task_id])
    with sessions.begin() as session:
        task = session.get(Task, task_id)
        assert task.attempt_count == 2
        assert [e["code"] for e in task.error_history] == ["write_back_failed"]
        assert _held_slots(session, tt.lane) == 0
    assert all("write-back" in name for name in threads)


def test_a_write_back_in_flight_that_loses_its_connection_hands_the_task_back(sessions, scope):
    threads: list[str] = []

    def on_success(session, claim, task, result, batch_id):
        threads.append(threading.current_thread().name)
        if claim.attempt_count == 1:  # the server ends this connection mid-write-back
            session.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
        return False

    tt = _register(on_success=on_success)
    task_id = _submit(sessions, scope, tt)
    worker = _only_its_lane(Worker(sessions, lanes=[tt.lane]), tt)
    _run_loop_until_succeeded(worker, sessions, [task_id])
    with sessions.begin() as session:
        task = session.get(Task, task_id)
        assert task.attempt_count == 2  # handed back at once, not after its lease expired
        first = session.get(TaskAttempt, (task.scope_id, task_id, 1))
        assert (first.state, first.error["code"]) == ("failed", "database_unavailable")
        assert _held_slots(session, tt.lane) == 0
    assert len(threads) == 2 and all("write-back" in name for name in threads)


def test_a_lane_of_one_slot_claims_again_as_soon_as_the_write_back_frees_it(sessions, scope):
    """The task in write-back still holds the lane's only slot, so the next claim finds nothing; the loop
    then waits for the write-back and claims at once instead of sleeping its poll interval."""
    done: list[float] = []

    def on_success(session, claim, task, result, batch_id):
        done.append(time.monotonic())
        return False

    tt = _register(on_success=on_success)
    registry.register_lane(Lane(tt.lane, concurrency=lambda: 1))
    ids = [_submit(sessions, scope, tt) for _ in range(4)]
    worker = _only_its_lane(Worker(sessions, lanes=[tt.lane]), tt)
    worker.settings = worker.settings.model_copy(update={"worker_poll_seconds": 5.0})
    _run_loop_until_succeeded(worker, sessions, ids, timeout=12)  # 3 poll sleeps would take 15 s
    assert len(done) == 4 and done[-1] - done[0] < 4.0


def test_the_next_tasks_lease_is_renewed_while_it_waits_for_the_last_write_back(sessions, scope, settings_env):
    """The next task's handler is done, but its own write-back must wait for the one in flight: its
    heartbeat keeps renewing its lease meanwhile, so a slow write-back cannot get it reaped."""
    lease = 5
    settings_env(MEWDEX_WORKER_LEASE_SECONDS=str(lease), MEWDEX_WORKER_HEARTBEAT_SECONDS="1")
    first_writing, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def handler(ctx):
        ran.append(ctx.claim.task_id)
        return {"ok": 1}

    def on_success(session, claim, task, result, batch_id):
        if not first_writing.is_set():
            first_writing.set()
            release.wait(30)  # the first write-back stays open past the next task's lease
        return False

    tt = _register(on_success=on_success, handler=handler)
    ids = [_submit(sessions, scope, tt), _submit(sessions, scope, tt)]
    worker = _only_its_lane(Worker(sessions, lanes=[tt.lane], maintenance=False), tt)
    thread = _run_in_thread(worker)
    try:
        assert first_writing.wait(20)
        wait_until(
            lambda: len(ran) >= 2,
            20,
            0.05,
            lambda: f"the next task to run during the first one's write-back ({worker.current})",
        )
        assert len(ran) == 2, f"the next task did not run during the first one's write-back ({worker.current})"
        time.sleep(lease + 2)  # past the lease the next task was claimed with: only heartbeats kept it
        with sessions.begin() as session:
            status, renewed = session.execute(
                text("SELECT status, lease_expires_at > now() FROM tasks WHERE scope_id = :s AND id = :i"),
                {"s": scope.scope_id, "i": ran[1]},
            ).one()
        assert (status, renewed) == ("running", True)
    finally:
        release.set()

    def outcomes() -> list[tuple[str, int]]:
        with sessions.begin() as session:
            return [(t.status, t.attempt_count) for t in (session.get(Task, i) for i in ids)]

    try:
        wait_until(lambda: all(s == "succeeded" for s, _ in outcomes()), 30, 0.05, lambda: f"both tasks {outcomes()}")
        assert outcomes() == [("succeeded", 1), ("succeeded", 1)]
    finally:
        worker.stop_event.set()
        thread.join(10)
