"""A text many memes share (a folder's words) keeps its vector in a few carrier rows; the others are
members with no vector, out of the HNSW graph, and search still finds every one of them at the
carrier's distance — also after the carriers are deleted or re-embedded (issue 14, migration 0015)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from sqlalchemy import text

from conftest import drop_scope, new_scope
from mewdex.dto.search import SearchFilters
from mewdex.search import vector
from mewdex.search.generations import CARRIERS_PER_TEXT, active_generation, share_vectors, write_vectors

MODEL = "shared-text-test-model"
DIMS = 16
MEMES = 6


def _unit(rng, n):
    x = rng.normal(size=(n, DIMS)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _meme(session, scope_id: str, i: int, extension: str = ".png"):
    sha = f"{i:064x}"
    meme_id = session.execute(
        text(
            "INSERT INTO memes (id, scope_id, storage_key, display_name, extension, size_bytes, sha256, "
            "context_status, meme_context, provenance, extensions, revision, created_at, updated_at) "
            "VALUES (gen_random_uuid(), :s, :k, :n, :x, 1, :sha, 'ready', '{}', '{}', '{}', 1, now(), now()) "
            "RETURNING id"
        ),
        {"s": scope_id, "k": sha + extension, "n": f"m{i}", "sha": sha, "x": extension},
    ).scalar_one()
    return SimpleNamespace(scope_id=scope_id, id=meme_id, sha256=sha, revision=1)


def _carriers(session, scope_id: str, document: str) -> int:
    return session.execute(
        text(
            "SELECT count(*) FROM meme_embeddings WHERE scope_id = :s AND semantic_document = :d"
            " AND embedding IS NOT NULL"
        ),
        {"s": scope_id, "d": document},
    ).scalar_one()


@pytest.fixture
def library(sessions):
    """Six memes in one folder ("cats"), each with a name of its own; half of them GIFs."""
    rng = np.random.default_rng(7)
    scope = new_scope(sessions, "shared")
    folder, names = _unit(rng, 1)[0], _unit(rng, MEMES)
    with sessions.begin() as session:
        generation = active_generation(session, scope.scope_id, MODEL, DIMS)
        memes = [_meme(session, scope.scope_id, i, ".gif" if i % 2 else ".png") for i in range(MEMES)]
        for meme, name in zip(memes, names, strict=True):
            write_vectors(
                session, generation, meme, "h", [("folder", "cats", folder), ("name", f"name {meme.id}", name)]
            )
    yield SimpleNamespace(scope=scope, generation=generation, memes=memes, folder=folder, names=names, rng=rng)
    drop_scope(sessions, scope)


def _search(sessions, lib, query, filters=None):
    with sessions.begin() as session:
        return vector.search(session, lib.scope.scope_id, MODEL, query, 20, filters, generation=lib.generation)


def test_a_shared_text_is_carried_by_a_few_rows_and_every_meme_is_found(sessions, library):
    with sessions.begin() as session:
        assert _carriers(session, library.scope.scope_id, "cats") == CARRIERS_PER_TEXT
        assert _carriers(session, library.scope.scope_id, f"name {library.memes[0].id}") == 1
    hits = _search(sessions, library, library.folder)
    assert {h.meme_id for h in hits} == {m.id for m in library.memes}
    assert all(h.field == "folder" and h.similarity == pytest.approx(1.0, abs=1e-5) for h in hits)
    # a meme's own text still wins for a query about it
    assert _search(sessions, library, library.names[3])[0].meme_id == library.memes[3].id


def test_filters_apply_to_the_members_too(sessions, library):
    hits = _search(sessions, library, library.folder, SearchFilters(formats=["gif"]))
    assert {h.meme_id for h in hits} == {m.id for i, m in enumerate(library.memes) if i % 2}


def test_deleting_the_carriers_hands_the_vector_to_a_member(sessions, library):
    with sessions.begin() as session:
        carriers = session.execute(
            text(
                "SELECT meme_id FROM meme_embeddings WHERE scope_id = :s AND field = 'folder' AND embedding IS NOT NULL"
            ),
            {"s": library.scope.scope_id},
        ).scalars()
        session.execute(text("DELETE FROM memes WHERE id = ANY(:ids)"), {"ids": list(carriers)})
    with sessions.begin() as session:
        assert _carriers(session, library.scope.scope_id, "cats") == 1
    left = _search(sessions, library, library.folder)
    assert len(left) == MEMES - CARRIERS_PER_TEXT
    assert all(h.similarity == pytest.approx(1.0, abs=1e-5) for h in left)


def test_re_embedding_the_carriers_keeps_their_old_text_found_for_the_others(sessions, library):
    with sessions.begin() as session:
        carriers = set(
            session.execute(
                text(
                    "SELECT meme_id FROM meme_embeddings WHERE scope_id = :s AND field = 'folder'"
                    " AND embedding IS NOT NULL"
                ),
                {"s": library.scope.scope_id},
            ).scalars()
        )
        moved = {}
        for meme in library.memes:  # every carrier moves to a folder of its own
            if meme.id in carriers:
                moved[meme.id] = _unit(library.rng, 1)[0]
                write_vectors(session, library.generation, meme, "h2", [("folder", f"dogs {meme.id}", moved[meme.id])])
    cats = {h.meme_id for h in _search(sessions, library, library.folder) if h.similarity > 0.999}
    assert cats == {m.id for m in library.memes} - carriers
    for meme_id, dogs in moved.items():
        assert _search(sessions, library, dogs)[0].meme_id == meme_id


def test_share_vectors_turns_extra_copies_into_members(sessions, library):
    with sessions.begin() as session:  # rows written without write_vectors: every one a carrier
        session.execute(
            text("UPDATE meme_embeddings SET embedding = CAST(:v AS vector) WHERE scope_id = :s AND field = 'folder'"),
            {"s": library.scope.scope_id, "v": library.folder},
        )
        assert _carriers(session, library.scope.scope_id, "cats") == MEMES
        assert share_vectors(session, library.scope.scope_id) == MEMES - CARRIERS_PER_TEXT
        assert _carriers(session, library.scope.scope_id, "cats") == CARRIERS_PER_TEXT
    assert len(_search(sessions, library, library.folder)) == MEMES
