"""The vector legs' cached exact scan (mewdex.search.carrier_matrix): the same answer as PostgreSQL's
scan, and never stale — rows committed before a statement, in any order, or deleted, are seen by it."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DataError

from conftest import drop_scope, new_scope
from mewdex.search import carrier_matrix, vector
from mewdex.search.generations import active_generation
from mewdex.telemetry import REGISTRY

MODEL = "carrier-cache-test-model"
DIMS = 16


def _unit(rng, n):
    x = rng.normal(size=(n, DIMS)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _add(session, scope, vector_, i: int, *, digest: str | None = None, carries: bool = True):
    """One meme with one 'document' row in the scope's active generation; ``carries`` False: a member
    (NULL embedding) of the text ``digest``. Returns the meme id."""
    generation = active_generation(session, scope.scope_id, MODEL, DIMS)
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
    session.execute(
        text(
            "INSERT INTO meme_embeddings (scope_id, generation_id, meme_id, field, model, dimensions, embedding, "
            "semantic_document, semantic_document_hash, metadata_hash, image_sha256, meme_revision, item_status) "
            "VALUES (:s, :g, :m, 'document', :model, :d, :e, '', :h, :sha, :sha, 1, 'ready')"
        ),
        {
            "s": scope.scope_id,
            "g": generation.id,
            "m": meme_id,
            "model": MODEL,
            "d": DIMS,
            "e": vector_.astype(np.float32) if carries else None,
            "h": digest or sha,
            "sha": sha,
        },
    )
    return meme_id


def _search(sessions, scope, query, limit=10):
    with sessions() as session:
        return vector.search(session, scope.scope_id, MODEL, query, limit)


def test_the_cached_scan_answers_as_postgresql_does(sessions, monkeypatch):
    rng = np.random.default_rng(11)
    scope = new_scope(sessions, "carrier")
    try:
        vectors = _unit(rng, 60)
        carrier_matrix.clear()
        with sessions.begin() as session:
            generation_id = active_generation(session, scope.scope_id, MODEL, DIMS).id
            ids = [_add(session, scope, v, i) for i, v in enumerate(vectors)]
            # members sharing the texts of memes 0 and 1 (their carrier's distance)
            members = [
                _add(session, scope, vectors[0], 100 + i, digest=f"{i % 2:064x}", carries=False) for i in range(4)
            ]
        query = _unit(rng, 1)[0]
        cached = _search(sessions, scope, query, 30)
        assert carrier_matrix.cached(scope.scope_id, generation_id) is not None  # the cache answered
        with pytest.raises(DataError, match="NaN"):  # as PostgreSQL's scan refuses it
            _search(sessions, scope, np.full(DIMS, np.nan, dtype=np.float32))
        monkeypatch.setattr(carrier_matrix, "budget_bytes", lambda: 0)
        exact = _search(sessions, scope, query, 30)
        assert [(h.meme_id, h.field) for h in cached] == [(h.meme_id, h.field) for h in exact]
        assert np.allclose([h.similarity for h in cached], [h.similarity for h in exact], atol=1e-6)
        everyone = _search(sessions, scope, query, 100)
        assert {h.meme_id for h in everyone} == set(ids) | set(members)
    finally:
        carrier_matrix.clear()
        drop_scope(sessions, scope)


def test_rows_committed_out_of_order_or_deleted_are_seen_at_once(sessions):
    """A search after the cache was filled finds a meme committed since — also one whose transaction
    began (took its xid) before another that committed first — and never returns a deleted one."""
    rng = np.random.default_rng(12)
    scope = new_scope(sessions, "carrier")
    try:
        query = _unit(rng, 1)[0]
        with sessions.begin() as session:
            for i, v in enumerate(_unit(rng, 40)):
                _add(session, scope, v, i)
        _search(sessions, scope, query)  # fills the cache
        near = query + 0.01 * _unit(rng, 2)
        near /= np.linalg.norm(near, axis=1, keepdims=True)
        early, late = sessions(), sessions()
        try:
            first = _add(early, scope, near[0], 1000)  # takes the smaller xid
            second = _add(late, scope, near[1], 1001)
            late.commit()
            found = [h.meme_id for h in _search(sessions, scope, query)]
            assert second in found[:2] and first not in found
            early.commit()  # the older transaction commits last
            found = [h.meme_id for h in _search(sessions, scope, query)]
            assert set(found[:2]) == {first, second}
        finally:
            early.close()
            late.close()
        with sessions.begin() as session:
            session.execute(
                text("DELETE FROM memes WHERE scope_id = :s AND id = :m"), {"s": scope.scope_id, "m": second}
            )
        found = [h.meme_id for h in _search(sessions, scope, query)]
        assert found[0] == first and second not in found
        with sessions.begin() as session:  # an update of a column the scan does not read: a new version too
            session.execute(
                text("UPDATE meme_embeddings SET item_status = 'failed' WHERE scope_id = :s AND meme_id = :m"),
                {"s": scope.scope_id, "m": first},
            )
        assert first not in [h.meme_id for h in _search(sessions, scope, query)]
    finally:
        carrier_matrix.clear()
        drop_scope(sessions, scope)


def test_the_byte_bound_evicts_the_least_recently_used_and_a_fork_starts_empty(sessions, monkeypatch):
    rng = np.random.default_rng(13)
    scopes = [new_scope(sessions, "carrier"), new_scope(sessions, "carrier")]
    try:
        for scope in scopes:
            with sessions.begin() as session:
                for i, v in enumerate(_unit(rng, 20)):
                    _add(session, scope, v, i)
        one = 20 * (DIMS * 4 + carrier_matrix.ROW_OVERHEAD_BYTES)  # one scope's matrix
        monkeypatch.setattr(carrier_matrix, "budget_bytes", lambda: one + one // 2)
        carrier_matrix.clear()
        query = _unit(rng, 1)[0]
        _search(sessions, scopes[0], query)
        keys = list(carrier_matrix._current().entries)
        assert [k[0] for k in keys] == [scopes[0].scope_id]
        # the scope searched a moment ago keeps its place: the newcomer is answered, not admitted (the
        # scopes searched now do not fit together; evicting each other, every search would read it all)
        refused = _search(sessions, scopes[1], query)
        assert [k[0] for k in carrier_matrix._current().entries if carrier_matrix.cached(*k)] == [scopes[0].scope_id]
        monkeypatch.setattr(carrier_matrix, "budget_bytes", lambda: 0)
        assert [h.meme_id for h in refused] == [h.meme_id for h in _search(sessions, scopes[1], query)]
        monkeypatch.setattr(carrier_matrix, "budget_bytes", lambda: one + one // 2)
        reloads = REGISTRY.get_sample_value("mewdex_search_carrier_cache_total", {"outcome": "reload"}) or 0
        _search(sessions, scopes[1], query)  # refused for HOT_SECONDS: the SQL scan, no read
        assert REGISTRY.get_sample_value("mewdex_search_carrier_cache_total", {"outcome": "reload"}) == reloads
        # once the first scope has not been searched for HOT_SECONDS, the least recently used goes
        monkeypatch.setattr(carrier_matrix, "HOT_SECONDS", 0.0)
        entries = carrier_matrix._current().entries
        for key in [k for k in entries if k[0] == scopes[1].scope_id]:
            del entries[key]  # its refusal's hold, as if it had passed
        _search(sessions, scopes[1], query)
        assert [k[0] for k in carrier_matrix._current().entries if carrier_matrix.cached(*k)] == [scopes[1].scope_id]
        assert carrier_matrix._current().nbytes == one
        # a matrix larger than the whole cache is not read again at every search: the SQL scan serves
        monkeypatch.setattr(carrier_matrix, "budget_bytes", lambda: one // 2)
        carrier_matrix.clear()
        reloads = REGISTRY.get_sample_value("mewdex_search_carrier_cache_total", {"outcome": "reload"}) or 0
        first, second = _search(sessions, scopes[0], query), _search(sessions, scopes[0], query)
        assert REGISTRY.get_sample_value("mewdex_search_carrier_cache_total", {"outcome": "reload"}) == reloads + 1
        assert [h.meme_id for h in first] == [h.meme_id for h in second]
        monkeypatch.setattr(carrier_matrix.os, "getpid", lambda: -1)  # as in a forked child
        assert not carrier_matrix._current().entries
    finally:
        carrier_matrix.clear()
        for scope in scopes:
            drop_scope(sessions, scope)


def _rewrite(sessions) -> None:
    """``VACUUM FULL meme_embeddings``: every row version moves (a new file), keeping its ``xmin``."""
    with sessions.kw["bind"].connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("SET lock_timeout = '20s'"))
        connection.execute(text("VACUUM FULL meme_embeddings"))


def test_a_table_rewrite_does_not_hand_a_row_another_rows_vector(sessions, monkeypatch):
    """Rows written by one transaction share their ``xmin``; when some are deleted, ``VACUUM FULL``
    packs the others into the freed places, so a row's new ``(ctid, xmin)`` is the one a deleted or
    moved row had: the cache must not keep the old row's meme and vector for it."""
    rng = np.random.default_rng(14)
    scope = new_scope(sessions, "carrier")
    try:
        _rewrite(sessions)  # the rows before the scope's packed, so the next rewrite moves only these
        with sessions.begin() as session:
            ids = [_add(session, scope, v, i) for i, v in enumerate(_unit(rng, 40))]
        query = _unit(rng, 1)[0]
        _search(sessions, scope, query, 40)  # fills the cache
        with sessions.begin() as session:
            session.execute(
                text("DELETE FROM memes WHERE scope_id = :s AND id = ANY(:m)"), {"s": scope.scope_id, "m": ids[:3]}
            )
        _rewrite(sessions)
        cached = _search(sessions, scope, query, 40)
        monkeypatch.setattr(carrier_matrix, "budget_bytes", lambda: 0)
        exact = _search(sessions, scope, query, 40)
        assert {h.meme_id for h in exact} == set(ids[3:])
        assert [h.meme_id for h in cached] == [h.meme_id for h in exact]
        assert np.allclose([h.similarity for h in cached], [h.similarity for h in exact], atol=1e-6)
    finally:
        carrier_matrix.clear()
        drop_scope(sessions, scope)


