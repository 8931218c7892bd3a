"""Library benchmarks: collection ZIP export and import throughput.

Export/import: a 200-meme collection of corpus images (stored without processing) is exported
with the streaming writer to a file, then imported into a fresh scope (preflight + import, no
processing). Prints MB/s of archive bytes and files/s, best of ``--rounds``.

Run: .venv/bin/python bench/library.py [--data-dir DIR] [--memes 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

import corpus


def _corpus_files(n: int) -> list[Path]:
    files: list[Path] = []
    for root in corpus.corpus_roots():
        files += sorted(p for p in (root / "images").rglob("*") if p.is_file() and not p.name.startswith("."))
    return files


def bench_export_import(n_memes: int = 200, rounds: int = 3, log=print) -> dict:
    """Export and import a ``n_memes`` collection ``rounds`` times; returns and prints the figures.

    Needs the settings to point at a data dir (``corpus.use_data_dir``); the database is migrated here.
    """
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
    for path in _corpus_files(n_memes):
        result = add_image(sessions, store, source, path.read_bytes(), filename=path.name,
                           provenance={"source": "bench"}, process=False)
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
                result = packages.import_package(sessions, store, target_scope, fileobj, source_name="bench.zip",
                                                 process=False)
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
    log(f"export: {figures['memes']} memes, {figures['archive_mb']} MB in {figures['export_s']} s "
        f"→ {figures['export_mb_per_s']} MB/s")
    log(f"import (preflight + store, no processing): {figures['import_s']} s "
        f"→ {figures['import_mb_per_s']} MB/s, {figures['import_files_per_s']} files/s")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="data dir to use (default: a fresh temp dir)")
    parser.add_argument("--memes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data_dir = corpus.use_data_dir(args.data_dir)
    print(f"data dir: {data_dir}")
    try:
        bench_export_import(args.memes, args.rounds)
    finally:
        if args.data_dir is None:
            from mewdex.config import get_settings
            from mewdex.db.embedded import stop

            stop(get_settings().pgdata)


if __name__ == "__main__":
    main()
