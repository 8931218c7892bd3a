"""Upgrades keep data (issue 34, item 6): a data dir at the oldest schema revision released data could
have (0001), filled through that revision's tables with SQL, is upgraded to head by ``mewdex serve``'s
start-up; its rows, files and search answer afterwards as they did."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import httpx
import psycopg
from sqlalchemy import create_engine

from channel_helpers import image_bytes
from conftest import MEWDEX_BIN, TEST_ENV, http_ok, wait_until
from s3_helpers import free_port

OLDEST = "0001"
OLD_E5 = "multilingual-e5-small@2024"  # how 0001-era heads named the e5 leg (0006 renames them "e5")


def _fill(url: str, blobs: Path) -> dict:
    """One library at schema 0001: a meme with its file, a collection, its keyword document, an e5 head."""
    from mewdex.search.text import tokenize

    scope, namespace, meme_id = "old-library", uuid.uuid4(), uuid.uuid4()
    collection_id, generation_id = uuid.uuid4(), uuid.uuid4()
    data = image_bytes(seed=34)
    sha = hashlib.sha256(data).hexdigest()
    path = blobs / str(namespace) / sha[:2] / f"{sha}.png"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    name = "vintage kitten"
    terms = tokenize(name)
    with psycopg.connect(url, autocommit=False) as conn:
        conn.execute(
            "INSERT INTO scopes (id, storage_namespace, created_at) VALUES (%s, %s, now())", (scope, namespace)
        )
        conn.execute(
            "INSERT INTO memes (id, scope_id, storage_key, display_name, name_source, extension, size_bytes, sha256,"
            " context_status, meme_context, provenance, extensions, revision, created_at, updated_at)"
            " VALUES (%s, %s, %s, %s, 'uploaded', '.png', %s, %s, 'ready', '{}', '{}',"
            ' \'{"image": {"animated": false}}\', 1, now(), now())',
            (meme_id, scope, f"{sha}.png", name, len(data), sha),
        )
        conn.execute(
            "INSERT INTO meme_collections (id, scope_id, name, created_at, updated_at)"
            " VALUES (%s, %s, 'old favourites', now(), now())",
            (collection_id, scope),
        )
        conn.execute(
            "INSERT INTO meme_collection_items (scope_id, collection_id, meme_id, added_at) VALUES (%s, %s, %s, now())",
            (scope, collection_id, meme_id),
        )
        conn.execute(
            "INSERT INTO meme_search_documents (scope_id, meme_id, metadata_hash, folded_text, term_count, updated_at)"
            " VALUES (%s, %s, 'h', %s, %s, now())",
            (scope, meme_id, name, float(len(terms))),
        )
        for term in terms:
            conn.execute(
                "INSERT INTO meme_search_terms (scope_id, term, meme_id, tf) VALUES (%s, %s, %s, 1)",
                (scope, term, meme_id),
            )
        conn.execute(
            "INSERT INTO search_generations (id, scope_id, model, dimensions, status, source_snapshot_hash,"
            " created_at, activated_at) VALUES (%s, %s, %s, 384, 'active', %s, now(), now())",
            (generation_id, scope, OLD_E5, "0" * 64),
        )
        conn.execute(
            "INSERT INTO search_heads (scope_id, model, active_generation_id, active_generation_model)"
            " VALUES (%s, %s, %s, %s)",
            (scope, OLD_E5, generation_id, OLD_E5),
        )
        conn.commit()
    return {"scope": scope, "meme_id": str(meme_id), "sha": sha, "collection_id": str(collection_id)}


def test_a_data_dir_of_schema_0001_is_upgraded_by_serve_and_keeps_its_data():
    from mewdex.db.embedded import embedded_url, stop
    from mewdex.db.migrate import upgrade

    data_dir = Path(tempfile.mkdtemp(prefix="mewdex-upgrade-"))
    pgdata = data_dir.resolve() / "pgdata"
    proc = None
    try:
        sa_url = embedded_url(pgdata)
        engine = create_engine(sa_url)
        assert upgrade(engine, OLDEST) == OLDEST
        engine.dispose()
        old = _fill(sa_url.replace("postgresql+psycopg://", "postgresql://", 1), data_dir / "blobs")

        port = free_port()
        env = {
            **os.environ,
            **TEST_ENV,
            "MEWDEX_DATA_DIR": str(data_dir),
            "MEWDEX_AUTH": "none",
            "MEWDEX_DEFAULT_SCOPE": old["scope"],
        }
        log = data_dir / "serve.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [str(MEWDEX_BIN), "serve", "--port", str(port), "--workers", "0"], env=env, stdout=out, stderr=out
            )
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            assert proc is not None and proc.poll() is None, log.read_text()[-3000:]
            return http_ok(base + "/health", (200, 503), timeout=2)

        wait_until(up, timeout=180, interval=0.5, what="mewdex serve on the upgraded data dir")
        with httpx.Client(base_url=base, timeout=60) as client:
            [meme] = client.get("/api/v1/memes").json()["items"]
            assert (meme["id"], meme["display_name"]) == (old["meme_id"], "vintage kitten")
            media = client.get(f"/media/{old['meme_id']}")
            assert media.status_code == 200 and hashlib.sha256(media.content).hexdigest() == old["sha"]
            collection = client.get(f"/api/v1/collections/{old['collection_id']}").json()
            assert collection["name"] == "old favourites" and [i["id"] for i in collection["items"]] == [meme["id"]]
            hits = client.post("/api/v1/search", json={"query": "vintage kitten"}).json()["results"]
            assert [h["id"] for h in hits][:1] == [old["meme_id"]], "the keyword statistics were backfilled"
        with psycopg.connect(sa_url.replace("postgresql+psycopg://", "postgresql://", 1)) as conn:
            from mewdex.backups.restore import known_revisions

            assert conn.execute("SELECT version_num FROM alembic_version").fetchone()[0] == known_revisions()[-1]
            assert conn.execute("SELECT model FROM search_heads WHERE scope_id = %s", (old["scope"],)).fetchall() == [
                ("e5",)
            ]
            assert conn.execute(
                "SELECT n_documents FROM meme_search_scope_stats WHERE scope_id = %s", (old["scope"],)
            ).fetchone() == (1,)
            assert conn.execute(
                "SELECT count(*) FROM meme_search_terms WHERE scope_id = %s AND impact IS NULL", (old["scope"],)
            ).fetchone() == (0,)
            # the configured e5 model is not the old one: start-up queued the rebuild of that leg
            assert (
                conn.execute(
                    "SELECT count(*) FROM search_generations WHERE scope_id = %s AND status = 'building'",
                    (old["scope"],),
                ).fetchone()[0]
                >= 1
            )
            # named before the naming rules had a version: start-up queued the library's name repair
            assert conn.execute(
                "SELECT count(*) FROM tasks WHERE scope_id = %s AND task_type = 'meme_name_repair'"
                " AND status = 'queued'",
                (old["scope"],),
            ).fetchone() == (1,)
            from mewdex.pipeline.name_repair import NAME_RULES

            assert conn.execute("SELECT value FROM platform_settings WHERE key = 'name_rules'").fetchone() == (
                NAME_RULES,
            )
            # indexed before the keyword recipe had a version: start-up queued the rewrite of its keyword index
            assert conn.execute(
                "SELECT count(*) FROM tasks WHERE scope_id = %s AND task_type = 'keyword_rebuild'",
                (old["scope"],),
            ).fetchone() == (1,)
            from mewdex.search.documents import KEYWORD_VERSION

            assert conn.execute("SELECT value FROM platform_settings WHERE key = 'keyword_recipe'").fetchone() == (
                KEYWORD_VERSION,
            )
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        stop(pgdata)
        shutil.rmtree(data_dir, ignore_errors=True)
