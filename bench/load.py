"""Load benchmark: a mixed load and a burst of concurrent searches against a real ``mewdex serve``.

Uses a data dir holding a processed library (``--data-dir``; without it the first ``--memes``
corpus images, spread over the sources, are imported and processed first), starts the server on a
free port with ``--workers`` worker processes and ``--processes`` web processes (default 1; each is
warmed up with searches of its own; its resident memory and CPU time are printed at the end), then runs:

1. the mixed load for ``--seconds`` (default 120): 16 searchers, 2 uploaders (fresh generated
   images, so each upload creates a meme and queues its processing), 1 renamer/deleter (renames
   then deletes what the uploaders created), 1 lister (pages through ``GET /api/v1/memes``);
2. a burst of ``--burst`` (default 64) searches sent at once, with ``/health`` probed meanwhile;
3. clean-up: the memes the uploaders created and the deleter did not get to are deleted, so a rerun
   with ``--data-dir`` searches the same library.

Prints, per phase, req/s and p50/p95/p99 (ms) per route, and every non-2xx answer (status, error
code, count). Every client is a coroutine on one ``httpx.AsyncClient``; a request that times out
(``--timeout``, default 60 s) counts as status 0.

Run: .venv/bin/python bench/load.py [--data-dir DIR] [--memes 460] [--seconds 120] [--burst 64]
The machine should be quiet while it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx

import corpus
from search_latency import serve


@dataclass
class Recorder:
    """Latencies (ms) per route and non-2xx answers ``(route, status, code) → count`` of one phase."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    leftovers: list[str] = field(default_factory=list)  # memes the mixed load created and left
    failures: Counter = field(default_factory=Counter)
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None

    async def call(self, client: httpx.AsyncClient, route: str, method: str, url: str, **kw) -> httpx.Response | None:
        began = time.perf_counter()
        try:
            response = await client.request(method, url, **kw)
        except httpx.HTTPError as exc:
            self.latencies[route].append((time.perf_counter() - began) * 1000)
            self.failures[(route, 0, type(exc).__name__)] += 1
            return None
        self.latencies[route].append((time.perf_counter() - began) * 1000)
        if not 200 <= response.status_code < 300:
            self.failures[(route, response.status_code, error_code(response))] += 1
        return response

    def report(self, title: str) -> None:
        elapsed = (self.ended or time.perf_counter()) - self.started
        total = sum(len(v) for v in self.latencies.values())
        print(f"\n== {title}: {total} requests in {elapsed:.1f} s = {total / elapsed:.1f} req/s")
        print(f"{'route':<16}{'n':>7}{'req/s':>8}{'p50':>9}{'p95':>9}{'p99':>9}{'max':>9}")
        for route, values in sorted(self.latencies.items()):
            values = sorted(values)
            print(
                f"{route:<16}{len(values):>7}{len(values) / elapsed:>8.1f}{pct(values, 50):>9.0f}"
                f"{pct(values, 95):>9.0f}{pct(values, 99):>9.0f}{values[-1]:>9.0f}"
            )
        if not self.failures:
            print("non-2xx: none")
        for (route, status, code), count in sorted(self.failures.items()):
            print(f"non-2xx: {route} {status} {code} × {count}")


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of sorted ``values``."""
    return values[min(len(values) - 1, max(0, round(p / 100 * len(values) + 0.5) - 1))] if values else float("nan")


def error_code(response: httpx.Response) -> str:
    """The JSON error code of an answer, or its content type when it is not a mewdex error body."""
    try:
        return response.json()["error"]["code"]
    except Exception:
        return f"<{response.headers.get('content-type', 'no body')}>"


#: Salts this run's images: a rerun on the same ``--data-dir`` must upload new images too (the last
#: run's are in its trash, and the same bytes again would only bring them back, with no processing).
RUN_SALT = os.urandom(8).hex()


def fresh_png(rng: random.Random) -> bytes:
    """A small PNG no library holds yet (random pixels; ``rng`` seeded with :data:`RUN_SALT`)."""
    from PIL import Image

    image = Image.frombytes("RGB", (64, 64), rng.randbytes(64 * 64 * 3))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def queries() -> list[str]:
    return [q["query"] for q in corpus.dev_queries()]


def prepare_subset(count: int, workers: int) -> None:
    """Import the first ``count`` corpus images (round-robin over the sources) and process them."""
    per_source = [sorted(p for p in (root / "images").rglob("*") if p.is_file()) for root in corpus.corpus_roots()]
    chosen: list[Path] = []
    while len(chosen) < count and any(per_source):
        for files in per_source:
            if files and len(chosen) < count:
                chosen.append(files.pop(0))
    result = corpus.prepare(workers=workers, paths=chosen, log=lambda line: print(line, flush=True))
    print(f"library ready in {result['total_seconds']:.0f} s", flush=True)


async def mixed_load(client: httpx.AsyncClient, seconds: float, searchers: int, uploaders: int) -> Recorder:
    rec = Recorder()
    deadline = time.perf_counter() + seconds
    texts = queries()
    uploaded: asyncio.Queue[str] = asyncio.Queue()
    created: set[str] = set()  # every meme the uploaders created, until the renamer/deleter deletes it

    async def searcher(seed: int) -> None:
        rng = random.Random(seed)
        while time.perf_counter() < deadline:
            await rec.call(
                client, "search", "POST", "/api/v1/search", json={"query": rng.choice(texts), "n_results": 10}
            )

    async def uploader(seed: int) -> None:
        rng = random.Random(f"{RUN_SALT}-{seed}")
        while time.perf_counter() < deadline:
            files = [("files", (f"load-{seed}-{i}.png", fresh_png(rng), "image/png")) for i in range(2)]
            response = await rec.call(client, "upload", "POST", "/api/v1/memes", files=files)
            if response is not None and response.status_code == 201:
                for result in response.json()["results"]:
                    if result["status"] == "created":
                        uploaded.put_nowait(result["meme"]["id"])
                        created.add(result["meme"]["id"])

    async def renamer_deleter() -> None:
        while time.perf_counter() < deadline:
            try:
                meme_id = await asyncio.wait_for(uploaded.get(), timeout=max(0.1, deadline - time.perf_counter()))
            except TimeoutError:
                return
            await rec.call(
                client, "rename", "PATCH", f"/api/v1/memes/{meme_id}", json={"display_name": f"renamed {meme_id[:8]}"}
            )
            await rec.call(client, "delete", "DELETE", f"/api/v1/memes/{meme_id}")
            created.discard(meme_id)

    async def lister() -> None:
        cursor = None
        while time.perf_counter() < deadline:
            params = {"limit": 50} | ({"cursor": cursor} if cursor else {})
            response = await rec.call(client, "list", "GET", "/api/v1/memes", params=params)
            cursor = response.json().get("next_cursor") if response is not None and response.is_success else None

    await asyncio.gather(
        *(searcher(i) for i in range(searchers)), *(uploader(i) for i in range(uploaders)), renamer_deleter(), lister()
    )
    rec.ended = time.perf_counter()
    rec.leftovers = sorted(created)
    return rec


async def clean_up(client: httpx.AsyncClient, meme_ids: list[str]) -> None:
    """Delete what the uploaders created and the deleter did not get to, so that a rerun on the same
    ``--data-dir`` searches the same library (it outpaces the deleter: ~1,300 more memes a run)."""
    semaphore = asyncio.Semaphore(4)

    async def delete(meme_id: str) -> None:
        async with semaphore:
            await client.delete(f"/api/v1/memes/{meme_id}")

    await asyncio.gather(*(delete(m) for m in meme_ids))
    print(f"\ncleaned up: {len(meme_ids)} uploaded memes deleted")


async def burst(client: httpx.AsyncClient, size: int) -> Recorder:
    """``size`` searches at once; ``/health`` is probed every 0.5 s until they are all answered."""
    rec = Recorder()
    texts = queries()
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            await rec.call(client, "health", "GET", "/health")
            await asyncio.sleep(0.5)

    prober = asyncio.create_task(probe())
    await asyncio.gather(
        *(
            rec.call(client, "search", "POST", "/api/v1/search", json={"query": texts[i % len(texts)], "n_results": 10})
            for i in range(size)
        )
    )
    rec.ended = time.perf_counter()
    done.set()
    await prober
    return rec


async def each_web_process(
    url: str, processes: int, path: str, method: str = "GET", **request
) -> dict[int, httpx.Response]:
    """``method`` ``path`` (``request``: httpx's arguments) on new connections until each of the server's
    ``processes`` web processes answered it once (the admin ``/health`` on a connection says which one
    holds it: ``web.pid``); the answers by pid."""
    answers: dict[int, httpx.Response] = {}
    for _ in range(50 * processes):
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=1)) as one:
            pid = (await one.get("/health")).json()["web"]["pid"]
            if pid not in answers:
                answers[pid] = await one.request(method, path, **request)
        if len(answers) == processes:
            break
    return answers


def process_series(metrics: str, name: str) -> float:
    """The value of ``process_*`` series ``name`` in a ``/metrics`` answer (the answering process's)."""
    return float(next(line for line in metrics.splitlines() if line.startswith(name + " ")).split()[1])


async def run(url: str, args: argparse.Namespace) -> None:
    limits = httpx.Limits(max_connections=args.burst + 32, max_keepalive_connections=args.burst + 32)
    async with httpx.AsyncClient(base_url=url, timeout=args.timeout, limits=limits) as client:
        for text in queries()[:3]:  # warm-up: the models load on first use (each web process loads its own)
            search = {"query": text, "n_results": 10}
            for answer in (await each_web_process(url, args.processes, "/api/v1/search", "POST", json=search)).values():
                answer.raise_for_status()
        mixed = await mixed_load(client, args.seconds, args.searchers, args.uploaders)
        roles = f"{args.searchers} searchers, {args.uploaders} uploaders, 1 renamer/deleter, 1 lister"
        mixed.report(f"mixed load ({roles})")
        (await burst(client, args.burst)).report(f"burst of {args.burst} concurrent searches")
        await clean_up(client, mixed.leftovers)
    scrapes = await each_web_process(url, args.processes, "/metrics")
    for pid, r in sorted(scrapes.items()):
        resident, cpu = (process_series(r.text, f"process_{n}") for n in ("resident_memory_bytes", "cpu_seconds_total"))
        print(f"web process {pid}: resident memory {resident / 1e6:.0f} MB, CPU {cpu:.0f} s since it started")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", help="a data dir with a processed library (default: import --memes first)")
    parser.add_argument("--memes", type=int, default=460, help="corpus images to import without --data-dir")
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--searchers", type=int, default=16)
    parser.add_argument("--uploaders", type=int, default=2)
    parser.add_argument("--burst", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the server")
    parser.add_argument("--processes", type=int, default=1, help="web processes of the server (MEWDEX_WEB_PROCESSES)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds before a request counts as failed")
    args = parser.parse_args()
    data_dir = corpus.use_data_dir(args.data_dir)
    if args.data_dir is None:
        prepare_subset(args.memes, args.workers)
    print(f"data dir: {data_dir}", flush=True)
    try:
        with serve(data_dir, workers=args.workers, processes=args.processes) as url:
            asyncio.run(run(url, args))
    finally:
        from mewdex.db.embedded import stop

        stop(data_dir.resolve() / "pgdata")  # the data dir stays: reuse it with --data-dir


if __name__ == "__main__":
    main()
