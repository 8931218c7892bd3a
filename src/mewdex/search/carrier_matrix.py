"""The carrier vectors of a small scope's generation, kept in the process: the vector legs' exact scan
ranked by numpy over a cached matrix instead of PostgreSQL computing every row's distance.

A generation's *carriers* are its rows with a vector (``embedding IS NOT NULL``; members share a
carrier's vector, :mod:`mewdex.search.vector_rows`). For a scope of at most
:data:`~mewdex.search.vector.EXACT_SCAN_ROWS` carriers a vector leg scans them all; in PostgreSQL that
costs ~2.5 µs a row (wide heap rows, one float32 cast and distance each: 2–8 ms per leg), a
dot product over the same matrix in numpy ~0.2 ms. The cache holds, per (scope, generation), every
carrier row's identity and, for the rows a leg searches (``item_status = 'ready'``, the generation's
model and dimensions), ``meme_id``, ``field``, ``semantic_document_hash`` and the float32 vector.

**Never stale.** A :class:`CarrierMatrix` carries the *fingerprint* of the carrier set it was read
from: the table's file (``pg_relation_filenode``, :data:`FILENODE`), the number of carrier rows and
the XOR of a 64-bit hash of each row version's identity, ``hashtidextended(ctid, xmin)``
(:data:`ROW_HASH`). The leg's one statement computes the same
fingerprint over the carriers its own snapshot sees and uses the candidates ranked from the matrix
only when the two are equal; otherwise Python reloads the matrix and runs the statement again.
The fingerprint is a function of the set of visible row versions alone: an insert adds a version, a
delete removes one, an update (a carrier becoming a member, a re-embedding) removes one and adds one
with a new ``ctid``, and within one file a ``(ctid, xmin)`` pair never names two versions (a line
pointer is reused only after its old version is dead to every snapshot, by a later transaction:
another ``xmin``). So the order in which concurrent transactions commit does not matter — unlike
``max(xmin)`` or a counter, nothing depends on which xid is larger, only on which versions the
snapshot sees — and two different sets collide only when their counts and the XOR of their hashes
both agree (2⁻⁶⁴ for unrelated changes). Freezing keeps the raw ``xmin``. A table rewrite
(``VACUUM FULL``, ``CLUSTER``, a rewriting ``ALTER TABLE``) packs the live versions into a new file
with their ``xmin``: a row then takes the ``(ctid, xmin)`` a deleted or moved row of the same
transaction had, so the file is part of the fingerprint and a reload after a rewrite reads every row
(none of the old matrix's). The hash cannot miss a row a statement's snapshot sees: a meme processed
a moment ago is found, a deleted one is not returned (a trashed one keeps its rows: the search
service's live rule drops it, as for the SQL path).

**Reloads are incremental** (one statement): PostgreSQL returns the hashes of all the carriers and
full rows only for those whose hash the old matrix does not hold; under uploads the set changes every
second and a full reload of a 2,400 × 512 scope cost ~10× an exact scan (docs/search-at-scale.md).

Per process (a forked child starts empty: the cache is keyed by pid), thread-safe (one reload per key
at a time; a matrix is immutable once made), bounded by ``MEWDEX_SEARCH_VECTOR_CACHE_MB`` (least
recently used first; 0 turns the cache off).
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from uuid import UUID

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session

from mewdex import telemetry
from mewdex.config import get_settings

#: SQL: a 64-bit hash of a ``meme_embeddings`` row version's identity (its place and the transaction
#: that wrote it), seeded by ``xmin``.
ROW_HASH = "hashtidextended(ctid, xmin::text::bigint)"
#: SQL: the file ``meme_embeddings``' rows are in now (a new one after every rewrite of the table).
FILENODE = "pg_relation_filenode('meme_embeddings'::regclass)::bigint"
#: SQL over a ``meme_embeddings`` WHERE clause of the carriers: ``fresh``, whether the statement's
#: snapshot sees the set a matrix of fingerprint ``(:fp_rows, :fp_xor)`` was read from.
FINGERPRINT_SQL = (
    f"SELECT {FILENODE} = :fp_filenode AND count(*) = :fp_rows AND coalesce(bit_xor({{hash}}), 0) = :fp_xor"
    " AS fresh FROM {carriers}"
)
#: Seconds "this generation has more carriers than the exact scan takes" (or "its matrix is larger
#: than the whole cache") is trusted: the SQL path serves it meanwhile (correctly: it decides by its
#: own probe), then one probe (or one read of the matrix) looks again.
LARGE_RECHECK_SECONDS = 10.0
#: A new matrix is not admitted when making room for it would evict a matrix searched within this
#: many seconds: the scopes searched now do not fit the cache together, and letting them evict each
#: other would make every search a full read (~80 ms for 2,400 × 512 against ~5 ms for the SQL scan).
#: The refused scope is served by the SQL scan and tried again after as long.
HOT_SECONDS = 60.0
#: A matrix found stale (its carriers changed) is read again at most once this many seconds after its
#: last read; meanwhile the SQL scan serves its scope. Under a steady stream of writes (imports being
#: processed change the set several times a second) a read per change and leg cost more than the
#: scans it saved; at most one read a second keeps the cost bounded, and searches between a read and
#: the next change still take the matrix.
RELOAD_SECONDS = 1.0
#: Bytes counted per row beside its vector: the ids and digests as Python strings, hashes, norms.
ROW_OVERHEAD_BYTES = 300


@dataclass(frozen=True)
class CarrierMatrix:
    """The carriers of one (scope, generation) as read in one snapshot.

    ``filenode``: the table's file they were read from (:data:`FILENODE`); ``rows``: every carrier
    row (the exact-scan probe's count); ``fingerprint``: XOR of ``hashes`` ((rows,) int64,
    :data:`ROW_HASH` of each). ``searchable`` ((rows,) bool): a leg searches the row
    (ready, the generation's model and dimensions); ``meme_ids``/``fields``/``digests`` are the
    searchable rows', aligned with ``vectors`` ((n, d) float32) and ``squared_norms`` ((n,) float64).
    """

    filenode: int
    rows: int
    fingerprint: int
    hashes: np.ndarray
    searchable: np.ndarray
    meme_ids: tuple[str, ...]
    fields: tuple[str, ...]
    digests: tuple[str, ...]
    vectors: np.ndarray
    squared_norms: np.ndarray
    loaded_at: float = 0.0  # monotonic seconds of the read

    @property
    def nbytes(self) -> int:
        return self.vectors.nbytes + self.rows * ROW_OVERHEAD_BYTES

    def nearest(self, query: np.ndarray, k: int) -> list[tuple[str, str, str, float]]:
        """``[(meme_id, field, digest, cosine distance)]``: the ``k`` searchable rows nearest to
        ``query`` ((d,) float32), nearest first (ties by meme id, field). The distance is pgvector's
        ``<=>`` over float32 vectors: ``1 - a·b / sqrt(|a|² |b|²)`` clipped to [0, 2], NaN for a zero
        vector (sorted last, as PostgreSQL does)."""
        n = len(self.meme_ids)
        if n == 0 or k <= 0:
            return []
        q = np.asarray(query, dtype=np.float32)
        # einsum's own loop, not BLAS: one thread whatever the process's BLAS pool (OpenBLAS's threads
        # spin-wait beside the other legs: 2,400 × 512 took 8 ms with 2 of them on 2 busy cores, 0.3 here)
        dots = np.einsum("ij,j->i", self.vectors, q).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            similarity = np.clip(dots / np.sqrt(self.squared_norms * float(np.dot(q, q))), -1.0, 1.0)
        distances = 1.0 - similarity
        chosen = np.arange(n) if k >= n else np.argpartition(distances, k - 1)[:k]
        # lexsort: the last key first; NaN sorts last, as in PostgreSQL's ascending order
        ids, fields = np.asarray(self.meme_ids, dtype=object), np.asarray(self.fields, dtype=object)
        order = chosen[np.lexsort((fields[chosen], ids[chosen], distances[chosen]))]
        return [(self.meme_ids[i], self.fields[i], self.digests[i], float(distances[i])) for i in order]


class _Large:
    """Marker: the generation had more carriers than the exact scan takes, or a matrix larger than the
    whole cache or refused room (:data:`HOT_SECONDS`), at ``seen`` (monotonic); trusted ``hold`` seconds."""

    __slots__ = ("hold", "seen")

    def __init__(self, seen: float, hold: float = LARGE_RECHECK_SECONDS) -> None:
        self.seen = seen
        self.hold = hold

    def holds(self) -> bool:
        return time.monotonic() - self.seen < self.hold


class _State:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.entries: OrderedDict[tuple[str, UUID], CarrierMatrix | _Large] = OrderedDict()
        self.key_locks: dict[tuple[str, UUID], threading.Lock] = {}
        self.used: dict[tuple[str, UUID], float] = {}  # a cached matrix's last search (monotonic)
        self.stale: set[tuple[str, UUID]] = set()  # cached matrices a statement found stale
        self.nbytes = 0


_state = _State()
_state_lock = threading.Lock()


def _current() -> _State:
    """This process's cache (a forked child drops its parent's, locks included)."""
    global _state
    if _state.pid != os.getpid():
        with _state_lock:
            if _state.pid != os.getpid():
                _state = _State()
    return _state


def budget_bytes() -> int:
    """The cache's bound in bytes (``MEWDEX_SEARCH_VECTOR_CACHE_MB``; 0: no cache)."""
    return get_settings().search_vector_cache_mb * 1024 * 1024


