"""Ingest benchmark: the whole corpus into a fresh data dir; images/s per stage and end to end, peak RSS.

Run: .venv/bin/python bench/ingest.py [--workers 2] [--data-dir DIR]
(workers are child processes, as in ``mewdex import --wait``; MEWDEX_WORKER_MODE=thread compares threads)
"""

from __future__ import annotations

import argparse
import json

from sqlalchemy import text

import corpus


def stage_rates() -> dict[str, dict]:
    """Per stage: tasks, summed busy seconds (claim → completion of the succeeding attempt), images/s per worker."""
    from mewdex.db.engine import get_sessionmaker

    sql = text(
        """
        SELECT image_stage, count(*), sum(extract(epoch FROM t.completed_at - a.created_at))
        FROM tasks t JOIN image_processing_attempts a
          ON a.scope_id = t.scope_id AND a.task_id = t.id AND a.attempt = t.attempt_count
        WHERE t.status = 'succeeded' AND t.image_stage IS NOT NULL GROUP BY image_stage
        """
    )
    with get_sessionmaker().begin() as session:
        return {
            stage: {"tasks": n, "busy_seconds": round(float(s), 1), "images_per_s_per_worker": round(n / float(s), 2)}
            for stage, n, s in session.execute(sql)
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--data-dir")
    args = parser.parse_args()
    data_dir = corpus.use_data_dir(args.data_dir)
    print(f"data dir: {data_dir}")
    result = corpus.prepare(workers=args.workers)
    memes = result["status"]["memes"]
    from mewdex.config import get_settings

    mode = get_settings().worker_mode
    print(json.dumps(result["status"]))
    print(
        f"import:      {result['files'] / result['import_seconds']:.1f} files/s ({result['import_seconds']:.1f}s, "
        "workers running meanwhile)"
    )
    for stage, figures in stage_rates().items():
        print(f"{stage:14s} {figures}")
    print(
        f"end to end:  {memes / result['total_seconds']:.2f} images/s "
        f"({memes} memes in {result['total_seconds']:.1f}s, {args.workers} workers, MEWDEX_WORKER_MODE={mode})"
    )
    print(
        f"peak RSS:    {result['peak_rss_mb']:.0f} MB importing process, {result['worker_peak_rss_mb']:.0f} MB "
        "largest worker process (PostgreSQL runs apart)"
    )


if __name__ == "__main__":
    main()
