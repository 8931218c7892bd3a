"""Library benchmarks, one section each (the sections share one fresh data dir):

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
import time
from collections.abc import Callable
from pathlib import Path

import corpus

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp"}
BATCH = 20


def corpus_images(limit: int) -> list[Path]:
    """The first ``limit`` corpus image files (sorted by path, so runs are comparable)."""
    paths = sorted(p for root in corpus.corpus_roots() for p in (root / "images").rglob("*")
                   if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    return paths[:limit]


def app_client():
    """A TestClient of the real app (no worker threads) in the default scope of the data dir."""
    from fastapi.testclient import TestClient

    from mewdex.web.app import create_app

    return TestClient(create_app(workers=0))


def bench_upload(args) -> dict:
    """Upload ``args.files`` corpus images in requests of 20; files/s and MB/s of the whole run."""
    paths = corpus_images(args.files)
    batches = [paths[i:i + BATCH] for i in range(0, len(paths), BATCH)]
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
    print(f"upload:      {figures['files_per_s']} files/s, {figures['mb_per_s']} MB/s "
          f"({len(paths)} files in {len(batches)} requests of {BATCH}, {seconds:.1f}s; "
          f"request p50 {figures['request_p50_ms']} ms; {counts})")
    return figures


SECTIONS: dict[str, Callable[[argparse.Namespace], dict]] = {"upload": bench_upload}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=400, help="corpus images to upload (default 400)")
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append", help="run only these sections")
    parser.add_argument("--data-dir", help="data dir (default: a fresh temp dir)")
    args = parser.parse_args()
    data_dir = corpus.use_data_dir(args.data_dir)
    print(f"data dir: {data_dir}")
    from mewdex.web.app import prepare_database

    prepare_database()
    results = {name: section(args) for name, section in SECTIONS.items() if not args.only or name in args.only}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
