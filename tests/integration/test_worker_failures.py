"""Worker failures (issue 20): an exception between a task's handler and its commit takes the task's
failure path (retried with backoff, lane slot freed at once), never leaves it ``running`` until its lease
expires."""

from __future__ import annotations

import errno
import uuid

from sqlalchemy import text

from mewdex.db.models import Task
from mewdex.queue import registry
from mewdex.queue.registry import RetryPolicy, TaskType
from mewdex.queue.worker import Worker


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


def test_a_full_disk_in_the_success_hook_retries_at_once_and_frees_the_slot(sessions, scope):
    calls = []

    def on_success(session, claim, task, result, batch_id):  # e.g. the visual stage writing its blob
        calls.append(claim.attempt_count)
        if claim.attempt_count == 1:
            raise OSError(errno.ENOSPC, "No space left on device")

    tt = _register(on_success=on_success)
    task_id = _submit(sessions, scope, tt)
    worker = Worker(sessions, lanes=[tt.lane])
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
    worker = Worker(sessions, lanes=[tt.lane])
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
    worker = Worker(sessions, lanes=[tt.lane])
    _run_until(worker, sessions, task_id, lambda t: t.status == "failed")
    with sessions.begin() as session:
        task = session.get(Task, task_id)
        assert (task.status, task.attempt_count) == ("failed", 3)  # its retry policy's 3 attempts, then failed
        assert task.error["code"] == "write_back_failed"
        assert _held_slots(session, tt.lane) == 0
