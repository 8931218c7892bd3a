"""Library benchmarks, one section each (the sections share one fresh data dir):

* ``export_import`` — a ``--memes`` (200) meme collection exported as a ZIP package (streamed to a
  file) and imported into a fresh scope, best of ``--rounds``: MB/s and files/s.
* ``upload`` — ``POST /api/v1/memes`` throughput in files/s and MB/s for 20-file requests of corpus
  images, through the real app (in-process ASGI client, real database and blob store). Only the
  upload itself is timed: no worker threads run, so processing is left queued.

More sections register themselves in ``SECTIONS`` (a function taking the parsed args, printing its
figures and returning them as a dict).

Run: .venv/bin/python bench/library.py [--files 400] [--only upload] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import corpus

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp"}
BATCH = 20


def corpus_images(limit: int) -> list[Path]:
    """The first ``limit`` corpus image files (sorted by path, so runs are comparable)."""
    paths = sorted(
        p
        for root in corpus.corpus_roots()
        for p in (root / "images").rglob("*")
        if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
    )
    return paths[:limit]


def app_client():
    """A TestClient of the real app (no worker threads) in the default scope of the data dir."""
    from fastapi.testclient import TestClient

    from mewdex.web.app import create_app

    return TestClient(create_app(workers=0))


def bench_upload(args) -> dict:
    """Upload ``args.files`` corpus images in requests of 20; files/s and MB/s of the whole run."""
    paths = corpus_images(args.files)
    batches = [paths[i : i + BATCH] for i in range(0, len(paths), BATCH)]
    counts: dict[str, int] = {}
    total_bytes = 0
    latencies = []
    with app_client() as client:
        started = time.perf_counter()
        for batch in batches:
            files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in batch]
            total_bytes += sum(len(f[1][1]) for f in files)
            t0 = time.perf_counter()
            r = client.post("/api/v1/memes", files=files)
            latencies.append(time.perf_counter() - t0)
            if r.status_code not in (200, 201, 413, 415, 422):
                raise SystemExit(f"upload failed: {r.status_code} {r.text[:500]}")
            for result in r.json()["results"]:
                counts[result["status"]] = counts.get(result["status"], 0) + 1
        seconds = time.perf_counter() - started
    latencies.sort()
    figures = {
        "files": len(paths),
        "requests": len(batches),
        "results": counts,
        "seconds": round(seconds, 2),
        "files_per_s": round(len(paths) / seconds, 1),
        "mb_per_s": round(total_bytes / 1e6 / seconds, 2),
        "request_p50_ms": round(1000 * latencies[len(latencies) // 2], 1),
        "request_max_ms": round(1000 * latencies[-1], 1),
    }
    print(
        f"upload:      {figures['files_per_s']} files/s, {figures['mb_per_s']} MB/s "
        f"({len(paths)} files in {len(batches)} requests of {BATCH}, {seconds:.1f}s; "
        f"request p50 {figures['request_p50_ms']} ms; {counts})"
    )
    return figures


def bench_export_import(args) -> dict:
    """Export a collection of ``args.memes`` corpus images (stored without processing) with the streaming
    writer, then import it into a fresh scope (preflight + import, no processing); best of ``args.rounds``.
    MB/s of archive bytes and files/s."""
    n_memes, rounds, log = args.memes, args.rounds, print
    from mewdex.db.engine import get_engine, get_sessionmaker
    from mewdex.db.migrate import upgrade
    from mewdex.db.models import ScopeContext
    from mewdex.library import collections, packages
    from mewdex.library.memes import add_image
    from mewdex.library.scopes import ensure_scope
    from mewdex.storage import blob_store

    upgrade(get_engine())
    sessions, store = get_sessionmaker(), blob_store()
    source = ScopeContext(f"bench-export-{uuid.uuid4().hex[:8]}")
    with sessions.begin() as session:
        ensure_scope(session, source)
    ids = []
    for path in corpus_images(4 * n_memes):
        result = add_image(
            sessions,
            store,
            source,
            path.read_bytes(),
            filename=path.name,
            provenance={"source": "bench"},
            process=False,
        )
        if result.status == "created":
            ids.append(uuid.UUID(result.meme_id))
        if len(ids) == n_memes:
            break
    with sessions.begin() as session:
        collection = collections.create(session, source, "bench")
        collections.add_items(session, source, collection.id, ids)

    export_s, import_s, size = [], [], 0
    with tempfile.TemporaryDirectory(prefix="mewdex-bench-zip-") as tmp:
        archive = Path(tmp) / "bench.zip"
        for _ in range(rounds):
            started = time.perf_counter()
            with sessions.begin() as session, archive.open("wb") as target:
                packages.export_to_file(session, store, source, collection.id, target)
            export_s.append(time.perf_counter() - started)
            size = archive.stat().st_size

            target_scope = ScopeContext(f"bench-import-{uuid.uuid4().hex[:8]}")
            with sessions.begin() as session:
                ensure_scope(session, target_scope)
            started = time.perf_counter()
            with archive.open("rb") as fileobj:
                result = packages.import_package(
                    sessions, store, target_scope, fileobj, source_name="bench.zip", process=False
                )
            import_s.append(time.perf_counter() - started)
            assert result.count("created") == len(ids), result.as_dict()
    mb = size / 1e6
    figures = {
        "memes": len(ids),
        "archive_mb": round(mb, 2),
        "export_s": round(min(export_s), 3),
        "export_mb_per_s": round(mb / min(export_s), 1),
        "import_s": round(min(import_s), 3),
        "import_mb_per_s": round(mb / min(import_s), 1),
        "import_files_per_s": round(len(ids) / min(import_s), 1),
    }
    log(
        f"export: {figures['memes']} memes, {figures['archive_mb']} MB in {figures['export_s']} s "
        f"→ {figures['export_mb_per_s']} MB/s"
    )
    log(
        f"import (preflight + store, no processing): {figures['import_s']} s "
        f"→ {figures['import_mb_per_s']} MB/s, {figures['import_files_per_s']} files/s"
    )
    return figures


SECTIONS: dict[str, Callable[[argparse.Namespace], dict]] = {
    "upload": bench_upload,
    "export_import": bench_export_import,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=400, help="corpus images to upload (default 400)")
    parser.add_argument("--memes", type=int, default=200, help="collection size for export_import (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="export_import rounds, best is reported (default 3)")
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append", help="run only these sections")
    parser.add_argument("--data-dir", help="data dir (default: a fresh temp dir)")
    args = parser.parse_args()
    data_dir = corpus.use_data_dir(args.data_dir)
    print(f"data dir: {data_dir}")
    from mewdex.runtime import prepare_database

    prepare_database()
    results = {name: section(args) for name, section in SECTIONS.items() if not args.only or name in args.only}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
