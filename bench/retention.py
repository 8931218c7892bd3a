"""Retention benchmark: the tasks table of a library of ``--memes`` memes stays bounded.

On a temporary embedded PostgreSQL (or ``MEWDEX_DATABASE_URL``) it writes, with SQL, the task history
of ``--memes`` memes processed evenly over the last ``--days`` days: three succeeded tasks per meme,
each with its attempt row, plus one failed task per 100 memes (kept). Then it reports:

- before: rows and on-disk size of ``tasks`` + ``task_attempts``, and the time of the
  statements that read across the table (``/health``'s stalled-lane check, a ``/metrics`` scrape);
- the catch-up run of ``runtime.retention`` (``MEWDEX_RETENTION_TASK_DAYS``, default 14): rows
  deleted, batches, rows/s, and the longest batch (one transaction: how long it holds its rows);
- a steady day: one more day of work (memes / days × 3 tasks) and the next run;
- after: rows (what the retention window holds: memes × 3 × retention / days), size after a plain
  VACUUM (the space is reused, not returned), and the same statements again.

    python bench/retention.py [--memes 100000] [--days 60] [--batch 1000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
SCOPE = "bench-retention"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memes", type=int, default=100_000)
    ap.add_argument("--days", type=float, default=60.0, help="how many days the history spans")
    ap.add_argument("--batch", type=int, default=1000, help="MEWDEX_RETENTION_BATCH_ROWS")
    args = ap.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="mewdex-bench-retention-"))
    os.environ.setdefault("MEWDEX_DATA_DIR", str(data_dir))
    os.environ.setdefault("MEWDEX_LOG_LEVEL", "WARNING")
    os.environ["MEWDEX_RETENTION_BATCH_ROWS"] = str(args.batch)
    from sqlalchemy import text

    from mewdex.config import get_settings
    from mewdex.db.embedded import stop
    from mewdex.db.engine import get_engine, get_sessionmaker
    from mewdex.db.migrate import upgrade
    from mewdex.db.models import ScopeContext
    from mewdex.library.scopes import ensure_scope

    try:
        upgrade(get_engine())
        sessions = get_sessionmaker()
        with sessions.begin() as session:
            ensure_scope(session, ScopeContext(SCOPE))
        keep_days = get_settings().retention_task_days
        print(f"library: {args.memes} memes over {args.days:g} days; retention {keep_days:g} days, batch {args.batch}")
        started = time.perf_counter()
        write_history(sessions, args.memes, args.days, offset_days=0.0)
        print(f"generated in {time.perf_counter() - started:.1f} s")
        analyze(sessions)
        before = table_figures(sessions)
        print(f"before:  {before['tasks']:>8} tasks, {before['attempts']:>8} attempts, {before['mb']:.0f} MB")
        scans_before = statements(sessions)
        print_statements("before", scans_before)

        catch_up = timed_run(sessions)
        report("catch-up run", catch_up)
        # One more day of work, the next day's run.
        write_history(sessions, int(args.memes / args.days), 1.0, offset_days=keep_days + 0.01)
        steady = timed_run(sessions)
        report("a day later", steady)

        with get_engine().connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text("VACUUM (ANALYZE) tasks, task_attempts"))
        after = table_figures(sessions)
        expected = round(args.memes * 3 * keep_days / args.days)
        print(
            f"after:   {after['tasks']:>8} tasks, {after['attempts']:>8} attempts, {after['mb']:.0f} MB "
            f"(window holds ≈ {expected} succeeded + {before['failed']} failed)"
        )
        print_statements("after", statements(sessions), scans_before)
    finally:
        from mewdex.db.engine import reset_engine

        reset_engine()
        if not os.environ.get("MEWDEX_DATABASE_URL"):
            stop(data_dir.resolve() / "pgdata")
        shutil.rmtree(data_dir, ignore_errors=True)


def write_history(sessions, memes: int, days: float, *, offset_days: float) -> None:
    """Three succeeded tasks (and attempts) per meme, ended evenly over ``days`` days ending
    ``offset_days`` ago; one failed per 100."""
    from sqlalchemy import text

    step = 20_000
    with sessions.begin() as session:
        for first in range(0, memes, step):
            last = min(memes, first + step)
            session.execute(
                text(
                    "INSERT INTO tasks (id, scope_id, task_type, lane, payload, status, available_at, started_at, "
                    "completed_at, attempt_count, max_attempts, claim_generation, created_at, updated_at) "
                    "SELECT 'b-' || md5(random()::text || m || k), :s, t.task_type, t.lane, '{}', "
                    "CASE WHEN k = 0 AND m % 100 = 0 THEN 'failed' ELSE 'succeeded' END, d, d, d + interval '2 s', "
                    "1, 3, 1, d, d "
                    "FROM generate_series(:first, :last - 1) AS m, generate_series(0, 2) AS k, "
                    "LATERAL (SELECT (ARRAY['visual_embedding_generation','meme_context_generation',"
                    "'text_embedding_generation'])[k + 1] AS task_type, (ARRAY['visual','agent','embedding'])[k + 1] "
                    "AS lane) t, "
                    "LATERAL (SELECT now() - make_interval(secs => (:offset + :days * (1 - m::float8 / :memes)) "
                    "* 86400)) AS w(d)"
                ),
                {"s": SCOPE, "first": first, "last": last, "memes": memes, "days": days, "offset": offset_days},
            )
        session.execute(
            text(
                "INSERT INTO task_attempts (scope_id, task_id, attempt, attempt_id, state, "
                "claim_generation, created_at, updated_at) "
                "SELECT scope_id, id, 1, id || '-1', 'completed', 1, "
                "created_at, created_at FROM tasks t WHERE scope_id = :s AND NOT EXISTS "
                "(SELECT 1 FROM task_attempts a WHERE a.scope_id = t.scope_id AND a.task_id = t.id)"
            ),
            {"s": SCOPE},
        )


def analyze(sessions) -> None:
    from sqlalchemy import text

    with sessions.begin() as session:
        session.execute(text("ANALYZE tasks; ANALYZE task_attempts"))


def table_figures(sessions) -> dict:
    from sqlalchemy import text

    with sessions.begin() as session:
        row = session.execute(
            text(
                "SELECT (SELECT count(*) FROM tasks), (SELECT count(*) FROM task_attempts), "
                "(SELECT count(*) FROM tasks WHERE status = 'failed'), "
                "pg_total_relation_size('tasks') + pg_total_relation_size('task_attempts')"
            )
        ).one()
    return {"tasks": row[0], "attempts": row[1], "failed": row[2], "mb": row[3] / 1e6}


def statements(sessions, rounds: int = 5) -> dict[str, float]:
    """Median ms of the statements that read across the tasks table."""
    from mewdex.queue.service import queue_depth, stalled_lanes
    from mewdex.web import metrics

    figures: dict[str, list[float]] = {"stalled-lane check": [], "queue depth": [], "metrics scrape (db)": []}

    class App:
        class state:  # noqa: N801 - an app's state, as the collector reads it
            pass

    collector = metrics.DatabaseCollector(App)
    for _ in range(rounds):
        for name, call in (
            ("stalled-lane check", lambda s: stalled_lanes(s, 300)),
            ("queue depth", queue_depth),
        ):
            with sessions.begin() as session:
                t = time.perf_counter()
                call(session)
                figures[name].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        list(collector._database())
        figures["metrics scrape (db)"].append((time.perf_counter() - t) * 1000)
    return {name: statistics.median(v) for name, v in figures.items()}


def print_statements(label: str, figures: dict[str, float], before: dict[str, float] | None = None) -> None:
    for name, ms in figures.items():
        ratio = f"  ({before[name] / ms:.1f}× faster than before)" if before and ms > 0 else ""
        print(f"  {label:<7} {name:<22} {ms:8.2f} ms{ratio}")


def timed_run(sessions) -> dict:
    """The retention rules in batches, as ``retention.run`` does, timing each batch."""
    from mewdex.config import get_settings
    from mewdex.runtime import retention

    limit = get_settings().retention_batch_rows
    batch_ms: list[float] = []
    deleted = 0
    started = time.perf_counter()
    for rule in retention.RULES.values():
        while True:
            t = time.perf_counter()
            with sessions.begin() as session:
                n = rule(session, limit)
            batch_ms.append((time.perf_counter() - t) * 1000)
            deleted += n
            if n < limit:
                break
    seconds = time.perf_counter() - started
    return {"deleted": deleted, "batches": len(batch_ms), "seconds": seconds, "batch_ms": batch_ms}


def report(label: str, run: dict) -> None:
    ms = sorted(run["batch_ms"])
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    rate = run["deleted"] / run["seconds"] if run["seconds"] else 0
    print(
        f"{label}: {run['deleted']} tasks deleted in {run['seconds']:.1f} s ({rate:.0f} rows/s), "
        f"{run['batches']} batches; batch p50 {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms, max {ms[-1]:.1f} ms"
    )


if __name__ == "__main__":
    main()
