"""The durable task queue on real PostgreSQL: dedupe, claim/lease, fencing, retries, reaping, fairness.

Every test uses its own scope and its own lane, so the pipeline workers of other tests never claim
these tasks and these claims never take theirs.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import text

from mewdex.db.models import Task, utcnow
from mewdex.queue import tasks as queue


@pytest.fixture
def lane():
    return f"t-{uuid.uuid4().hex[:12]}"


def enqueue(sessions, scope, lane, key=None, max_attempts=3) -> str:
    with sessions.begin() as session:
        return queue.enqueue(
            session,
            scope_id=scope.scope_id,
            task_type="test.noop",
            lane=lane,
            dedupe_key=key,
            payload={"n": 1},
            max_attempts=max_attempts,
        ).id


def claim(sessions, lane, owner="w1", lease=60):
    with sessions.begin() as session:
        return queue.claim(session, owner=owner, lanes=[lane], lease_seconds=lease)


def task(sessions, task_id) -> Task:
    with sessions.begin() as session:
        return session.get(Task, task_id)


def expire_lease(sessions, task_id) -> None:
    with sessions.begin() as session:
        session.execute(
            text("UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = :i"), {"i": task_id}
        )


def test_dedupe_key_returns_the_active_task(sessions, scope, lane):
    first = enqueue(sessions, scope, lane, key="k1")
    assert enqueue(sessions, scope, lane, key="k1") == first
    assert enqueue(sessions, scope, lane, key="k2") != first
    # Still deduplicated while running.
    c = claim(sessions, lane)
    assert c.task_id == first
    assert enqueue(sessions, scope, lane, key="k1") == first
    with sessions.begin() as session:
        queue.complete(session, c)
    # Once finished, the same key makes a new task.
    again = enqueue(sessions, scope, lane, key="k1")
    assert again != first
    # No dedupe key: always a new task.
    assert enqueue(sessions, scope, lane) != enqueue(sessions, scope, lane)


def test_claim_sets_lease_and_increments_generation(sessions, scope, lane):
    task_id = enqueue(sessions, scope, lane)
    before = task(sessions, task_id)
    assert (before.status, before.claim_generation, before.attempt_count) == ("queued", 0, 0)
    c = claim(sessions, lane, owner="w1", lease=60)
    assert c.task_id == task_id and c.claim_generation == 1 and c.attempt_count == 1 and c.payload == {"n": 1}
    row = task(sessions, task_id)
    assert row.status == "running" and row.lease_owner == "w1"
    assert timedelta(seconds=50) < row.lease_expires_at - utcnow() <= timedelta(seconds=61)
    assert row.started_at is not None
    # Nothing else is runnable in the lane: a running task with a live lease is not claimed again.
    assert claim(sessions, lane, owner="w2") is None
    # Heartbeat extends the lease of the current claim.
    with sessions.begin() as session:
        assert queue.heartbeat(session, c, 600)
    assert task(sessions, task_id).lease_expires_at - utcnow() > timedelta(seconds=500)


def test_concurrent_claims_get_different_tasks(sessions, scope, lane):
    """Claims racing from several threads (as worker threads do) never hand out one task twice."""
    import threading

    ids = {enqueue(sessions, scope, lane) for _ in range(4)}
    barrier = threading.Barrier(4)
    got: list = []

    def worker(i):
        barrier.wait()
        got.append(claim(sessions, lane, owner=f"w{i}"))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "claims deadlocked"
    assert sorted(c.task_id for c in got) == sorted(ids)
    assert all(c.claim_generation == 1 for c in got)


def test_expired_lease_is_reclaimed_and_the_old_claim_is_fenced(sessions, scope, lane):
    task_id = enqueue(sessions, scope, lane)
    old = claim(sessions, lane, owner="dead")
    expire_lease(sessions, task_id)
    assert claim(sessions, lane, owner="alive") is None  # the reaper requeues it first
    with sessions.begin() as session:
        # the reaper is global: other tests' expired leftovers may be reaped too, only ours is asserted
        assert [(r.task.id, r.outcome) for r in queue.reap_expired(session) if r.task.id == task_id] == [
            (task_id, "requeued")
        ]
    new = claim(sessions, lane, owner="alive")
    assert new.task_id == task_id
    assert new.claim_generation == old.claim_generation + 1
    assert new.attempt_count == 2

    with sessions.begin() as session:
        assert queue.heartbeat(session, old, 60) is False
    with pytest.raises(queue.StaleClaim):
        with sessions.begin() as session:
            queue.complete(session, old, result={"from": "dead"})
    row = task(sessions, task_id)
    assert (row.status, row.lease_owner, row.result) == ("running", "alive", None)

    with sessions.begin() as session:
        queue.complete(session, new, result={"from": "alive"})
    row = task(sessions, task_id)
    assert (row.status, row.result, row.lease_owner) == ("succeeded", {"from": "alive"}, None)
    # A finished task is fenced for everyone, the last owner included.
    with pytest.raises(queue.StaleClaim):
        with sessions.begin() as session:
            queue.fenced(session, new)


def test_retry_backoff_and_error_history(sessions, scope, lane):
    task_id = enqueue(sessions, scope, lane, max_attempts=3)
    c = claim(sessions, lane)
    with sessions.begin() as session:
        t = queue.fenced(session, c)
        final = queue.fail(t, "backend_unavailable", "ocr down", retryable=True, base=10, cap=100)
    assert final is False
    row = task(sessions, task_id)
    assert row.status == "queued" and row.lease_owner is None and row.lease_expires_at is None
    delay = (row.available_at - utcnow()).total_seconds()
    assert 4 <= delay <= 10.5  # uniform(0.5, 1) × base × 2^0
    assert [e["code"] for e in row.error_history] == ["backend_unavailable"]
    assert row.error["attempt"] == 1 and row.first_error["code"] == "backend_unavailable"
    # Not runnable before its time.
    assert claim(sessions, lane) is None

    # Second attempt: the backoff doubles.
    with sessions.begin() as session:
        session.execute(text("UPDATE tasks SET available_at = now() WHERE id = :i"), {"i": task_id})
    c2 = claim(sessions, lane)
    assert c2.attempt_count == 2
    with sessions.begin() as session:
        assert (
            queue.fail(queue.fenced(session, c2), "backend_unavailable", "still down", retryable=True, base=10, cap=100)
            is False
        )
    delay = (task(sessions, task_id).available_at - utcnow()).total_seconds()
    assert 9 <= delay <= 20.5

    # Last attempt fails for good.
    with sessions.begin() as session:
        session.execute(text("UPDATE tasks SET available_at = now() WHERE id = :i"), {"i": task_id})
    c3 = claim(sessions, lane)
    with sessions.begin() as session:
        assert queue.fail(queue.fenced(session, c3), "x_error", "m" * 900, retryable=True, base=10, cap=100) is True
    row = task(sessions, task_id)
    assert row.status == "failed" and row.completed_at is not None
    assert [e["attempt"] for e in row.error_history] == [1, 2, 3]
    assert row.first_error["message"] == "ocr down"
    assert len(row.error["message"]) == 500
    assert claim(sessions, lane) is None


def test_non_retryable_failure_is_final_at_once(sessions, scope, lane):
    task_id = enqueue(sessions, scope, lane, max_attempts=5)
    c = claim(sessions, lane)
    with sessions.begin() as session:
        assert queue.fail(queue.fenced(session, c), "image_corrupt", "bad", retryable=False, base=1, cap=1) is True
    assert task(sessions, task_id).status == "failed"


def test_backoff_is_capped(sessions, scope, lane):
    task_id = enqueue(sessions, scope, lane, max_attempts=50)
    with sessions.begin() as session:
        session.execute(text("UPDATE tasks SET attempt_count = 39 WHERE id = :i"), {"i": task_id})
    c = claim(sessions, lane)
    assert c.attempt_count == 40
    with sessions.begin() as session:
        queue.fail(queue.fenced(session, c), "e", "m", retryable=True, base=2, cap=30)
    assert (task(sessions, task_id).available_at - utcnow()).total_seconds() <= 30.5


def test_reap_fails_a_dead_workers_last_attempt(sessions, scope, lane):
    last = enqueue(sessions, scope, lane, max_attempts=1)
    c = claim(sessions, lane, owner="dead")
    assert c.task_id == last
    with sessions.begin() as session:
        assert last not in [r.task.id for r in queue.reap_expired(session)]  # lease still live
    expire_lease(sessions, last)
    with sessions.begin() as session:
        reaped = [(r.task.id, r.outcome) for r in queue.reap_expired(session)]
    assert (last, "failed") in reaped
    row = task(sessions, last)
    assert row.status == "failed" and row.error["code"] == "lease_expired" and row.lease_owner is None
    assert row.error_history[-1]["code"] == "lease_expired"
    with pytest.raises(queue.StaleClaim):
        with sessions.begin() as session:
            queue.fenced(session, c)
    assert claim(sessions, lane) is None


def test_expired_lease_with_attempts_left_is_requeued(sessions, scope, lane):
    task_id = enqueue(sessions, scope, lane, max_attempts=2)
    claim(sessions, lane, owner="dead")
    expire_lease(sessions, task_id)
    with sessions.begin() as session:
        assert (task_id, "requeued") in [(r.task.id, r.outcome) for r in queue.reap_expired(session)]
    assert claim(sessions, lane, owner="next").attempt_count == 2


def test_scopes_take_turns(sessions, scope, lane):
    from conftest import drop_scope, new_scope

    other = new_scope(sessions)
    try:
        a = [enqueue(sessions, scope, lane) for _ in range(3)]
        b = enqueue(sessions, other, lane)
        order = []
        for _ in range(4):
            c = claim(sessions, lane)
            order.append(c.task_id)
            with sessions.begin() as session:
                queue.complete(session, c)
        assert order == [a[0], b, a[1], a[2]]
    finally:
        drop_scope(sessions, other)
