"""Queue benchmark: no-op throughput and claim latency with 1, 2 and 4 ``mewdex worker`` processes.

Runs on a temporary embedded PostgreSQL, restarted once so that it runs with mewdex's sizing (or on
``MEWDEX_DATABASE_URL``). For each worker count it enqueues
``--tasks`` no-op tasks in a lane of its own, starts the worker processes (``--threads`` each), and reports:

- throughput: tasks / (last completion − first start), from the task rows (process start-up excluded);
- claim latency p50/p95: while the workers drain, this process times ``claim`` + commit (asking for
  work until the task is claimed and ready to start) ``--probes`` times;
- with ``--explain``: ``EXPLAIN (ANALYZE, BUFFERS)`` of one claim over a full backlog;
- with ``--batch-tail N``: the end of an N-task batch, where each ending task asks whether the batch
  still has an active member (``batches.has_active_member``), with the planner's statistics taken
  while 30 % of the tasks were queued: ms per check while the newest 200 end one by one, beside the
  join of members and tasks alone (the check before it, now its fallback). ``--workers 0`` skips the
  throughput runs.

    python bench/task_queue.py [--tasks 2000] [--threads 2] [--workers 1,2,4] [--explain] [--batch-tail 300000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2, help="worker threads per process")
    ap.add_argument("--workers", default="1,2,4", help="worker process counts to measure")
    ap.add_argument("--probes", type=int, default=200)
    ap.add_argument("--explain", action="store_true")
    ap.add_argument("--batch-tail", type=int, metavar="N", help="time the batch-end check of an N-task batch")
    args = ap.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="mewdex-bench-queue-"))
    os.environ.setdefault("MEWDEX_DATA_DIR", str(data_dir))
    os.environ.setdefault("MEWDEX_LOG_LEVEL", "WARNING")
    os.environ.setdefault("MEWDEX_WORKER_POLL_SECONDS", "0.05")
    from mewdex.db.embedded import stop
    from mewdex.db.engine import get_engine, get_sessionmaker
    from mewdex.db.migrate import upgrade
    from mewdex.db.models import ScopeContext
    from mewdex.library.scopes import ensure_scope

    try:
        upgrade(get_engine())
        if not os.environ.get("MEWDEX_DATABASE_URL"):
            # Restarted, so that the server runs with its sizing (shared_buffers = memory / 8), as one
            # that has started before does: the first start of a fresh data dir runs with 128 MB.
            from mewdex.db.embedded import ensure_running
            from mewdex.db.engine import reset_engine

            reset_engine()
            stop(data_dir.resolve() / "pgdata")
            ensure_running(data_dir.resolve() / "pgdata")
        sessions = get_sessionmaker()
        if args.explain:
            explain(sessions, args.tasks)
        if args.batch_tail:
            batch_tail(sessions, args.batch_tail)
        counts = [int(x) for x in args.workers.split(",") if int(x) > 0]
        if counts:
            header = f"{'workers':>7} {'threads':>7} {'tasks':>6} {'tasks/s':>8}"
            print(f"{header} {'claim p50 ms':>12} {'claim p95 ms':>12}")
        for count in counts:
            scope = ScopeContext(f"bench-{uuid.uuid4().hex[:8]}")
            with sessions.begin() as session:
                ensure_scope(session, scope)
            rate, p50, p95 = run(sessions, scope, count, args)
            print(f"{count:>7} {args.threads:>7} {args.tasks:>6} {rate:>8.0f} {p50:>12.1f} {p95:>12.1f}", flush=True)
    finally:
        from mewdex.db.engine import reset_engine

        reset_engine()
        if not os.environ.get("MEWDEX_DATABASE_URL"):
            stop(data_dir.resolve() / "pgdata")
        shutil.rmtree(data_dir, ignore_errors=True)


def enqueue(sessions, scope, lane: str, n: int) -> None:
    from sqlalchemy import text

    from mewdex.queue import tasks as queue

    with sessions.begin() as session:
        queue.ensure_lane(session, lane, scope_id=scope.scope_id)
        session.execute(
            text(
                "INSERT INTO tasks (id, scope_id, task_type, lane, payload, status, max_attempts, available_at, "
                "created_at, updated_at, claim_generation, attempt_count, error_history) "
                "SELECT 'noop-' || md5(random()::text || g), :s, 'noop', :lane, '{}', 'queued', 3, "
                "now(), now(), now(), "
                "0, 0, '[]' FROM generate_series(1, :n) g"
            ),
            {"s": scope.scope_id, "lane": lane, "n": n},
        )
        session.execute(text("ANALYZE tasks"))


def run(sessions, scope, count: int, args) -> tuple[float, float, float]:
    from sqlalchemy import text

    from mewdex.queue import tasks as queue

    lane = f"bench-{uuid.uuid4().hex[:6]}"
    enqueue(sessions, scope, lane, args.tasks)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    mewdex = Path(sys.executable).parent / "mewdex"
    procs = [
        subprocess.Popen(
            [str(mewdex), "worker", "--concurrency", str(args.threads), "--lanes", lane],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    latencies = []
    try:

        def left() -> int:
            with sessions.begin() as session:
                return session.execute(
                    text("SELECT count(*) FROM tasks WHERE scope_id = :s AND status <> 'succeeded'"),
                    {"s": scope.scope_id},
                ).scalar_one()

        while left() == args.tasks:  # wait for the workers to start
            time.sleep(0.05)
        # Probe claims while the workers drain (each probe claims one task and completes it at once).
        while len(latencies) < args.probes and left() > args.tasks // 10:
            t0 = time.perf_counter()
            with sessions.begin() as session:
                c = queue.claim(session, owner=f"bench:{os.getpid()}:probe", lanes=[lane], lease_seconds=60)
            latencies.append((time.perf_counter() - t0) * 1000)
            if c is None:
                break
            with sessions.begin() as session:
                queue.complete(session, c)
            time.sleep(0.01)
        while left():
            time.sleep(0.1)
        with sessions.begin() as session:
            first, last = session.execute(
                text("SELECT min(started_at), max(completed_at) FROM tasks WHERE scope_id = :s"), {"s": scope.scope_id}
            ).one()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
    rate = args.tasks / max(1e-6, (last - first).total_seconds())
    latencies.sort()
    p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))] if latencies else float("nan")
    return rate, statistics.median(latencies) if latencies else float("nan"), p95


def batch_tail(sessions, n: int, tail: int = 200) -> None:
    """The batch-end check over the tail of an n-task batch (see the module doc): the last ``tail``
    tasks end one by one, oldest first, each in its own transaction, and after each end both checks
    run as a write-back would run them; prints p50 / p95 / max ms per check."""
    from sqlalchemy import text

    from mewdex.db.models import ScopeContext
    from mewdex.library.scopes import ensure_scope
    from mewdex.queue import batches

    scope = ScopeContext(f"bench-{uuid.uuid4().hex[:8]}")
    with sessions.begin() as session:
        ensure_scope(session, scope)
        batch_id = batches.create(session, scope.scope_id).batch_id
    enqueue(sessions, scope, f"bench-{uuid.uuid4().hex[:6]}", n)
    params = {"s": scope.scope_id, "b": batch_id}
    with sessions.begin() as session:
        for table in ("tasks", "task_batch_items"):  # no autovacuum ANALYZE in the middle of the tail
            session.execute(text(f"ALTER TABLE {table} SET (autovacuum_enabled = false)"))
        session.execute(
            text(
                "INSERT INTO task_batch_items (scope_id, batch_id, task_id) "
                "SELECT scope_id, CAST(:b AS varchar), id FROM tasks WHERE scope_id = :s"
            ),
            params,
        )
        left = list(  # the tail: the last rows inserted (a pipeline's last stages are queued last)
            session.execute(
                text("SELECT id FROM tasks WHERE scope_id = :s ORDER BY ctid DESC LIMIT :k"), {**params, "k": tail}
            ).scalars()
        )[::-1]
        session.execute(  # the middle of the batch, when autovacuum last analysed the tables
            text("UPDATE tasks SET status = 'succeeded' WHERE scope_id = :s AND random() >= 0.3 AND id <> ALL(:left)"),
            {**params, "left": left},
        )
        session.execute(text("ANALYZE tasks"))
        session.execute(text("ANALYZE task_batch_items"))
        session.execute(
            text(
                "UPDATE tasks SET status = 'succeeded' WHERE scope_id = :s AND status = 'queued' AND id <> ALL(:left)"
            ),
            {**params, "left": left},
        )
    checks = {
        "has_active_member": lambda session: batches.has_active_member(session, scope.scope_id, batch_id),
        "members ⋈ tasks alone": lambda session: batches._members_active(session, scope.scope_id, batch_id),
    }
    times: dict[str, list[float]] = {name: [] for name in checks}
    for k, task_id in enumerate(left):
        with sessions.begin() as session:
            session.execute(
                text("UPDATE tasks SET status = 'succeeded' WHERE scope_id = :s AND id = :t"), {**params, "t": task_id}
            )
        for name, check in checks.items():
            with sessions.begin() as session:
                t0 = time.perf_counter()
                active = check(session)
                times[name].append((time.perf_counter() - t0) * 1000)
            assert active == (k < len(left) - 1), name
    print(f"batch tail: {n} tasks, the last {len(left)} ending one by one, statistics from 30 % queued; ms per check")
    for name, ms in times.items():
        ms.sort()
        print(
            f"  {name:<24} p50 {statistics.median(ms):7.2f}  p95 {ms[int(0.95 * (len(ms) - 1))]:7.2f}  "
            f"max {ms[-1]:7.2f}"
        )


def explain(sessions, n: int) -> None:
    import json

    from sqlalchemy import text

    from mewdex.db.models import ScopeContext
    from mewdex.library.scopes import ensure_scope
    from mewdex.queue import tasks as queue

    scope = ScopeContext(f"bench-explain-{uuid.uuid4().hex[:6]}")
    with sessions.begin() as session:
        ensure_scope(session, scope)
    lane = "bench-explain"
    enqueue(sessions, scope, lane, n)
    caps, rcaps = queue.lane_caps([lane])
    sql = "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + queue._CLAIM_SQL.text
    with sessions() as session:
        plan = (
            session.execute(
                text(sql), {"lanes": [lane], "caps": caps, "rcaps": json.dumps(rcaps), "owner": "explain", "lease": 60}
            )
            .scalars()
            .all()
        )
        session.rollback()
    print("\n".join(plan))
    print()


if __name__ == "__main__":
    main()