def clear() -> None:
    """Forget every matrix of this process."""
    state = _current()
    with state.lock:
        state.entries.clear()
        state.used.clear()
        state.stale.clear()
        state.nbytes = 0


def cached(scope_id: str, generation_id: UUID) -> CarrierMatrix | None:
    """The matrix cached for (scope, generation), if any."""
    entry = _current().entries.get((scope_id, generation_id))
    return entry if isinstance(entry, CarrierMatrix) else None


def matrix(
    session: Session,
    scope_id: str,
    generation_id: UUID,
    model: str,
    dimensions: int,
    max_rows: int,
    stale: CarrierMatrix | None = None,
) -> CarrierMatrix | None:
    """The carriers of (scope, generation) for an exact scan: the cached matrix, or — when there is
    none or it is ``stale`` (a statement's fingerprint differed) — one read now (incrementally from
    the cached one: one statement). None when the generation has more than ``max_rows`` carriers or
    its matrix is larger than the whole cache (either remembered for :data:`LARGE_RECHECK_SECONDS`),
    when the cached matrix was found stale within :data:`RELOAD_SECONDS` of its read (read again
    after that), or the cache is off."""
    budget = budget_bytes()
    if budget <= 0:
        return None
    key = (scope_id, generation_id)
    state = _current()
    with state.lock:
        entry = state.entries.get(key)
        if isinstance(entry, CarrierMatrix):
            if entry is stale:
                state.stale.add(key)
            if key not in state.stale:
                state.entries.move_to_end(key)
                state.used[key] = time.monotonic()
                return entry
            if time.monotonic() - entry.loaded_at < RELOAD_SECONDS:
                telemetry.SEARCH_CARRIER_CACHE.labels(outcome="deferred").inc()
                return None
            stale = entry
        if isinstance(entry, _Large) and entry.holds():
            telemetry.SEARCH_CARRIER_CACHE.labels(outcome="large").inc()
            return None
        key_lock = state.key_locks.setdefault(key, threading.Lock())
    with key_lock:  # one reload per key; the others wait for it and take its matrix
        with state.lock:
            entry = state.entries.get(key)
        if isinstance(entry, CarrierMatrix) and entry is not stale and key not in state.stale:
            return entry  # another thread (re)loaded it meanwhile (the statement checks it again)
        if isinstance(entry, _Large) and entry.holds():
            return None
        base = entry if isinstance(entry, CarrierMatrix) else stale
        loaded = _load(session, scope_id, generation_id, model, dimensions, max_rows, base)
        telemetry.SEARCH_CARRIER_CACHE.labels(outcome="reload" if loaded is not None else "large").inc()
        _put(state, key, loaded if loaded is not None else _Large(time.monotonic()), budget)
    return loaded  # a matrix not admitted still answers this search (it was read in its snapshot)


