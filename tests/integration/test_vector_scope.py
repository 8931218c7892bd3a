"""VEC-01: with an HNSW index, a small scope next to a large one gets its own k best, never fewer
and never another scope's (pgvector iterative index scans)."""

from __future__ import annotations

import numpy as np
from sqlalchemy import text

from conftest import drop_scope, new_scope
from mewdex.search import vector
from mewdex.search.generations import active_generation
from mewdex.search.vector_index import distance_sql

MODEL = "vec01-test-model"
DIMS = 16


def _fill(sessions, scope, vectors: np.ndarray) -> list:
    """Insert one meme per vector with its embedding in the scope's active generation; returns meme ids."""
    ids = []
    with sessions.begin() as session:
        generation = active_generation(session, scope.scope_id, MODEL, DIMS)
        for i, v in enumerate(vectors):
            sha = f"{i:064x}"
            meme_id = session.execute(
                text(
                    "INSERT INTO memes (id, scope_id, storage_key, display_name, extension, size_bytes, sha256, "
                    "context_status, meme_context, provenance, extensions, revision, created_at, updated_at) "
                    "VALUES (gen_random_uuid(), :s, :k, :n, '.png', 1, :sha, 'ready', '{}', '{}', '{}', 1, "
                    "now(), now()) "
                    "RETURNING id"
                ),
                {"s": scope.scope_id, "k": sha + ".png", "n": f"m{i}", "sha": sha},
            ).scalar_one()
            session.execute(
                text(
                    "INSERT INTO meme_embeddings (scope_id, generation_id, meme_id, field, model, dimensions, "
                    "embedding, semantic_document, semantic_document_hash, metadata_hash, image_sha256, "
                    "meme_revision, item_status) "
                    "VALUES (:s, :g, :m, 'document', :model, :d, :e, '', :h, :h, :h, 1, 'ready')"
                ),
                {
                    "s": scope.scope_id,
                    "g": generation.id,
                    "m": meme_id,
                    "model": MODEL,
                    "d": DIMS,
                    "e": v.astype(np.float32),
                    "h": sha,
                },
            )
            ids.append(meme_id)
    return ids


def _unit(rng, n):
    x = rng.normal(size=(n, DIMS)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_small_scope_next_to_a_large_one_gets_its_own_best(sessions):
    rng = np.random.default_rng(1)
    big, small = new_scope(sessions, "vec01big"), new_scope(sessions, "vec01small")
    try:
        query = _unit(rng, 1)[0]
        # The large scope's vectors sit right next to the query; the small scope's are far away.
        near = query + 0.05 * _unit(rng, 2000)
        _fill(sessions, big, near / np.linalg.norm(near, axis=1, keepdims=True))
        small_ids = _fill(sessions, small, _unit(rng, 5))
        with sessions.begin() as session:
            hits = vector.search(session, small.scope_id, MODEL, query, 5)
            plan = "\n".join(
                r[0]
                for r in session.execute(
                    text(
                        f"EXPLAIN SELECT meme_id FROM meme_embeddings WHERE model = :m AND dimensions = {DIMS} "
                        f"ORDER BY {distance_sql(DIMS, 'q')} LIMIT 5"
                    ),
                    {"m": MODEL, "q": query},
                )
            )
        assert "hnsw" in plan  # the partial expression index is there and usable
        assert sorted(h.meme_id for h in hits) == sorted(small_ids)
        assert [h.similarity for h in hits] == sorted((h.similarity for h in hits), reverse=True)
    finally:
        drop_scope(sessions, big)
        drop_scope(sessions, small)


def test_ensure_index_replaces_a_float32_index_of_its_name(sessions):
    """An index made by a process of a version before migration 0016 (float32 graph, same name) is
    rebuilt over half precision: search's expression could not use it."""
    from mewdex.search.vector_index import HNSW_WITH, ensure_index, index_name

    model = "vec-old-process-model"
    name = index_name("meme_embeddings", model, DIMS)
    try:
        with sessions.begin() as session:
            session.execute(
                text(
                    f"CREATE INDEX {name} ON meme_embeddings USING hnsw ((embedding::vector({DIMS})) vector_cosine_ops)"
                    f" {HNSW_WITH} WHERE model = '{model}' AND dimensions = {DIMS}"
                )
            )
        with sessions.begin() as session:
            ensure_index(session, "meme_embeddings", model, DIMS)
            ensure_index(session, "meme_embeddings", model, DIMS)  # and then leaves it alone
        with sessions.begin() as session:
            definition = session.execute(
                text("SELECT indexdef FROM pg_indexes WHERE indexname = :n"), {"n": name}
            ).scalar_one()
        assert f"::halfvec({DIMS})) halfvec_cosine_ops" in definition and model in definition
    finally:
        with sessions.begin() as session:
            session.execute(text(f"DROP INDEX IF EXISTS {name}"))


def test_small_scope_is_searched_exactly_however_little_the_graph_scan_reads(sessions):
    """VEC-01 where the graph is much larger than the scope: pgvector's iterative scan stops after
    ``hnsw.max_scan_tuples`` tuples (20,000 by default; 100 here stands for a graph of other scopes'
    rows far larger than that), and before the fix a 30-meme scope next to 400 nearer memes got only
    some of its 30. A scope of at most ``EXACT_SCAN_ROWS`` vectors is scanned exactly: all its memes, in
    exact cosine order."""
    rng = np.random.default_rng(3)
    big, small = new_scope(sessions, "vec01big"), new_scope(sessions, "vec01small")
    try:
        query = _unit(rng, 1)[0]
        near = query + 0.05 * _unit(rng, 400)
        _fill(sessions, big, near / np.linalg.norm(near, axis=1, keepdims=True))
        vectors = _unit(rng, 30)
        small_ids = _fill(sessions, small, vectors)
        expected = [small_ids[i] for i in np.argsort(-(vectors @ query), kind="stable")]
        with sessions.begin() as session:
            session.execute(text("SET LOCAL hnsw.max_scan_tuples = 100"))
            hits = vector.search(session, small.scope_id, MODEL, query, 100)
        assert [h.meme_id for h in hits] == expected
    finally:
        drop_scope(sessions, big)
        drop_scope(sessions, small)
