"""The web app's own cost per app and per request, before any route's work: ``create_app``, the first
request of a process's first app and of a second app, and the CPU per request of three answers that touch
no database (the web app manifest, an unknown API path, an unknown meme's thumbnail: routing, the
middleware stack and the error page), called through the ASGI interface (no sockets, no TestClient).

Run: PYTHONPATH=src .venv/bin/python bench/routing.py [--requests 300] [--json]
(in a fresh temp data dir, no database started; CPU seconds of this process). On 2 cores, quiet: a second
app's first request 0.006 s with one route table per process (web.route_table), 0.97-1.01 s when every app
included the routers itself; the CPU per request is the same either way within this bench's spread
(0.9-1.3 ms for the manifest, run to run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time

PATHS = (
    "/manifest.webmanifest",
    "/api/v1/no-such-route",
    "/api/v1/memes/00000000-0000-0000-0000-000000000000/thumbnail",
)


async def call(app, path: str) -> int:
    """One GET of ``path`` through the app's ASGI interface, as a loopback browser; the status."""
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "scheme": "http",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8275")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8275),
        "state": {},
    }
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(sent[0]["status"])


def cpu(fn):
    start = time.process_time()
    result = fn()
    return result, time.process_time() - start


async def measure(requests: int) -> dict:
    from mewdex.web.app import create_app

    out: dict = {}
    first, out["create_app_s"] = cpu(lambda: create_app(workers=0))
    start = time.process_time()
    await call(first, PATHS[1])  # an unknown path walks every route
    out["first_app_first_request_s"] = time.process_time() - start
    second, out["second_create_app_s"] = cpu(lambda: create_app(workers=0))
    start = time.process_time()
    await call(second, PATHS[1])
    out["second_app_first_request_s"] = time.process_time() - start
    per_request = {}
    for path in PATHS:
        status = await call(second, path)
        start = time.process_time()
        for _ in range(requests):
            await call(second, path)
        per_request[path] = {"status": status, "ms": (time.process_time() - start) / requests * 1000}
    out["per_request"] = per_request
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="mewdex-routing-")
    os.environ["MEWDEX_DATA_DIR"] = data_dir
    os.environ.setdefault("MEWDEX_AUTH", "none")
    try:
        result = asyncio.run(measure(args.requests))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"create_app: {result['create_app_s']:.3f} s (a second app: {result['second_create_app_s']:.3f} s)")
    print(f"first request of the first app: {result['first_app_first_request_s']:.3f} s CPU")
    print(f"first request of a second app:  {result['second_app_first_request_s']:.3f} s CPU")
    for path, row in result["per_request"].items():
        print(f"{row['status']}  {row['ms']:6.2f} ms CPU a request  {path}")


if __name__ == "__main__":
    main()
