"""Upload memory: RSS of a real ``mewdex serve`` through concurrent large uploads (issue 20 point 7).

Starts ``mewdex serve`` (no workers) on a fresh data dir, uploads one small image (the first
upload loads code), waits until its memory settles (the models load at start-up), then sends
``--requests`` (default 3) concurrent uploads of ``--files`` (default 10) distinct ~19.4 MB PNGs
each (~194 MB per request), sampling the server's RSS every 20 ms. Prints the baseline, the peak,
and the RSS 5 s and 20 s after the burst.

Run: .venv/bin/python bench/upload_memory.py [--requests 3] [--files 10]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

from search_latency import free_port, wait_ready

SIDE = 2540  # 2540² RGB pixels stored uncompressed: ~19.4 MB per PNG


def make_pngs(folder: Path, count: int) -> list[Path]:
    from PIL import Image

    rng = random.Random(20)
    tile = Image.frombytes("RGB", (254, 254), rng.randbytes(254 * 254 * 3))
    paths = []
    for i in range(count):
        image = Image.new("RGB", (SIDE, SIDE))
        for x in range(0, SIDE, 254):
            for y in range(0, SIDE, 254):
                image.paste(tile, (x, y))
        image.putpixel((i % SIDE, i // SIDE), (i % 256, 255 - i % 256, 7))  # each file its own bytes
        path = folder / f"big{i:03d}.png"
        image.save(path, format="PNG", compress_level=0)
        paths.append(path)
    return paths


def rss_mb(proc: psutil.Process) -> float:
    return proc.memory_info().rss / 2**20


def settle(proc: psutil.Process, timeout: float = 180) -> float:
    """Wait until RSS changes by < 2 MB over 3 s; returns it."""
    deadline, last = time.time() + timeout, rss_mb(proc)
    while time.time() < deadline:
        time.sleep(3)
        now = rss_mb(proc)
        if abs(now - last) < 2:
            return now
        last = now
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--files", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mewdex-upload-memory-"))
    data_dir, images = work / "data", work / "images"
    images.mkdir()
    paths = make_pngs(images, args.requests * args.files)
    print(f"{len(paths)} files of {paths[0].stat().st_size / 1e6:.1f} MB", flush=True)
    port = free_port()
    env = os.environ | {"MEWDEX_DATA_DIR": str(data_dir), "MEWDEX_WORKERS": "0"}
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "mewdex"), "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, server)
        proc = psutil.Process(server.pid)
        warm_up = paths[-1].with_name("warm-up.png")  # the first upload loads code and caches: not the burst's cost
        from PIL import Image

        Image.new("RGB", (64, 64), (1, 2, 3)).save(warm_up)
        httpx.post(
            url + "/api/v1/memes", files=[("files", (warm_up.name, warm_up.read_bytes(), "image/png"))], timeout=120
        ).raise_for_status()
        baseline = settle(proc)
        peak, sampling = baseline, True

        def sample() -> None:
            nonlocal peak
            while sampling:
                peak = max(peak, rss_mb(proc))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        statuses: list[int] = []

        def upload(batch: list[Path]) -> None:
            handles = [p.open("rb") for p in batch]
            try:
                files = [("files", (p.name, h, "image/png")) for p, h in zip(batch, handles, strict=True)]
                statuses.append(httpx.post(url + "/api/v1/memes", files=files, timeout=600).status_code)
            finally:
                for h in handles:
                    h.close()

        started = time.perf_counter()
        threads = [
            threading.Thread(target=upload, args=(paths[i * args.files : (i + 1) * args.files],))
            for i in range(args.requests)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - started
        time.sleep(5)
        after5 = rss_mb(proc)
        time.sleep(15)
        after20 = rss_mb(proc)
        sampling = False
        sampler.join()
        print(f"{args.requests} concurrent requests × {args.files} files: statuses {statuses}, {took:.1f} s")
        print(
            f"RSS baseline {baseline:.0f} MB, peak {peak:.0f} MB (+{peak - baseline:.0f}), "
            f"5 s after {after5:.0f} MB (+{after5 - baseline:.0f}), "
            f"20 s after {after20:.0f} MB (+{after20 - baseline:.0f})"
        )
    finally:
        server.terminate()
        server.wait(60)
        from mewdex.db.embedded import stop

        stop(data_dir.resolve() / "pgdata")
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
