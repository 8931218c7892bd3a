"""The processing control plane with real ``mewdex worker`` processes on the real PostgreSQL: exactly-once
draining, SIGKILL + lease expiry + fencing, fairness across scopes, lane concurrency, poison tasks
(JOB-02), graceful SIGTERM, unknown_execution and analysis cost limits.

Each test uses its own scope and (where workers are started) its own lane, served only by the workers
it starts, so other tests' workers never take these tasks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from conftest import wait_until
from mewdex.db.models import Task, TaskAttempt
from mewdex.queue import registry
from mewdex.queue import tasks as queue
from queue_helpers import (
    enqueue_noops,
    exit_code,
    start_workers,
    status_counts,
    stop_workers,
)

FAST = {"MEWDEX_WORKER_POLL_SECONDS": "0.05"}


@pytest.fixture
def lane():
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def workers(mewdex_env):
    started = []

    def start(n, **kw):
        kw["extra_env"] = {**FAST, **kw.get("extra_env", {})}
        procs = start_workers(mewdex_env, n, **kw)
        started.extend(procs)
        return procs

    yield start
    stop_workers(started, signal.SIGKILL, timeout=10)


def attempts_of(sessions, scope) -> dict[str, list[tuple[int, str]]]:
    with sessions.begin() as session:
        rows = session.execute(
            text("SELECT task_id, attempt, state FROM task_attempts WHERE scope_id = :s ORDER BY attempt"),
            {"s": scope.scope_id},
        ).all()
    out: dict[str, list[tuple[int, str]]] = {}
    for task_id, attempt, state in rows:
        out.setdefault(task_id, []).append((attempt, state))
    return out


def test_workers_drain_2000_noops_each_exactly_once(sessions, scope, lane, workers):
    ids = enqueue_noops(sessions, scope, 2000, lane=lane)
    workers(3, concurrency=2, lanes=lane)
    wait_until(lambda: status_counts(sessions, scope).get("succeeded") == 2000, 90, 0.5, "2,000 tasks done")
    with sessions.begin() as session:
        rows = session.execute(
            text("SELECT attempt_count, claim_generation, count(*) FROM tasks WHERE scope_id = :s GROUP BY 1, 2"),
            {"s": scope.scope_id},
        ).all()
        owners = session.execute(
            text("SELECT count(DISTINCT split_part(lease_owner, ':', 2)) FROM task_lane_slots WHERE lane = :l"),
            {"l": lane},
        ).scalar_one()
    assert rows == [(1, 1, 2000)]  # every task claimed once, run once
    attempts = attempts_of(sessions, scope)
    assert set(attempts) == set(ids) and all(a == [(1, "completed")] for a in attempts.values())
    assert owners == 0  # every slot released


def test_sigkilled_worker_task_is_completed_by_another_after_lease_expiry(sessions, scope, lane, workers):
    short = {"MEWDEX_WORKER_LEASE_SECONDS": "5", "MEWDEX_WORKER_HEARTBEAT_SECONDS": "1"}
    [task_id] = enqueue_noops(sessions, scope, 1, lane=lane, payload={"sleep": 60, "sleep_attempts": 1})
    [victim] = workers(1, concurrency=1, lanes=lane, extra_env=short)

    def running_owner():
        with sessions.begin() as session:
            t = session.get(Task, task_id)
            return t.lease_owner if t.status == "running" else None

    owner = wait_until(running_owner, 30, what="the first worker to claim the task")
    assert owner.split(":")[1] == str(victim.pid)
    with sessions.begin() as session:
        t = session.get(Task, task_id)
        stale = queue.Claim(scope.scope_id, task_id, "noop", lane, {}, t.claim_generation, 1, 3)
    [survivor] = workers(1, concurrency=1, lanes=lane, extra_env=short)  # the survivor, running before the kill

    def survivor_connected():
        with sessions.begin() as session:
            return session.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE :a"),
                {"a": f"mewdex-worker:%:{survivor.pid}"},
            ).scalar_one()

    wait_until(survivor_connected, 60, what="the survivor to start")  # else its start-up expires the dead lease
    time.sleep(1.5 * float(short["MEWDEX_WORKER_HEARTBEAT_SECONDS"]))  # heartbeats keep the lease alive meanwhile
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    killed_at = time.monotonic()
    wait_until(lambda: status_counts(sessions, scope).get("succeeded") == 1, 30, 0.2, "the survivor to finish")
    assert time.monotonic() - killed_at >= 2  # only after the lease ran out
    with sessions.begin() as session:
        t = session.get(Task, task_id)
        assert (t.attempt_count, t.claim_generation) == (2, 2)
        assert [e["code"] for e in t.error_history] == ["lease_expired"]
    assert attempts_of(sessions, scope)[task_id] == [(1, "failed"), (2, "completed")]
    with sessions.begin() as session:  # the dead worker's slots were freed by the reaper, the survivor's on success
        held = (
            session.execute(
                text(
                    "SELECT count(*) FROM task_lane_slots WHERE task_id = :i UNION ALL "
                    "SELECT count(*) FROM task_lane_resource_slots WHERE task_id = :i"
                ),
                {"i": task_id},
            )
            .scalars()
            .all()
        )
    assert held == [0, 0]
    # The killed worker's late write-back (simulated with its claim) is rejected by fencing.
    with pytest.raises(queue.StaleClaim):
        with sessions.begin() as session:
            queue.complete(session, stale, {"from": "the dead"})
    with sessions.begin() as session:
        assert queue.heartbeat(session, stale, 60) is False
        assert session.get(Task, task_id).result == {"ok": True}


def test_a_small_scope_is_not_starved_by_a_big_one(sessions, scope, lane, workers):
    from conftest import drop_scope, new_scope

    small = new_scope(sessions)
    try:
        enqueue_noops(sessions, scope, 1000, lane=lane)
        [mine] = enqueue_noops(sessions, small, 1, lane=lane)
        workers(2, concurrency=1, lanes=lane)
        wait_until(lambda: status_counts(sessions, small).get("succeeded") == 1, 60, 0.1, "the small scope's task")
        with sessions.begin() as session:
            started = session.execute(text("SELECT started_at FROM tasks WHERE id = :i"), {"i": mine}).scalar_one()
            before = session.execute(
                text("SELECT count(*) FROM tasks WHERE scope_id = :s AND started_at < :t"),
                {"s": scope.scope_id, "t": started},
            ).scalar_one()
        assert before <= 3, f"{before} tasks of the big scope started first"
    finally:
        drop_scope(sessions, small)


def test_lane_concurrency_holds_across_processes(sessions, scope, workers):
    lane = "agent"
    enqueue_noops(sessions, scope, 16, lane=lane, payload={"sleep": 0.4})
    workers(4, concurrency=1, lanes=lane, extra_env={"MEWDEX_LANE_CONCURRENCY_AGENT": "2"})
    peak = 0

    def drained_within_the_limit() -> bool:
        nonlocal peak
        if status_counts(sessions, scope).get("succeeded", 0) >= 16:
            return True
        with sessions.begin() as session:
            running = session.execute(
                text("SELECT count(*) FROM tasks WHERE lane = 'agent' AND status = 'running'")
            ).scalar_one()
            held = session.execute(
                text("SELECT count(*) FROM task_lane_slots WHERE lane = 'agent' AND task_id IS NOT NULL")
            ).scalar_one()
        assert running <= 2 and held <= 2, (running, held)
        peak = max(peak, running)
        return False

    wait_until(drained_within_the_limit, 90, 0.05, "the lane to drain")
    assert peak == 2  # the lane was used at its concurrency, not below


def test_poison_task_stops_at_max_attempts_while_others_finish(sessions, scope, lane, workers):
    """JOB-02: a task that fails every time stops after its attempt limit with its error; the rest run."""
    [poison] = enqueue_noops(
        sessions,
        scope,
        1,
        lane=lane,
        max_attempts=3,
        payload={"fail": "image_corrupt", "message": "cannot identify image file"},
    )
    others = enqueue_noops(sessions, scope, 40, lane=lane)
    workers(2, concurrency=2, lanes=lane)
    wait_until(lambda: status_counts(sessions, scope) == {"succeeded": 40, "failed": 1}, 60, 0.2, "all tasks ended")
    with sessions.begin() as session:
        t = session.get(Task, poison)
        assert t.status == "failed" and t.attempt_count == 3 and t.error["code"] == "image_corrupt"
        assert [e["attempt"] for e in t.error_history] == [1, 2, 3]
    assert [s for _, s in attempts_of(sessions, scope)[poison]] == ["failed"] * 3
    assert all(attempts_of(sessions, scope)[i] == [(1, "completed")] for i in others)


def test_sigterm_finishes_within_grace_or_releases(sessions, scope, lane, workers):
    [quick] = enqueue_noops(sessions, scope, 1, lane=lane, payload={"sleep": 2})
    [proc] = workers(1, concurrency=1, lanes=lane, extra_env={"MEWDEX_WORKER_GRACE_SECONDS": "20"})
    wait_until(lambda: status_counts(sessions, scope).get("running") == 1, 30, what="the claim")
    proc.send_signal(signal.SIGTERM)
    assert exit_code(proc) == 0
    assert status_counts(sessions, scope) == {"succeeded": 1}  # finished within the grace period

    [slow] = enqueue_noops(sessions, scope, 1, lane=lane, payload={"sleep": 60})
    [proc] = workers(1, concurrency=1, lanes=lane, extra_env={"MEWDEX_WORKER_GRACE_SECONDS": "0.5"})
    wait_until(lambda: status_counts(sessions, scope).get("running") == 1, 30, what="the claim")
    proc.send_signal(signal.SIGTERM)
    assert exit_code(proc) == 0
    with sessions.begin() as session:
        t = session.get(Task, slow)
        assert t.status == "queued" and t.lease_owner is None and t.max_attempts == 4  # the attempt is given back
        a = session.get(TaskAttempt, (scope.scope_id, slow, 1))
        assert (a.state, a.termination_signal) == ("failed", "SIGTERM")
        held = session.execute(
            text("SELECT count(*) FROM task_lane_slots WHERE task_id = :i"), {"i": slow}
        ).scalar_one()
    assert held == 0 and quick


def test_unknown_execution_is_not_replayed_and_resumes_on_request(sessions, scope, lane):
    from mewdex.queue import service

    [task_id] = enqueue_noops(sessions, scope, 1, lane=lane, payload={"external": True})
    with sessions.begin() as session:
        c = queue.claim(session, owner="doomed", lanes=[lane], lease_seconds=60)
    registry.TaskContext(sessions, c).external_started("exec-1")  # then the worker dies
    with sessions.begin() as session:
        session.execute(
            text("UPDATE tasks SET lease_expires_at = now() - interval '1 s' WHERE id = :i"), {"i": task_id}
        )
        # other tests' leftovers may be reaped too (the reaper is global): only ours is asserted
        assert [(r.task.id, r.outcome) for r in queue.reap_expired(session) if r.task.id == task_id] == [
            (task_id, "unknown_execution")
        ]
    with sessions.begin() as session:
        t = session.get(Task, task_id)
        assert (t.status, t.termination_reason, t.resume_available) == ("failed", "unknown_execution", True)
        a = session.get(TaskAttempt, (scope.scope_id, task_id, 1))
        assert (a.state, a.resume_available, a.executor_attempt_id) == ("unknown_execution", True, "exec-1")
    with sessions.begin() as session:
        assert queue.claim(session, owner="other", lanes=[lane], lease_seconds=60) is None  # never auto-replayed
    with sessions.begin() as session:
        service.retry(session, scope, task_id)
    with sessions.begin() as session:
        c2 = queue.claim(session, owner="other", lanes=[lane], lease_seconds=60)
    assert c2.task_id == task_id and c2.attempt_count == 2
    with sessions.begin() as session:
        a2 = session.get(TaskAttempt, (scope.scope_id, task_id, 2))
        assert a2.resume_of_attempt_id == f"{task_id}:1" and a2.state == "prepared"
        assert session.get(Task, task_id).resume_attempt_count == 1


def test_analysis_cost_limit_terminates_the_task(sessions, scope, lane, drain):
    ids = enqueue_noops(sessions, scope, 2, lane=lane, payload={"cost": 0.5})
    with sessions.begin() as session:
        session.execute(
            text("UPDATE tasks SET analysis_policy = CAST(:p AS jsonb) WHERE id = :i"),
            {"p": '{"max_cost_per_image": 0.4}', "i": ids[0]},
        )
        session.execute(
            text("UPDATE tasks SET analysis_policy = CAST(:p AS jsonb) WHERE id = :i"),
            {"p": '{"max_cost_per_image": 1.0}', "i": ids[1]},
        )
    from mewdex.queue.worker import Worker

    w = Worker(sessions, lanes=[lane])
    while w.run_once():
        pass
    with sessions.begin() as session:
        over, fine = session.get(Task, ids[0]), session.get(Task, ids[1])
        assert (over.status, over.error["code"], over.termination_reason) == (
            "failed",
            "analysis_cost_limit",
            "analysis_cost_limit",
        )
        assert over.attempt_count == 1 and float(over.observed_cost) == 0.5  # not retried; cost recorded
        assert fine.status == "succeeded" and float(fine.observed_cost) == 0.5
        a = session.get(TaskAttempt, (scope.scope_id, ids[0], 1))
        assert (a.termination_reason, float(a.observed_cost)) == ("analysis_cost_limit", 0.5)


_STARTER = """import sys
from mewdex.queue.worker import WorkerProcesses
p = WorkerProcesses(2, lanes=[sys.argv[1]])
p.start()
print(*[c.pid for c in p.children], flush=True)
sys.stdin.readline()
print(p.stop(), *[c.returncode for c in p.children], flush=True)
sys.stdin.readline()
"""


def test_worker_child_processes_drain_the_queue_stop_cleanly_and_die_with_their_parent(
    mewdex_env, sessions, scope, lane
):
    """``serve`` and ``import --wait`` start ``mewdex worker`` children (queue.worker.WorkerProcesses),
    which run ``MEWDEX_WORKER_NICE`` below their starter, and so do their backends of the embedded
    database."""
    env = {**os.environ, **mewdex_env.env, **FAST, "MEWDEX_WORKER_NICE": "3"}
    enqueue_noops(sessions, scope, 30, lane=lane)
    starters, children = [], []

    def start() -> subprocess.Popen:
        """A process that starts 2 children (their pids on its first line), stops them on a line of input."""
        starter = subprocess.Popen(
            [sys.executable, "-c", _STARTER, lane], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        starters.append(starter)
        children.extend(int(pid) for pid in starter.stdout.readline().split())
        return starter

    try:
        first = start()
        assert len(children) == 2
        wait_until(lambda: status_counts(sessions, scope).get("succeeded") == 30, 90, what="30 no-ops done")
        lowered = min(19, os.getpriority(os.PRIO_PROCESS, first.pid) + 3)
        assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in children] == [lowered, lowered]
        backends = _backends(sessions, children)
        assert backends and [os.getpriority(os.PRIO_PROCESS, pid) for pid in backends] == [lowered] * len(backends)
        first.stdin.write("\n")
        first.stdin.flush()
        killed, *codes = [int(x) for x in first.stdout.readline().split()]
        # SIGTERM: both stopped on their own (one still starting up has nothing to finish and just ends)
        assert killed == 0 and all(code in (0, -signal.SIGTERM) for code in codes) and 0 in codes

        # A second pair, then their starter is SIGKILLed: its children follow it.
        second = start()
        orphans = children[2:]
        wait_until(lambda: all(_state(pid) in "SR" for pid in orphans), 30, what="children running")
        second.kill()
        second.wait()
        wait_until(lambda: all(_state(pid) in ("gone", "Z") for pid in orphans), 60, what="children exit")
    finally:
        for starter in starters:
            starter.kill()
            starter.wait()
        for pid in children:
            if _state(pid) not in ("gone", "Z"):
                os.kill(pid, signal.SIGKILL)


def _backends(sessions, pids: list[int]) -> list[int]:
    """The database backends of the ``mewdex worker`` processes ``pids`` (by their application name)."""
    from mewdex.runtime import WORKER_APPLICATION_PREFIX

    with sessions() as session:
        return list(
            session.execute(
                text(
                    "SELECT pid FROM pg_stat_activity WHERE application_name LIKE :prefix AND application_name ~ :pids"
                ),
                {"prefix": f"{WORKER_APPLICATION_PREFIX}:%", "pids": f":({'|'.join(map(str, pids))})$"},
            ).scalars()
        )


def _state(pid: int) -> str:
    """The process's state letter from /proc (``gone`` when it no longer exists)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return "gone"