def _put(state: _State, key: tuple[str, UUID], entry: CarrierMatrix | _Large, budget: int) -> bool:
    """Cache ``entry`` for ``key`` (evicting the least recently searched matrices); False when a matrix
    was not admitted: larger than the whole cache, or its room would evict a matrix searched within
    :data:`HOT_SECONDS` while ``key`` had none (a reload of a cached key always takes its place)."""
    size = entry.nbytes if isinstance(entry, CarrierMatrix) else 0
    now = time.monotonic()
    with state.lock:
        old = state.entries.pop(key, None)
        if isinstance(old, CarrierMatrix):
            state.nbytes -= old.nbytes
        admitted = True
        if size > budget:  # larger than the whole cache: used once, then the SQL scan serves it as a
            entry, size, admitted = _Large(now), 0, False  # large one (else every search would read it all)
        elif (
            isinstance(entry, CarrierMatrix)
            and not isinstance(old, CarrierMatrix)
            and _evicts_hot(state, size, budget, now)
        ):
            entry, size, admitted = _Large(now, HOT_SECONDS), 0, False
        state.entries[key] = entry
        state.stale.discard(key)
        state.nbytes += size
        if admitted and isinstance(entry, CarrierMatrix):
            state.used[key] = now
        else:
            state.used.pop(key, None)
        while state.nbytes > budget:
            gone, evicted = state.entries.popitem(last=False)
            state.key_locks.pop(gone, None)  # at worst two threads reload it at once later
            state.used.pop(gone, None)
            state.stale.discard(gone)
            if isinstance(evicted, CarrierMatrix):
                state.nbytes -= evicted.nbytes
    return admitted


