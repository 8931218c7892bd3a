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
from mewdex.search.generations import active_generation
from mewdex.search.vector_rows import CARRIERS_PER_TEXT, share_vectors, write_vectors

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


def _near(rng, cos: float) -> np.ndarray:
    """A unit vector at cosine ``cos`` from the first axis (the query :data:`AXIS`)."""
    other = rng.normal(size=DIMS).astype(np.float32)
    other[0] = 0
    v = cos * AXIS + np.sqrt(1 - cos * cos) * other / np.linalg.norm(other)
    return (v / np.linalg.norm(v)).astype(np.float32)


AXIS = np.eye(DIMS, dtype=np.float32)[0]


def test_members_that_pass_a_filter_are_found_when_their_carriers_do_not(sessions):
    rng = np.random.default_rng(11)
    scope = new_scope(sessions, "shared")
    try:
        with sessions.begin() as session:
            generation = active_generation(session, scope.scope_id, MODEL, DIMS)
            # written first, the two PNGs carry the folder's vector; the four GIFs are its members
            memes = [_meme(session, scope.scope_id, i, ".png" if i < 2 else ".gif") for i in range(6)]
            folder = _near(rng, 0.99)
            for meme in memes:
                write_vectors(
                    session,
                    generation,
                    meme,
                    "h",
                    [("folder", "cats", folder), ("name", f"n {meme.id}", _near(rng, 0.1))],
                )
        with sessions.begin() as session:
            hits = vector.search(
                session, scope.scope_id, MODEL, AXIS, 20, SearchFilters(formats=["gif"]), generation=generation
            )
        assert {h.meme_id for h in hits if h.field == "folder"} == {m.id for m in memes[2:]}
        assert not {h.meme_id for h in hits} & {m.id for m in memes[:2]}  # the carriers themselves are filtered out
    finally:
        drop_scope(sessions, scope)


def test_memes_sharing_two_texts_do_not_crowd_out_the_next_folder(sessions):
    """A generic name makes the name field equal the folder's words: both are shared texts, each
    with two carriers. The next folder's members still fill the places after the first folder's."""
    from mewdex.search.generations import GenerationRef

    rng = np.random.default_rng(12)
    scope = new_scope(sessions, "shared")
    try:
        with sessions.begin() as session:
            generation = active_generation(session, scope.scope_id, MODEL, DIMS)
            a_folder, a_name, b_folder = _near(rng, 0.99), _near(rng, 0.98), _near(rng, 0.97)
            for i in range(7):
                meme = _meme(session, scope.scope_id, i)
                write_vectors(session, generation, meme, "h", [("folder", "a", a_folder), ("name", "a", a_name)])
            for i in range(10):
                meme = _meme(session, scope.scope_id, 100 + i)
                items = [("folder", "b", b_folder), ("name", f"b {meme.id}", _near(rng, 0.0))]
                write_vectors(session, generation, meme, "h", items)
            for i in range(30):
                meme = _meme(session, scope.scope_id, 200 + i)
                write_vectors(session, generation, meme, "h", [("name", f"far {meme.id}", _near(rng, 0.5))])
        with sessions.begin() as session:
            vector.hnsw_settings(session, vector.EF_SEARCH)
            hits, _ = vector.search_generation(session, scope.scope_id, "e5", GenerationRef.of(generation), AXIS, 10)
        assert [round(h.similarity, 2) for h in hits] == [0.99] * 7 + [0.97] * 3
    finally:
        drop_scope(sessions, scope)


def test_a_member_deleted_meanwhile_is_not_the_heir(sessions, library):
    """The last carrier goes while another transaction is deleting a member: the trigger passes over
    that member (it does not wait for it) and hands the vector to one that stays."""
    import threading

    def folder_rows(session):
        return session.execute(
            text("SELECT meme_id, embedding IS NOT NULL FROM meme_embeddings WHERE scope_id = :s AND field = 'folder'"),
            {"s": library.scope.scope_id},
        ).all()

    with sessions.begin() as session:
        carriers = [m for m, carries in folder_rows(session) if carries]
        session.execute(text("DELETE FROM memes WHERE id = :m"), {"m": carriers[0]})  # one carrier left
    with sessions.begin() as session:
        rows = folder_rows(session)
    last = next(m for m, carries in rows if carries)
    members = {m for m, carries in rows if not carries}
    with sessions.begin() as session:  # the member a plain lookup of the text's members finds first
        first = session.execute(
            text(
                "SELECT meme_id FROM meme_embeddings WHERE scope_id = :s AND field = 'folder'"
                " AND embedding IS NULL AND item_status = 'ready' LIMIT 1"
            ),
            {"s": library.scope.scope_id},
        ).scalar_one()
    deleting = sessions()
    deleting.begin()
    deleting.execute(text("DELETE FROM memes WHERE id = :m"), {"m": first})  # not committed yet

    def delete_last():
        with sessions.begin() as session:
            session.execute(text("SET LOCAL lock_timeout = '10s'"))
            session.execute(text("DELETE FROM memes WHERE id = :m"), {"m": last})

    worker = threading.Thread(target=delete_last)
    worker.start()
    try:
        worker.join(timeout=5)
        waited = worker.is_alive()
    finally:
        deleting.commit()
        deleting.close()
        worker.join()
    assert not waited  # the trigger did not wait for the other transaction's member
    hits = _search(sessions, library, library.folder)
    assert {h.meme_id for h in hits if h.field == "folder"} == members - {first}
