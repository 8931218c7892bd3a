"""Search latency benchmark: p50/p95 of ``POST /api/v1/search`` against a real ``mewdex serve``.

Uses a data dir holding the processed corpus (``--data-dir``, e.g. the one bench/quality.py
printed; without it the corpus is imported and processed first), starts the server on a free
port with no worker threads, warms it up, then times every dev query and known captions.

Run: .venv/bin/python bench/search_latency.py [--data-dir DIR] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

import corpus


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit("server exited early")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    sys.exit("server did not become ready")


def bench_queries() -> list[str]:
    """Every dev query, then the first 60 vvquest captions (file stems) as known-item queries."""
    queries = [q["query"] for q in corpus.dev_queries()]
    return queries + [p.stem for p in sorted((corpus.CORPUS / "vvquest" / "images").iterdir())[:60]]


@contextmanager
def serve(data_dir: Path, workers: int = 0, processes: int = 1) -> Iterator[str]:
    """``mewdex serve`` on a free port over ``data_dir`` with ``workers`` workers (default none) and
    ``processes`` web processes (default one); yields its URL once ready."""
    port = free_port()
    env = os.environ | {
        "MEWDEX_DATA_DIR": str(data_dir),
        "MEWDEX_WORKERS": str(workers),
        "MEWDEX_WEB_PROCESSES": str(processes),
    }
    mewdex = Path(sys.executable).parent / "mewdex"
    proc = subprocess.Popen(
        [str(mewdex), "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data_dir = corpus.use_data_dir(args.data_dir)
    if args.data_dir is None:
        corpus.prepare()
    queries = bench_queries()
    timings = []
    with serve(data_dir) as url, httpx.Client(base_url=url, timeout=30) as client:
        for q in queries[:5]:  # warm-up: models load on first use
            client.post("/api/v1/search", json={"query": q, "n_results": 10}).raise_for_status()
        for _ in range(args.rounds):
            for q in queries:
                started = time.perf_counter()
                client.post("/api/v1/search", json={"query": q, "n_results": 10}).raise_for_status()
                timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    p95 = timings[int(0.95 * (len(timings) - 1))]
    print(
        f"{len(timings)} searches over {len(queries)} queries: p50 {statistics.median(timings):.1f} ms, "
        f"p95 {p95:.1f} ms, max {timings[-1]:.1f} ms"
    )


if __name__ == "__main__":
    main()
