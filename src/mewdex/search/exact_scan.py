"""The exact scan of a small scope in the serving process: a generation's rows held in memory.

A vector leg over a scope of at most :data:`~mewdex.search.vector.EXACT_SCAN_ROWS` carrier rows
ranks by an exact scan. In PostgreSQL that scan reads every carrier row of the generation (~2 KB
each, a heap page per row or two) at every search: 7–9 ms of database CPU per leg on the 939-meme
corpus, most of a search's database time. Here each process keeps, per (scope, generation), the
generation's distinct texts — ``(field, semantic_document_hash)`` → unit vector, one float32 matrix —
and its rows, ``(meme, field)`` → text. A search ranks the texts with one matrix-vector product
(~0.1 ms for 2,400 × 512), gives each meme its best field's distance, and asks PostgreSQL only which
of the nearest memes still have those rows (:data:`_EXISTING`, an index range per meme).

**Always current.** A text's vector never changes (same model, same text), and a meme's rows in a
generation are always replaced together, in one transaction
(:func:`mewdex.search.vector_rows.write_vectors`): every change that matters is an *inserted* row.
Each row records the inserting transaction (``meme_embeddings.written_xid``, migration 0032). The
cache remembers the oldest transaction still running when it was last brought up to date (``xmin`` of
that statement's snapshot): every row it could not see then was written by a transaction at or after
it. Each search's one statement (:data:`_CHECK`) also reads, by an index range, the rows written since:
a meme found there gets exactly the rows found (its old ones are gone; the search then ranks again),
and ``xmin`` moves on (only if no other search applied news since this one's statement began:
older rows must never undo newer ones; :meth:`_Generation.take_news`) — a transaction that began
before the cache was loaded and commits later is still seen. Rows whose id is at or past the
snapshot's ``xmax`` (impossible but for rows restored from another cluster's backup) are not news: the
load read them. A meme whose rows were deleted without new ones (purged, or its text became empty)
is dropped by the existence check, and the cache is reloaded after :data:`RELOAD_SECONDS`.

A scope past ``EXACT_SCAN_ROWS`` carriers is left to PostgreSQL's HNSW path (probed again after
:data:`BIG_RECHECK_SECONDS`). Caches are kept for the most recently searched generations, up to
:data:`CACHE_BYTES` in all.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from uuid import UUID

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session

#: Bytes of vectors and rows kept in memory per process, over all generations (least recently searched dropped first).
CACHE_BYTES = 256 * 2**20
#: A cache older than this is loaded afresh at its next search (drops texts and memes whose rows are gone).
RELOAD_SECONDS = 600.0
#: How long "this generation is too big for the exact scan" is believed before it is probed again.
BIG_RECHECK_SECONDS = 60.0
#: Memes ranked beyond ``limit`` and checked too, so that memes whose rows are gone do not shorten the answer.
SLACK = 20

_ROW = "meme_id, field, semantic_document_hash, vector_send(embedding)"  # big-endian float4 after 4 bytes
_SNAPSHOT = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
_OF_GENERATION = "scope_id = :scope AND generation_id = :generation AND item_status = 'ready'"

#: The generation's ready rows when it has at most ``:cap`` carrier rows, and the snapshot's xmin.
_LOAD = text(
    f"""
    WITH small AS MATERIALIZED (
        SELECT count(*) <= :cap AS ok FROM (
            SELECT 1 FROM meme_embeddings
            WHERE scope_id = :scope AND generation_id = :generation AND embedding IS NOT NULL
            LIMIT :cap + 1) probe)
    SELECT NULL::uuid, NULL::varchar, NULL::varchar, NULL::bytea, {_SNAPSHOT}, (SELECT ok FROM small)
    UNION ALL
    SELECT {_ROW}, NULL, NULL FROM meme_embeddings WHERE {_OF_GENERATION} AND (SELECT ok FROM small)
    """
)

#: Ready rows written by transactions at or after ``:xmin`` (the news), and the snapshot's xmin.
_NEWS = text(
    f"""
    SELECT NULL::uuid, NULL::varchar, NULL::varchar, NULL::bytea, {_SNAPSHOT}
    UNION ALL
    SELECT {_ROW}, NULL FROM meme_embeddings
    WHERE {_OF_GENERATION}
      AND written_xid >= :xmin AND written_xid < pg_snapshot_xmax(pg_current_snapshot())::text::bigint
    """
)

#: The pairs ``:ids`` / ``:fields`` (comma-separated; ``t.ord`` their 1-based place) whose row is in
#: the generation (a primary-key probe each).
_EXISTING_PAIRS = """
    FROM unnest(string_to_array(:ids, ',')::uuid[], string_to_array(:fields, ','))
        WITH ORDINALITY AS t(meme_id, field, ord)
    WHERE EXISTS (SELECT 1 FROM meme_embeddings e WHERE e.scope_id = :scope AND e.generation_id = :generation
                    AND e.meme_id = t.meme_id AND e.field = t.field)"""
_HEAD = "(SELECT active_generation_id FROM search_heads WHERE scope_id = :scope AND model = :leg)"

#: The places of the existing pairs, and the scope's head for the leg (place 0).
_EXISTING = text(f"SELECT 0, {_HEAD} UNION ALL SELECT t.ord, NULL {_EXISTING_PAIRS}")

#: :data:`_EXISTING` and :data:`_NEWS` in one statement (one snapshot): rows ``(place, head, xmin,
#: meme, field, digest, vector bytes)`` — place 0 the head and the snapshot's xmin, place > 0 an
#: existing pair, place NULL a row of the news.
_CHECK = text(
    f"""
    SELECT 0::bigint, {_HEAD}, {_SNAPSHOT}, NULL::uuid, NULL::varchar, NULL::varchar, NULL::bytea
    UNION ALL
    SELECT t.ord, NULL, NULL, NULL, NULL, NULL, NULL {_EXISTING_PAIRS}
    UNION ALL
    SELECT NULL, NULL, NULL, {_ROW} FROM meme_embeddings
    WHERE {_OF_GENERATION}
      AND written_xid >= :xmin AND written_xid < pg_snapshot_xmax(pg_current_snapshot())::text::bigint
    """
)


class _Generation:
    """One generation in memory: texts ``(field, digest)`` → row of the unit ``matrix``; rows
    ``(meme index, text index, field)`` appended, a meme's replaced rows marked dead (``row_alive``);
    ``xmin``: the rows of transactions before it are all here."""

    def __init__(self, dims: int, xmin: int) -> None:
        self.dims, self.xmin, self.loaded = dims, xmin, time.monotonic()
        self.lock = threading.Lock()
        self.reads = 0  # news reads applied so far (see take_news)
        self.texts: dict[tuple[str, str], int] = {}
        self.text_keys: list[tuple[str, str]] = []
        self.matrix = np.empty((64, dims), np.float32)
        self.memes: dict[UUID, int] = {}
        self.meme_ids: list[UUID] = []
        self.rows: dict[int, dict[str, int]] = {}  # meme index → {field: row index}
        self.row_meme = np.empty(256, np.int32)
        self.row_text = np.empty(256, np.int32)
        self.row_alive = np.empty(256, bool)
        self.row_field: list[str] = []
        self._groups: tuple[np.ndarray, np.ndarray, np.ndarray, list[str]] | None = None

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes + 9 * self.row_meme.size + 120 * (len(self.texts) + len(self.row_field)))

    def apply(self, rows: list, replace: bool) -> bool:
        """Take ``rows`` = [(meme, field, digest, vector bytes | None)]; with ``replace`` each meme in
        them gets exactly those rows (news: its others are gone). Returns whether any meme's rows
        changed. Under ``lock``."""
        fresh = [(f, d, b) for _m, f, d, b in rows if b is not None and (f, d) not in self.texts]
        if fresh:
            self._add_texts(fresh)
        found: dict[int, dict[str, int]] = {}
        for meme_id, field, digest, _b in rows:
            m = self.memes.get(meme_id)
            if m is None:
                m = self.memes[meme_id] = len(self.meme_ids)
                self.meme_ids.append(meme_id)
            t = self.texts.get((field, digest))
            found.setdefault(m, {})
            if t is not None:  # a member of a text no carrier brought is unreachable (as in PostgreSQL)
                found[m][field] = t
        changed = False
        for m, fields in found.items():
            held = self.rows.get(m, {})
            if {f: int(self.row_text[i]) for f, i in held.items()} == fields:
                continue
            changed = True
            self._groups = None
            if replace:
                self.row_alive[list(held.values())] = False
                held = {}
            else:
                self.row_alive[[held[f] for f in fields if f in held]] = False
            for field, t in fields.items():
                held[field] = self._append_row(m, t, field)
            self.rows[m] = held
        return changed

    def take_news(self, reads: int, news: list, xmin: int) -> bool:
        """Apply ``news`` read by a statement started when :attr:`reads` was ``reads`` and move
        :attr:`xmin` to its snapshot's ``xmin``; returns whether a meme's rows changed. When another
        read was applied since that statement started, its news are dropped and ``xmin`` stays: the
        other one's snapshot may be newer (a re-caption it saw must not be undone by older rows), and
        whatever this one saw that it did not comes again at the next read, its transaction being at
        or after ``xmin``."""
        with self.lock:
            if self.reads != reads:
                return False
            self.reads += 1
            changed = self.apply(news, replace=True) if news else False
            self.xmin = max(self.xmin, xmin)
            return changed

    def _append_row(self, m: int, t: int, field: str) -> int:
        i = len(self.row_field)
        if i == self.row_meme.size:  # grow by doubling; a search holds the old arrays
            self.row_meme, self.row_text, self.row_alive = (
                np.concatenate([a, np.empty_like(a)]) for a in (self.row_meme, self.row_text, self.row_alive)
            )
        self.row_meme[i], self.row_text[i], self.row_alive[i] = m, t, True
        self.row_field.append(field)
        self._groups = None
        return i

    def _add_texts(self, fresh: list[tuple[str, str, bytes]]) -> None:
        vectors = np.stack([np.frombuffer(b, dtype=">f4", offset=4) for _, _, b in fresh]).astype(np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors /= np.where(norms > 0, norms, 1.0)
        n = len(self.text_keys)
        if n + len(fresh) > self.matrix.shape[0]:  # grow by doubling; a search holds the old array
            grown = np.empty((max(2 * self.matrix.shape[0], n + len(fresh)), self.dims), np.float32)
            grown[:n] = self.matrix[:n]
            self.matrix = grown
        self.matrix[n : n + len(fresh)] = vectors
        for i, (f, d, _b) in enumerate(fresh):
            self.texts[(f, d)] = n + i
        self.text_keys.extend((f, d) for f, d, _b in fresh)

    def _by_meme(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """The live rows grouped by meme: ``(rows, memes, starts, fields)`` — ``rows`` the row indices,
        meme by meme; ``memes[j]`` the meme of the group starting at ``rows[starts[j]]``. Kept until
        the rows change. Under ``lock``."""
        if self._groups is None:
            n = len(self.row_field)
            live = np.flatnonzero(self.row_alive[:n])
            rows = live[np.argsort(self.row_meme[live], kind="stable")]
            memes = self.row_meme[rows]
            starts = np.flatnonzero(np.r_[True, memes[1:] != memes[:-1]]) if rows.size else np.empty(0, np.int64)
            self._groups = (rows, memes[starts], starts, self.row_field)
        return self._groups

    def rank(self, query: np.ndarray, count: int) -> list[tuple[UUID, str, float]]:
        """The ``count`` memes nearest to ``query``: ``[(meme, best field, cosine distance)]``,
        nearest first, equal distances by meme id (as PostgreSQL orders uuids); a meme's best field
        is its nearest, equal ones by field name."""
        with self.lock:
            matrix, n, meme_ids = self.matrix, len(self.text_keys), self.meme_ids
            rows, memes, starts, row_field = self._by_meme()
            row_text = self.row_text
        if n == 0 or rows.size == 0:
            return []
        q = np.asarray(query, dtype=np.float32)
        norm = float(np.linalg.norm(q))
        distance = (1.0 - matrix[:n] @ (q / norm if norm > 0 else q))[row_text[rows]]
        best = np.minimum.reduceat(distance, starts)
        k = min(count, best.size)
        top = np.argpartition(best, k - 1)[:k] if k < best.size else np.arange(best.size)
        group = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, rows.size]))
        wanted = np.zeros(starts.size, bool)
        wanted[top] = True
        fields: dict[int, int] = {}  # group → its best row (nearest, then field name)
        for j in np.flatnonzero(wanted[group] & (distance == best[group])).tolist():
            g = int(group[j])
            if g not in fields or row_field[rows[j]] < row_field[rows[fields[g]]]:
                fields[g] = j
        found = [(meme_ids[memes[g]], row_field[rows[j]], float(distance[j])) for g, j in fields.items()]
        found.sort(key=lambda hit: (hit[2], hit[0].int))
        return found


_cache: OrderedDict[tuple[str, UUID], _Generation] = OrderedDict()
_big: dict[tuple[str, UUID], float] = {}
_cache_lock = threading.Lock()
_load_locks: dict[tuple[str, UUID], threading.Lock] = {}


def nearest(
    session: Session, scope_id: str, leg: str, generation_id: UUID, dims: int, query: np.ndarray, limit: int, cap: int
) -> tuple[list[tuple[UUID, str, float]], UUID | None] | None:
    """The ``limit`` memes of the generation nearest to ``query`` ((dims,) float32) —
    ``[(meme, best field, cosine distance)]``, nearest first — and the scope's head for ``leg``;
    None when the generation has more than ``cap`` carrier rows (search it in PostgreSQL). One
    statement (which of the nearest memes still have their rows, and the news); a generation's first
    search loads it (one statement, ~2 KB per carrier row). Any session."""
    key = (scope_id, generation_id)
    now = time.monotonic()
    with _cache_lock:
        if now - _big.get(key, -BIG_RECHECK_SECONDS) < BIG_RECHECK_SECONDS:
            return None
        generation = _cache.get(key)
        if generation is not None:
            _cache.move_to_end(key)
    if generation is None or generation.dims != dims or now - generation.loaded > RELOAD_SECONDS:
        generation = _load(session, key, dims, cap, stale=generation)
        if generation is None:
            return None
        return _existing(session, scope_id, leg, generation_id, generation.rank(query, limit + SLACK), limit)
    # One statement checks the ranking and reads the news; only news that changed a meme's rows
    # (rare but while the scope is being imported) rank again and check again.
    ranked = generation.rank(query, limit + SLACK)
    with generation.lock:
        reads, xmin = generation.reads, generation.xmin
    rows = session.execute(_CHECK, {**_pairs(scope_id, leg, generation_id, ranked), "xmin": xmin}).all()
    head_row = next(r for r in rows if r[0] == 0)
    news = [(r[3], r[4], r[5], _bytes(r[6])) for r in rows if r[0] is None]
    changed = generation.take_news(reads, news, int(head_row[2]))
    if len(generation.text_keys) > cap:
        _too_big(key)
        return None
    if changed:
        return _existing(session, scope_id, leg, generation_id, generation.rank(query, limit + SLACK), limit)
    kept = sorted(r[0] for r in rows if r[0])[:limit]
    return [ranked[place - 1] for place in kept], head_row[1]


def _pairs(scope_id: str, leg: str, generation_id: UUID, ranked: list[tuple[UUID, str, float]]) -> dict:
    return {
        "scope": scope_id,
        "leg": leg,
        "generation": generation_id,
        "ids": ",".join(str(m) for m, _, _ in ranked),
        "fields": ",".join(f for _, f, _ in ranked),
    }


def _existing(
    session: Session, scope_id: str, leg: str, generation_id: UUID, ranked: list[tuple[UUID, str, float]], limit: int
) -> tuple[list[tuple[UUID, str, float]], UUID | None]:
    """The first ``limit`` of ``ranked`` whose (meme, field) row is in the generation, and the head."""
    rows = session.execute(_EXISTING, _pairs(scope_id, leg, generation_id, ranked)).all()
    head = next((h for place, h in rows if place == 0), None)
    kept = sorted(place for place, _ in rows if place)[:limit]
    return [ranked[place - 1] for place in kept], head


def forget(scope_id: str | None = None, generation_id: UUID | None = None) -> None:
    """Drop what is held of one generation, of a scope (``generation_id`` None) or of all (no arguments)."""

    def matches(key: tuple[str, UUID]) -> bool:
        return scope_id is None or (key[0] == scope_id and generation_id in (None, key[1]))

    with _cache_lock:
        for store in (_cache, _big, _load_locks):
            for key in [k for k in store if matches(k)]:
                del store[key]


def _too_big(key: tuple[str, UUID]) -> None:
    with _cache_lock:
        _cache.pop(key, None)
        _big[key] = time.monotonic()


def _load(
    session: Session, key: tuple[str, UUID], dims: int, cap: int, stale: _Generation | None
) -> _Generation | None:
    """Load the generation (one load at a time per generation: a burst's other searches wait for it
    and use it); None when it has more than ``cap`` carrier rows."""
    with _cache_lock:
        lock = _load_locks.setdefault(key, threading.Lock())
    with lock:
        with _cache_lock:
            current = _cache.get(key)
        if current is not None and current is not stale and current.dims == dims:
            _read_news(session, key, current)
            return current
        rows = session.execute(_LOAD, {"scope": key[0], "generation": key[1], "cap": cap}).all()
        head = next(r for r in rows if r[0] is None)
        if not head[5]:
            _too_big(key)
            return None
        generation = _Generation(dims, int(head[4]))
        generation.apply([(r[0], r[1], r[2], _bytes(r[3])) for r in rows if r[0] is not None], replace=False)
        with _cache_lock:
            _cache[key] = generation
            _cache.move_to_end(key)
            total = sum(g.nbytes for g in _cache.values())
            while total > CACHE_BYTES and len(_cache) > 1:
                old, dropped = _cache.popitem(last=False)
                _load_locks.pop(old, None)
                total -= dropped.nbytes
        return generation


def _read_news(session: Session, key: tuple[str, UUID], generation: _Generation) -> None:
    """Apply the rows written since ``generation.xmin`` and move it on to this statement's snapshot."""
    with generation.lock:
        reads, xmin = generation.reads, generation.xmin
    rows = session.execute(_NEWS, {"scope": key[0], "generation": key[1], "xmin": xmin}).all()
    head = next(r for r in rows if r[0] is None)
    generation.take_news(reads, [(r[0], r[1], r[2], _bytes(r[3])) for r in rows if r[0] is not None], int(head[4]))


def _bytes(value) -> bytes | None:
    return None if value is None else bytes(value)