def _evicts_hot(state: _State, size: int, budget: int, now: float) -> bool:
    """Whether room for ``size`` more bytes would evict a matrix searched within :data:`HOT_SECONDS`
    (under ``state.lock``)."""
    need = state.nbytes + size - budget
    for gone, evicted in state.entries.items():  # least recently searched first
        if need <= 0:
            return False
        if isinstance(evicted, CarrierMatrix):
            if now - state.used.get(gone, float("-inf")) < HOT_SECONDS:
                return True
            need -= evicted.nbytes
    return False


def _load(
    session: Session,
    scope_id: str,
    generation_id: UUID,
    model: str,
    dimensions: int,
    max_rows: int,
    base: CarrierMatrix | None,
) -> CarrierMatrix | None:
    """One statement: the hashes of every carrier (one ``bytea`` of big-endian int64) and the rows
    ``base`` does not hold (all of them when the table's file is not ``base``'s: a hash names another
    row after a rewrite), vectors in pgvector's binary form (``vector_send``: a 4-byte header, then
    big-endian float32); None when there are more than ``max_rows`` carriers."""
    carriers = "meme_embeddings WHERE scope_id = :scope AND generation_id = :generation AND embedding IS NOT NULL"
    known = ",".join(map(str, base.hashes.tolist())) if base is not None else ""
    rows = session.execute(
        text(
            f"""
            WITH small AS MATERIALIZED (
                SELECT count(*) <= :max_rows AS exact, {FILENODE} IS NOT DISTINCT FROM :filenode AS same_file
                FROM (SELECT 1 FROM {carriers} LIMIT :max_rows + 1) probe)
            SELECT NULL::bigint, NULL::uuid, NULL::varchar, NULL::varchar, (SELECT exact FROM small),
                   (SELECT string_agg(int8send({ROW_HASH}), ''::bytea) FROM {carriers} AND (SELECT exact FROM small)),
                   {FILENODE}
            UNION ALL
            SELECT {ROW_HASH}, meme_id, field, semantic_document_hash,
                   item_status = 'ready' AND model = :model AND dimensions = :dims,
                   CASE WHEN item_status = 'ready' AND model = :model AND dimensions = :dims
                        THEN vector_send(embedding) END,
                   NULL::bigint
            FROM {carriers} AND (SELECT exact FROM small)
              AND (NOT (SELECT same_file FROM small)
                   OR {ROW_HASH} NOT IN (SELECT unnest(CAST(string_to_array(:known, ',') AS bigint[]))))
            """
        ),
        {
            "scope": scope_id,
            "generation": generation_id,
            "model": model,
            "dims": dimensions,
            "max_rows": max_rows,
            "known": known,
            "filenode": base.filenode if base is not None else None,
        },
    ).all()
    head = next(r for r in rows if r[0] is None)
    if not head[4]:
        return None
    if base is not None and head[6] != base.filenode:  # rewritten: every row was read
        base = None
    hashes = np.frombuffer(head[5] or b"", dtype=">i8").astype(np.int64)
    if len(np.unique(hashes)) != len(hashes):  # two rows of one hash (2⁻⁶⁴): no fingerprint can tell them apart
        return None
    new = {r[0]: r for r in rows if r[0] is not None}
    old: dict[int, int] = {}  # hash → index among base's searchable rows
    if base is not None:
        for i, h in enumerate(base.hashes[base.searchable].tolist()):
            old[h] = i
    searchable = np.zeros(len(hashes), dtype=bool)
    meme_ids: list[str] = []
    fields: list[str] = []
    digests: list[str] = []
    take: list[int] = []  # per searchable row: an index into base.vectors, or -1 - index into blobs
    blobs: list[bytes] = []
    base_other = set(base.hashes[~base.searchable].tolist()) if base is not None else set()
    for j, h in enumerate(hashes.tolist()):
        row = new.get(h)
        if row is not None:
            if not row[4]:
                continue
            take.append(-1 - len(blobs))
            blobs.append(row[5])
            meme_ids.append(str(row[1]))
            fields.append(row[2])
            digests.append(row[3])
        elif h in old:
            assert base is not None
            i = old[h]
            take.append(i)
            meme_ids.append(base.meme_ids[i])
            fields.append(base.fields[i])
            digests.append(base.digests[i])
        elif h in base_other:
            continue  # a carrier the legs do not search (not ready), unchanged
        else:  # a hash the statement counted as known that base does not hold: cannot happen; read all
            return _load(session, scope_id, generation_id, model, dimensions, max_rows, None)
        searchable[j] = True
    vectors = np.empty((len(take), dimensions), dtype=np.float32)
    if blobs:
        fresh = np.frombuffer(b"".join(blobs), dtype=">f4").reshape(len(blobs), dimensions + 1)[:, 1:]
        picks = np.asarray(take)
        at_new = picks < 0
        vectors[at_new] = fresh[-1 - picks[at_new]]
        if base is not None and (~at_new).any():
            vectors[~at_new] = base.vectors[picks[~at_new]]
    elif take:
        assert base is not None
        vectors[:] = base.vectors[np.asarray(take)]
    vectors.setflags(write=False)
    return CarrierMatrix(
        filenode=head[6],
        rows=len(hashes),
        fingerprint=int(np.bitwise_xor.reduce(hashes)) if len(hashes) else 0,
        hashes=hashes,
        searchable=searchable,
        meme_ids=tuple(meme_ids),
        fields=tuple(fields),
        digests=tuple(digests),
        vectors=vectors,
        squared_norms=np.einsum("ij,ij->i", vectors, vectors).astype(np.float64),
        loaded_at=time.monotonic(),
    )