def test_texts_the_lists_cannot_carry_take_the_sql_path(sessions, monkeypatch):
    """A digest with a comma (or empty) cannot travel in the statement's comma-joined lists: the SQL
    scan answers."""
    rng = np.random.default_rng(15)
    scope = new_scope(sessions, "carrier")
    try:
        vectors = _unit(rng, 6)
        with sessions.begin() as session:
            digests = ["a,b", "", "c"] * 2
            ids = [_add(session, scope, vectors[i], i, digest=digests[i]) for i in range(6)]
            _add(session, scope, vectors[0], 100, digest="a,b", carries=False)  # a member of the text "a,b"
        query = vectors[1]
        carrier_matrix.clear()
        cached = _search(sessions, scope, query)
        monkeypatch.setattr(carrier_matrix, "budget_bytes", lambda: 0)
        exact = _search(sessions, scope, query)
        assert len(exact) == 7 and exact[0].meme_id == ids[1]
        assert [(h.meme_id, h.field) for h in cached] == [(h.meme_id, h.field) for h in exact]
    finally:
        carrier_matrix.clear()
        drop_scope(sessions, scope)


def test_a_stale_matrix_is_read_again_at_most_once_a_second_the_sql_scan_serving_meanwhile(sessions, monkeypatch):
    """Under a steady stream of writes a read per change would cost more than the scans it saves."""
    rng = np.random.default_rng(15)
    scope = new_scope(sessions, "carrier")

    def count(outcome: str) -> float:
        return REGISTRY.get_sample_value("mewdex_search_carrier_cache_total", {"outcome": outcome}) or 0

    try:
        carrier_matrix.clear()
        with sessions.begin() as session:
            for i, v in enumerate(_unit(rng, 20)):
                _add(session, scope, v, i)
        query = _unit(rng, 1)[0]
        monkeypatch.setattr(carrier_matrix, "RELOAD_SECONDS", 3600.0)  # "within the second", however slow the machine
        _search(sessions, scope, query)  # reads the matrix
        before = {outcome: count(outcome) for outcome in ("reload", "stale", "deferred", "hit")}
        with sessions.begin() as session:
            new = _add(session, scope, query, 50)  # the query's own vector: the nearest
        assert _search(sessions, scope, query)[0].meme_id == new  # the SQL scan answered, the new meme first
        assert count("stale") == before["stale"] + 1 and count("deferred") == before["deferred"] + 1
        assert _search(sessions, scope, query)[0].meme_id == new  # straight to the SQL scan: no stale statement
        assert count("stale") == before["stale"] + 1 and count("deferred") == before["deferred"] + 2
        assert count("reload") == before["reload"]
        monkeypatch.setattr(carrier_matrix, "RELOAD_SECONDS", 0.0)  # the second has passed: one read, then hits
        assert _search(sessions, scope, query)[0].meme_id == new
        assert count("reload") == before["reload"] + 1 and count("hit") == before["hit"] + 1
    finally:
        carrier_matrix.clear()
        drop_scope(sessions, scope)
