"""CPU per search in the serving process: ``--searches`` POST /api/v1/search of the development queries
through the real app in this process (a TestClient on loopback, no workers), after one warm-up pass
that fills the query-vector cache (as the load benchmark's repeated queries do).

Prints the wall time and this process's CPU time per search (all its threads: the request, the legs'
threads, the ASGI loop). Compare two versions on the same or an equal data dir, one after the other,
on a quiet machine: the CPU figure is what a burst of searches queues for in one ``mewdex serve``.

Run: .venv/bin/python bench/search_cpu.py --data-dir DIR [--searches 400]
(DIR: a processed library, e.g. the one ``bench/quality.py --data-dir DIR`` leaves)
"""

from __future__ import annotations

import argparse
import json
import os
import time

import corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--searches", type=int, default=400)
    args = parser.parse_args()
    os.environ["MEWDEX_DATA_DIR"] = args.data_dir
    from fastapi.testclient import TestClient

    from mewdex.web.app import create_app

    queries = [json.loads(line)["query"] for line in (corpus.CORPUS / "queries_dev.jsonl").open()]
    with TestClient(create_app(workers=0), base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as client:

        def search(query: str) -> None:
            response = client.post("/api/v1/search", json={"query": query, "n_results": 20})
            assert response.status_code == 200, (response.status_code, response.text[:300])

        for query in queries:  # warm: models loaded, query vectors cached
            search(query)
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(args.searches):
            search(queries[i % len(queries)])
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    n = args.searches
    print(f"{n} searches: wall {wall * 1000 / n:.1f} ms/search, process CPU {cpu * 1000 / n:.1f} ms/search")


if __name__ == "__main__":
    main()
