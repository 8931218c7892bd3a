"""Scope delete next to a large keyword-statistics table: the time of ``DELETE FROM scopes`` (everything
cascades, the statistics triggers included) when the deleting connection's trigger plans were made
while ``meme_search_term_stats`` looked empty and nothing analysed it since it filled (migration 0031).

In a fresh data dir (its embedded PostgreSQL stopped and removed at the end): fill the statistics table,
empty it and analyse it (no live row in its pages) with its autovacuum off, let the deleting connection delete one
meme (its triggers are planned now), fill the table with OTHER rows of other scopes, import a scope of
MEMES memes x TERMS terms, then delete that scope on the same connection (``cached``) or on a new one
(``fresh``), and print the time.

Run: PYTHONPATH=src .venv/bin/python bench/scope_delete.py [cached|fresh] [--memes 260] [--terms 130]
     [--other 150000] [--vocabulary 4000]
(On 2 busy cores, cached: 0012's triggers 111.7 s with --memes 40; 0031's 0.11 s with
--memes 40, 0.15 s with the defaults.)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", nargs="?", choices=("cached", "fresh"), default="cached")
    parser.add_argument("--memes", type=int, default=260)
    parser.add_argument("--terms", type=int, default=130)
    parser.add_argument("--other", type=int, default=150_000)
    parser.add_argument("--vocabulary", type=int, default=4000)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="mewdex-scope-delete-"))
    os.environ["MEWDEX_DATA_DIR"] = str(data_dir)
    os.environ.pop("MEWDEX_DATABASE_URL", None)
    from mewdex.db.embedded import stop

    try:
        run(args)
    finally:
        stop(data_dir / "pgdata")
        shutil.rmtree(data_dir, ignore_errors=True)


def make_scope(connection, scope_id: str, memes: int, terms: int, vocabulary: int) -> None:
    """A scope of ``memes`` memes with a keyword document of ``terms`` distinct terms each."""
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    from mewdex.db.models import Meme, ScopeContext
    from mewdex.db.scopes import ensure_scope

    session = Session(bind=connection)
    ensure_scope(session, ScopeContext(scope_id))
    for i in range(memes):
        sha = hashlib.sha256(f"{scope_id}-{i}".encode()).hexdigest()
        session.add(
            Meme(
                scope_id=scope_id,
                storage_key=sha + ".png",
                display_name=f"m{i}",
                name_source="uploaded",
                extension=".png",
                size_bytes=100,
                sha256=sha,
                provenance={},
                extensions={"image": {}},
            )
        )
    session.flush()
    connection.execute(
        text(
            "INSERT INTO meme_search_documents (scope_id, meme_id, metadata_hash, folded_text, term_count, updated_at)"
            " SELECT scope_id, id, 'h', 'x', :t, now() FROM memes WHERE scope_id = :s"
        ),
        {"s": scope_id, "t": terms},
    )
    connection.execute(
        text(
            "INSERT INTO meme_search_terms (scope_id, term, meme_id, tf, doc_length, impact)"
            " SELECT m.scope_id, 'term' || ((k + abs(hashtext(m.id::text)) % :v) % :v), m.id, 1, :t, 1"
            " FROM memes m, generate_series(1, :t) k WHERE m.scope_id = :s"
        ),
        {"s": scope_id, "t": terms, "v": vocabulary},
    )


def run(args: argparse.Namespace) -> None:
    from sqlalchemy import text

    from mewdex.db.engine import get_engine
    from mewdex.db.migrate import upgrade

    engine = get_engine()
    upgrade(engine)
    with engine.connect() as other:
        other.execute(text("ALTER TABLE meme_search_term_stats SET (autovacuum_enabled = false)"))
        fill = "INSERT INTO meme_search_term_stats (scope_id, term, df)"
        fill += " SELECT :s, 't' || i, 1 FROM generate_series(1, :n) i"
        other.execute(text(fill), {"s": "gone", "n": args.other})
        other.execute(text("DELETE FROM meme_search_term_stats WHERE scope_id = 'gone'"))
        other.commit()
        # analysed with no live row in its pages (as after a big scope's delete): the planner believes 1 row
        other.execute(text("ANALYZE meme_search_term_stats"))
        make_scope(other, "small", 3, 10, 20)
        other.commit()
    deleting = engine.connect()
    deleting.execute(text("DELETE FROM memes WHERE id = (SELECT id FROM memes WHERE scope_id = 'small' LIMIT 1)"))
    deleting.commit()  # the triggers' plans of this connection are made now
    with engine.connect() as other:
        other.execute(
            text(
                "INSERT INTO meme_search_term_stats (scope_id, term, df)"
                " SELECT 'other-' || (i % 50), 'term' || i, 1 + i % 7 FROM generate_series(1, :n) i"
            ),
            {"n": args.other},
        )
        make_scope(other, "target", args.memes, args.terms, args.vocabulary)
        other.commit()
        postings = other.execute(text("SELECT count(*) FROM meme_search_terms WHERE scope_id = 'target'")).scalar()
    if args.mode == "fresh":
        deleting.close()
        deleting = engine.connect()
    started = time.monotonic()
    deleting.execute(text("DELETE FROM scopes WHERE id = 'target'"))
    deleting.commit()
    seconds = time.monotonic() - started
    left = deleting.execute(text("SELECT count(*) FROM meme_search_term_stats WHERE scope_id = 'target'")).scalar()
    deleting.close()
    print(
        f"{args.mode}: DELETE FROM scopes of {args.memes} memes ({postings} postings) next to {args.other}"
        f" statistics rows of other scopes: {seconds:.2f} s; its statistics rows left: {left}"
    )


if __name__ == "__main__":
    main()
