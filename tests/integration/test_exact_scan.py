"""The in-process exact scan of a small generation (mewdex.search.exact_scan): the same memes in the
same order as PostgreSQL's exact scan, and always current — news written by any transaction, even one
that began before the generation was loaded, a meme's replaced or deleted rows, a scope too big."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from sqlalchemy import text

from conftest import drop_scope, new_scope
from mewdex.search import exact_scan, vector
from mewdex.search.generations import GenerationRef, active_generation
from mewdex.search.vector_rows import write_vectors

MODEL = "exact-scan-test-model"
DIMS = 16


def _unit(rng, n):
    x = rng.normal(size=(n, DIMS)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _meme(session, scope, i: int):
    sha = f"{i:064x}"
    meme_id = session.execute(
        text(
            "INSERT INTO memes (id, scope_id, storage_key, display_name, extension, size_bytes, sha256, "
            "context_status, meme_context, provenance, extensions, revision, created_at, updated_at) "
            "VALUES (gen_random_uuid(), :s, :k, :n, '.png', 1, :sha, 'ready', '{}', '{}', '{}', 1, now(), now()) "
            "RETURNING id"
        ),
        {"s": scope.scope_id, "k": sha + ".png", "n": f"m{i}", "sha": sha},
    ).scalar_one()
    return SimpleNamespace(scope_id=scope.scope_id, id=meme_id, sha256=sha, revision=1)


def _write(session, scope, meme, items):
    """The meme's rows in the scope's generation: items = [(field, document, vector)]."""
    generation = active_generation(session, scope.scope_id, MODEL, DIMS)
    write_vectors(session, generation, meme, "h", items)
    return generation


def _search(sessions, scope, query, limit=100, *, in_process=True, monkeypatch=None):
    with sessions.begin() as session:
        generation = GenerationRef.of(active_generation(session, scope.scope_id, MODEL, DIMS))
        if not in_process:
            assert monkeypatch is not None
            with monkeypatch.context() as m:
                m.setattr(exact_scan, "nearest", lambda *a, **k: None)
                hits, _ = vector.search_generation(session, scope.scope_id, MODEL, generation, query, limit)
        else:
            hits, _ = vector.search_generation(session, scope.scope_id, MODEL, generation, query, limit)
    return hits


@pytest.fixture
def scope(sessions):
    exact_scan.forget()
    scope = new_scope(sessions, "exactscan")
    yield scope
    exact_scan.forget()
    drop_scope(sessions, scope)


def test_the_same_memes_in_the_same_order_as_postgresql(sessions, scope, monkeypatch):
    """Carriers, members of shared texts (a folder's words on many memes), several fields per meme:
    the in-process ranking equals PostgreSQL's exact scan, hit for hit."""
    rng = np.random.default_rng(7)
    shared = _unit(rng, 3)
    own = _unit(rng, 120)
    with sessions.begin() as session:
        for i in range(60):
            meme = _meme(session, scope, i)
            items = [("name", f"name {i}", own[2 * i]), ("ocr", f"ocr {i}", own[2 * i + 1])]
            if i % 3 == 0:
                items.append(("folder", f"folder {i % 9}", shared[i % 9 // 3]))
            _write(session, scope, meme, items)
    for query in _unit(rng, 5):
        for limit in (5, 40, 100):
            mine = _search(sessions, scope, query, limit)
            theirs = _search(sessions, scope, query, limit, in_process=False, monkeypatch=monkeypatch)
            assert [(h.meme_id, h.field) for h in mine] == [(h.meme_id, h.field) for h in theirs]
            assert np.allclose([h.similarity for h in mine], [h.similarity for h in theirs], atol=1e-5)
    assert (scope.scope_id, _generation_id(sessions, scope)) in exact_scan._cache  # it was in process


def _generation_id(sessions, scope):
    with sessions.begin() as session:
        return active_generation(session, scope.scope_id, MODEL, DIMS).id


def test_a_transaction_that_began_before_the_load_and_commits_after_is_found(sessions, scope):
    """The news are read by transaction id, not by time: rows of a transaction still open when the
    generation was loaded (its snapshot could not see them) are found once it commits."""
    rng = np.random.default_rng(8)
    vectors = _unit(rng, 4)
    with sessions.begin() as session:
        for i in range(3):
            _write(session, scope, _meme(session, scope, i), [("name", f"n{i}", vectors[i])])
    late = sessions()
    try:
        meme = _meme(late, scope, 99)
        _write(late, scope, meme, [("name", "late", vectors[3])])
        late.flush()
        assert meme.id not in [h.meme_id for h in _search(sessions, scope, vectors[3])]  # loads without it
        assert meme.id not in [h.meme_id for h in _search(sessions, scope, vectors[3])]  # news: not yet committed
        late.commit()
    finally:
        late.close()
    hits = _search(sessions, scope, vectors[3])
    assert hits[0].meme_id == meme.id and hits[0].similarity == pytest.approx(1.0, abs=1e-5)


def test_a_memes_replaced_rows_replace_its_old_ones_and_deleted_ones_are_gone(sessions, scope):
    rng = np.random.default_rng(9)
    old, new, other = _unit(rng, 3)
    with sessions.begin() as session:
        meme = _meme(session, scope, 1)
        _write(session, scope, meme, [("name", "old caption", old)])
        keep = _meme(session, scope, 2)
        _write(session, scope, keep, [("name", "other", other)])
    assert _search(sessions, scope, old)[0].meme_id == meme.id
    with sessions.begin() as session:  # re-captioned: its rows are replaced in one transaction
        _write(session, scope, meme, [("name", "new caption", new)])
    hits = _search(sessions, scope, old)
    assert {h.meme_id for h in hits} == {meme.id, keep.id}
    found = {h.meme_id: h.similarity for h in hits}
    assert found[meme.id] == pytest.approx(float(new @ old), abs=1e-5)  # ranked by its new text only
    with sessions.begin() as session:  # its text emptied: rows deleted, none written (no news)
        _write(session, scope, meme, [])
    assert [h.meme_id for h in _search(sessions, scope, new)] == [keep.id]
    with sessions.begin() as session:  # purged
        session.execute(text("DELETE FROM memes WHERE id = :m"), {"m": keep.id})
    assert _search(sessions, scope, other) == []


def test_rows_with_a_transaction_id_from_another_cluster_are_not_news(sessions, scope):
    """A restored backup's rows carry the ids of the cluster they were written in, maybe ahead of this
    one's: the load reads them, the news never do (they would be read at every search)."""
    rng = np.random.default_rng(10)
    v = _unit(rng, 2)
    with sessions.begin() as session:
        meme = _meme(session, scope, 1)
        _write(session, scope, meme, [("name", "restored", v[0])])
        session.execute(
            text("UPDATE meme_embeddings SET written_xid = 9000000000000000000 WHERE scope_id = :s"),
            {"s": scope.scope_id},
        )
    assert _search(sessions, scope, v[0])[0].meme_id == meme.id
    generation = exact_scan._cache[(scope.scope_id, _generation_id(sessions, scope))]
    with sessions.begin() as session:
        news = session.execute(
            exact_scan._NEWS, {"scope": scope.scope_id, "generation": _generation_id(sessions, scope), "xmin": 0}
        ).all()
    assert [r for r in news if r[0] is not None] == []
    assert generation.xmin > 0


def test_a_generation_past_the_cap_is_searched_in_postgresql(sessions, scope, monkeypatch):
    rng = np.random.default_rng(11)
    vectors = _unit(rng, 6)
    with sessions.begin() as session:
        first = _meme(session, scope, 0)
        _write(session, scope, first, [("name", "n0", vectors[0])])
        for i in range(1, 6):
            _write(session, scope, _meme(session, scope, i), [("name", f"n{i}", vectors[i])])
    monkeypatch.setattr(vector, "EXACT_SCAN_ROWS", 4)
    hits = _search(sessions, scope, vectors[0], 3)
    # PostgreSQL's HNSW path (how many of a tiny scope's rows a graph scan reaches is its own matter:
    # test_vector_scope.py); its nearest is the meme itself
    assert hits[0].meme_id == first.id and hits[0].similarity == pytest.approx(1.0, abs=1e-3)
    assert (scope.scope_id, _generation_id(sessions, scope)) not in exact_scan._cache
    assert (scope.scope_id, _generation_id(sessions, scope)) in exact_scan._big


class _NewsReadEarly:
    """A session whose search statement returns its rows only after ``meanwhile`` ran: another
    search's whole read and apply of the news fall between this one's read and its apply."""

    def __init__(self, session, meanwhile) -> None:
        self.session, self.meanwhile = session, meanwhile

    def execute(self, statement, params=None):
        result = self.session.execute(statement, params)
        if statement is not exact_scan._CHECK or self.meanwhile is None:
            return result
        rows = result.all()
        self.meanwhile, meanwhile = None, self.meanwhile
        meanwhile()
        return SimpleNamespace(all=lambda: rows)


def test_news_read_before_another_searchs_newer_news_do_not_undo_them(sessions, scope):
    """Two searches of one generation: the first reads the news before a re-caption commits, the
    second after it and applies first. The first one's older rows must not replace the meme's new
    ones (those are older than the xmin the cache moved to: never news again)."""
    rng = np.random.default_rng(12)
    first, second, other = _unit(rng, 3)
    with sessions.begin() as session:
        _write(session, scope, _meme(session, scope, 2), [("name", "other", other)])
    _search(sessions, scope, other)  # loaded
    with sessions.begin() as session:
        meme = _meme(session, scope, 1)
        _write(session, scope, meme, [("name", "first caption", first)])

    def recaptioned_and_searched() -> None:
        with sessions.begin() as session:
            _write(session, scope, meme, [("name", "second caption", second)])
        assert _search(sessions, scope, second)[0].meme_id == meme.id

    with sessions.begin() as session:
        generation = GenerationRef.of(active_generation(session, scope.scope_id, MODEL, DIMS))
        early = _NewsReadEarly(session, recaptioned_and_searched)
        vector.search_generation(early, scope.scope_id, MODEL, generation, first, 10)  # type: ignore[arg-type]
        assert early.meanwhile is None
    found = {h.meme_id: h.similarity for h in _search(sessions, scope, second)}
    assert found[meme.id] == pytest.approx(1.0, abs=1e-5)  # ranked by its second caption
