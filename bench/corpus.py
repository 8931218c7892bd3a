"""Shared bench set-up: a data dir with the real corpus imported and processed, timed.

Used by quality.py, ingest.py, search_latency.py, load.py and assistant.py. The index sees only image bytes and paths;
``metadata.jsonl`` and the queries are read only to score results.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("MEWDEX_CORPUS", REPO.parent / "shared" / "data" / "memes"))
SOURCES = ("memegen", "vvquest", "chinesebqb")


def use_data_dir(path: str | None, *, throwaway: bool = False) -> Path:
    """Point this process's settings at ``path`` (or a fresh temp dir); returns it. The database
    server this process starts is stopped when it exits: a temp dir's always (the dir stays, to be
    reused with ``--data-dir``; with ``throwaway`` it is removed too, for a bench that needs a fresh
    one every run), ``path``'s when none was running there before (one already running, e.g. a
    ``mewdex serve``'s, is left as it was)."""
    from mewdex.db.embedded import is_running

    data_dir = Path(path) if path else Path(tempfile.mkdtemp(prefix="mewdex-bench-"))
    if not is_running(data_dir / "pgdata"):
        atexit.register(_stop_server, data_dir, throwaway and not path)
    os.environ["MEWDEX_DATA_DIR"] = str(data_dir)
    from mewdex.config import get_settings

    get_settings.cache_clear()
    return data_dir


def _stop_server(data_dir: Path, remove: bool) -> None:
    from mewdex.db.embedded import stop
    from mewdex.db.engine import reset_engine

    reset_engine()  # its connections closed before the server stops
    stop(data_dir / "pgdata")
    if remove:
        shutil.rmtree(data_dir, ignore_errors=True)


def corpus_roots() -> list[Path]:
    if not CORPUS.is_dir():
        sys.exit(f"corpus not found at {CORPUS} (set MEWDEX_CORPUS)")
    return [CORPUS / s for s in SOURCES]


def dev_queries(limit: int | None = None) -> list[dict]:
    """The development queries (``queries_dev.jsonl``: ``qid``, ``query``, ``lang``, ``type``,
    ``relevant`` corpus-relative paths), the first ``limit`` when given."""
    with (CORPUS / "queries_dev.jsonl").open(encoding="utf-8") as f:
        queries = [json.loads(line) for line in f if line.strip()]
    return queries[:limit] if limit is not None else queries


def sample(items: list, limit: int | None) -> list:
    """``limit`` items spread evenly over ``items`` (all of them when ``limit`` is None)."""
    if limit is None or limit >= len(items):
        return items
    return items[:: max(1, len(items) // limit)][:limit]


def prepare(*, workers: int = 2, limit: int | None = None, paths: list[Path] | None = None, log=print) -> dict:
    """Import the corpus (or only ``paths``: files or folders; or ``limit`` files spread over them) into
    the current data dir and process it; returns timings and counts (``paths``: the files imported)."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.importer import collect, import_paths
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline.status import pending, pending_memes, status
    from mewdex.runtime import prepare_database, start_workers
    from mewdex.storage import blob_store

    prepare_database()
    sessions, scope = get_sessionmaker(), default_scope()
    items = sample(collect(paths or [CORPUS]), limit)
    started = time.perf_counter()
    pool = start_workers(workers)  # they process while the import goes on, as with `mewdex import --wait`
    summary = import_paths(sessions, blob_store(), scope, items)
    imported = time.perf_counter()
    log(
        f"imported {len(items)} files in {imported - started:.1f}s: {summary.created} created, "
        f"{summary.duplicates} duplicates, {summary.skipped} skipped {dict(summary.reasons)}"
    )
    # Waits as `mewdex import --wait` does: each poll reads the active tasks only (pending_memes); the
    # whole status (a scan of the scope's jobs) only every 15 s for the log. Polling the status every
    # 0.5 s cost PostgreSQL 10 ms per image of the corpus, charged to the pipeline.
    last = time.perf_counter()
    while True:
        with sessions.begin() as session:
            left = pending_memes(session, scope)
        if left == 0:
            break
        if time.perf_counter() - last > 15:
            last = time.perf_counter()
            with sessions.begin() as session:
                log(f"  processing… {status(session, scope)['stages']}")
        time.sleep(0.5)
    done = time.perf_counter()
    with sessions.begin() as session:
        counts = status(session, scope)
    if pending(counts):  # a stage queued while no meme had an active task: the pipeline lost a hand-off
        log(f"  warning: stages still pending after the last meme finished: {counts['stages']}")
    pool.stop()
    return {
        "files": len(items),
        "paths": [item.path for item in items],
        "created": summary.created,
        "duplicates": summary.duplicates,
        "skipped": summary.skipped,
        "import_seconds": imported - started,
        "process_seconds": done - imported,
        "total_seconds": done - started,
        "status": counts,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        # the largest worker child (MEWDEX_WORKER_MODE=process; 0 with threads)
        "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def path_to_meme_ids() -> dict[str, str]:
    """Corpus-relative path → meme id (through the file's sha256; byte-identical files share a meme)."""
    from sqlalchemy import select

    from mewdex.db.engine import get_sessionmaker
    from mewdex.db.models import Meme
    from mewdex.library.scopes import default_scope

    with get_sessionmaker().begin() as session:
        by_sha = dict(
            session.execute(select(Meme.sha256, Meme.id).where(Meme.scope_id == default_scope().scope_id)).all()
        )
    mapping = {}
    for root in corpus_roots():
        for path in (root / "images").rglob("*"):
            if path.is_file():
                sha = hashlib.sha256(path.read_bytes()).hexdigest()
                if sha in by_sha:
                    mapping[path.relative_to(CORPUS).as_posix()] = str(by_sha[sha])
    return mapping
