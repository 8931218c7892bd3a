"""Vector leg: nearest memes by cosine similarity in the scope's active generation of a leg,
taking each meme's best field: an exact scan for a scope of at most :data:`EXACT_SCAN_ROWS` vectors
(in this process without filters, :mod:`mewdex.search.exact_scan`; in PostgreSQL with them), pgvector
HNSW with iterative scans for a larger one."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session

from mewdex.dto.search import SearchFilters
from mewdex.library.listing import exists_sql
from mewdex.search import exact_scan
from mewdex.search.generations import GenerationRef, current_generation, forget_generation
from mewdex.search.vector_index import distance_sql, exact_distance_sql

# HNSW search settings (bench/scale.py measures recall@10 against an exact scan and latency for
# several values; see docs/search-at-scale.md): ``ef_search`` and candidate rows per wanted meme (a meme
# has one row per semantic field). Iterative scans (relaxed order) keep scanning the index until
# enough rows pass the scope/generation/filter conditions.
EF_SEARCH = 200
#: A scope (generation) with at most this many vectors is searched by an exact scan of its own rows,
#: never through the HNSW graph. The per-model graph holds every scope's vectors, and its iterative
#: scan of a small scope stops before the scope's rows when it has read ``hnsw.max_scan_tuples``
#: (20,000) tuples or ``work_mem`` of other scopes' rows, or when they are not reachable from where
#: the search entered: a 30-meme scope next to 1,500 nearer memes found 9 of its 30 with
#: ``max_scan_tuples`` at 1,000 (test_vector_scope.py: 400 and 100). The planner cannot tell (it estimates the
#: scope's rows at 1 and picks the HNSW index), so the statement decides by counting at most this
#: many of the scope's vectors first (an index-only range, well under a millisecond).
EXACT_SCAN_ROWS = 5000
#: Candidate rows per wanted meme, per leg (others: :data:`DEFAULT_ROWS_PER_MEME`). Rows beyond
#: ``ef_search`` make pgvector continue the scan iteratively: at 100k memes (float32 graphs) e5 with
#: 2 rows (200 ≤ 200) took 11.6 / 26.2 ms p50 / p95 at recall@10 0.997 counting ties, against 23.9 /
#: 38.2 ms and 1.000 with 3; USE needs 3 (0.554 with 2). Over the half-precision graphs (migration
#: 0016): e5 0.987 with 2 rows, 0.990 with 3; USE 0.728 with 3, 0.699 with 2. On clones spread between
#: sources (``bench/scale.py --clone-vectors mix``, 100k, by id): e5 0.994 with 2; USE 0.959 with 3, 0.934 with 2.
#: bench/quality.py is the same with either.
ROWS_PER_MEME: dict[str, int] = {"e5": 2, "use": 3}
DEFAULT_ROWS_PER_MEME = 3


def rows_per_meme(leg: str) -> int:
    """Candidate rows per wanted meme for ``leg``'s HNSW statement."""
    return ROWS_PER_MEME.get(leg, DEFAULT_ROWS_PER_MEME)


#: Member rows read per wanted meme (a meme is a member of at most one text per field, and a leg has
#: at most 5 fields).
MEMBER_ROWS_PER_MEME = 5


def _members_of(field: str, digest: str, filters_sql: str) -> str:
    """SQL condition on ``meme_embeddings m``: a member (no vector of its own) of the text ``field`` /
    ``digest`` (SQL expressions) in the statement's scope and generation, kept by ``filters_sql``;
    matched on the 64-bit text key of the members' partial index."""
    return (
        f"m.scope_id = :scope AND m.generation_id = :generation AND m.field = {field}"
        f" AND left(m.semantic_document_hash, 16) = left({digest}, 16)"
        f" AND m.embedding IS NULL AND m.item_status = 'ready'{filters_sql}"
    )


#: libpq ``options`` of the search legs' connections: the HNSW settings and custom plans (the best
#: plan of a vector or keyword statement depends on the scope's size; a generic plan of the vector
#: statement could not use the per-model partial index either). Set once per connection, so a leg
#: runs one statement.
SEARCH_CONNECTION_OPTIONS = (
    f"-c hnsw.iterative_scan=relaxed_order -c hnsw.ef_search={EF_SEARCH} -c plan_cache_mode=force_custom_plan"
)


def hnsw_settings(session: Session, ef_search: int) -> None:
    """The same settings for this transaction only (sessions of other pools: image search, duplicates)."""
    session.execute(
        text(
            "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('hnsw.ef_search', :ef, true),"
            " set_config('plan_cache_mode', 'force_custom_plan', true)"
        ),
        {"ef": str(ef_search)},
    )


#: The scope's vectors of the statement's generation (the exact scan's size probe).
_CARRIERS = "meme_embeddings WHERE scope_id = :scope AND generation_id = :generation AND embedding IS NOT NULL"


def exact_or_hnsw(select: str, exact: str, dist: str, rows_of_scope: str, limit: str = "candidates") -> str:
    """SQL: ``select`` (its WHERE narrows one scope) ordered by distance, ``LIMIT :<limit>``; by the
    float32 ``exact`` distance (no index matches it: an exact scan of the scope's rows) when
    ``SELECT 1 FROM <rows_of_scope>`` has at most ``:exact_rows`` (:data:`EXACT_SCAN_ROWS`) rows, else
    by the half-precision ``dist`` of the HNSW index. Both branches are gated by one probe that reads
    at most ``:exact_rows + 1`` index entries; only one of them runs."""
    small = f"(SELECT count(*) <= :exact_rows FROM (SELECT 1 FROM {rows_of_scope} LIMIT :exact_rows + 1) probe)"
    return f"""
        WITH small AS MATERIALIZED (SELECT {small} AS exact)
        (SELECT * FROM ({select} AND (SELECT exact FROM small) ORDER BY {exact} LIMIT :{limit}) exact_scan)
        UNION ALL
        (SELECT * FROM ({select} AND NOT (SELECT exact FROM small) ORDER BY {dist} LIMIT :{limit}) hnsw_scan)
    """


@dataclass(frozen=True)
class VectorHit:
    meme_id: UUID
    similarity: float
    field: str


def search(
    session: Session,
    scope_id: str,
    leg: str,
    query: np.ndarray,
    limit: int,
    filters: SearchFilters | None = None,
    *,
    generation=None,
) -> list[VectorHit]:
    """The ``limit`` memes nearest to ``query`` ((d,) float32, L2-normalised, embedded with the
    active generation's model), best field per meme; ``filters`` narrow the memes inside the HNSW
    query (the iterative scan keeps going until enough rows pass them). ``generation``: search that
    generation instead of the active one (the eval gate measures a candidate). Any session (sets the
    HNSW settings for its transaction); the search service calls :func:`search_generation` instead.

    Returns [] when the scope has no generation for ``leg`` or its dimensions differ from the query's.
    """
    generation = generation or current_generation(session, scope_id, leg)
    if generation is None or generation.dimensions != query.shape[0]:
        return []
    hnsw_settings(session, max(EF_SEARCH, limit))
    hits, _ = search_generation(session, scope_id, leg, GenerationRef.of(generation), query, limit, filters)
    return hits


def search_generation(
    session: Session,
    scope_id: str,
    leg: str,
    generation: GenerationRef,
    query: np.ndarray,
    limit: int,
    filters: SearchFilters | None = None,
) -> tuple[list[VectorHit], UUID | None]:
    """One statement: the ``limit`` memes of ``generation`` nearest to ``query`` (best field per meme,
    from ``limit ×`` :func:`rows_per_meme` nearest rows) and the generation the scope's head for ``leg``
    points at now (the caller's cached ``generation`` is stale when they differ: the process's cached
    head is then forgotten, :func:`~mewdex.search.generations.forget_generation`). Without filters a
    small generation is ranked in this process (:func:`mewdex.search.exact_scan.nearest`: two short
    statements). HNSW settings come from the connection (:data:`SEARCH_CONNECTION_OPTIONS`) or
    :func:`hnsw_settings`."""
    dims = generation.dimensions
    if dims != query.shape[0]:
        return [], None
    dist, exact = distance_sql(dims), exact_distance_sql(dims)  # found in half precision, ranked in full
    keeps, filter_params = exists_sql(filters, "meme_embeddings.meme_id")
    member_keeps, _ = exists_sql(filters, "m.meme_id")
    # With filters, a carrier that fails them still leads to its text's members that pass: it enters
    # `nearest` when it or one of them passes, and is itself a result only when it passes.
    passes = keeps.removeprefix(" AND ") if keeps else "true"
    where = (
        f" AND ({passes} OR EXISTS (SELECT 1 FROM meme_embeddings m WHERE"
        f" {_members_of('meme_embeddings.field', 'meme_embeddings.semantic_document_hash', member_keeps)}))"
        if keeps
        else ""
    )
    if not keeps:  # a small generation is ranked in this process (mewdex.search.exact_scan)
        found = exact_scan.nearest(session, scope_id, leg, generation.id, dims, query, limit, EXACT_SCAN_ROWS)
        if found is not None:
            ranked, head = found
            if head != generation.id:
                forget_generation(scope_id, leg)
            return [VectorHit(meme_id, 1 - distance, field) for meme_id, field, distance in ranked], head
    # The nearest carrier rows from the HNSW graph, plus the members sharing their texts (NULL
    # embedding, the carrier's distance; see vector_rows.write_vectors): each text's members looked
    # up once, nearest texts first, at most MEMBER_ROWS_PER_MEME × limit member rows (the loop stops
    # there: a big folder's members tie, and only the first `limit` memes are wanted; a meme can be
    # a member of several texts), then the best field per meme.
    nearest = f"""
        SELECT meme_id, field, semantic_document_hash AS digest, {exact} AS distance, {passes} AS passes
        FROM meme_embeddings
        WHERE model = :model AND dimensions = :dims AND scope_id = :scope AND generation_id = :generation
          AND item_status = 'ready' AND embedding IS NOT NULL{where}"""
    rows = session.execute(
        text(
            f"""
            WITH nearest AS MATERIALIZED ({exact_or_hnsw(nearest, exact, dist, _CARRIERS)})
            SELECT NULL::uuid, NULL::varchar, NULL::float8,
                   (SELECT active_generation_id FROM search_heads WHERE scope_id = :scope AND model = :leg)
            UNION ALL
            (SELECT meme_id, field, distance, NULL::uuid FROM (
                SELECT DISTINCT ON (meme_id) meme_id, field, distance FROM (
                    SELECT meme_id, field, distance FROM nearest WHERE passes
                    UNION ALL
                    (SELECT shared.meme_id, t.field, t.distance
                     FROM (SELECT field, digest, min(distance) AS distance FROM nearest
                           GROUP BY field, digest ORDER BY 3) t
                     CROSS JOIN LATERAL (
                        SELECT m.meme_id FROM meme_embeddings m
                        WHERE {_members_of("t.field", "t.digest", member_keeps)}
                        LIMIT :limit
                     ) shared
                     ORDER BY t.distance LIMIT :member_rows)
                ) found ORDER BY meme_id, distance, field
            ) best ORDER BY distance, meme_id LIMIT :limit)
            """
        ),
        {
            "query": query.astype(np.float32),
            "model": generation.model,
            "dims": dims,
            "scope": scope_id,
            "leg": leg,
            "generation": generation.id,
            "candidates": limit * rows_per_meme(leg),
            "member_rows": limit * MEMBER_ROWS_PER_MEME,
            "limit": limit,
            "exact_rows": EXACT_SCAN_ROWS,
            **filter_params,
        },
    ).all()
    # One row is the head (meme id NULL); the others are the memes, nearest first, best field each.
    head = next((r[3] for r in rows if r[0] is None), None)
    if head != generation.id:  # the head moved (or another generation was searched): read it afresh next time
        forget_generation(scope_id, leg)
    return [
        VectorHit(meme_id, 1 - distance, field) for meme_id, field, distance, _ in rows if meme_id is not None
    ], head


def meme_vector(
    session: Session, scope_id: str, generation: GenerationRef, meme_id: UUID, fields: tuple[str, ...]
) -> np.ndarray | None:
    """The meme's stored vector in ``generation`` for the first of ``fields`` it has (a member row's
    text is embedded once, on its carrier: that vector), or None. One statement."""
    row = session.execute(
        text(
            """
            SELECT coalesce(own.embedding, (
                       SELECT c.embedding FROM meme_embeddings c
                       WHERE c.scope_id = own.scope_id AND c.generation_id = own.generation_id
                         AND c.field = own.field AND c.semantic_document_hash = own.semantic_document_hash
                         AND c.embedding IS NOT NULL
                       LIMIT 1))
            FROM meme_embeddings own
            WHERE own.scope_id = :scope AND own.generation_id = :generation AND own.meme_id = :meme
              AND own.field = ANY(CAST(:fields AS varchar[]))
            ORDER BY array_position(CAST(:fields AS varchar[]), own.field::varchar)
            LIMIT 1
            """
        ),
        {"scope": scope_id, "generation": generation.id, "meme": meme_id, "fields": list(fields)},
    ).first()
    if row is None or row[0] is None:
        return None
    value = row[0]
    return np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value, dtype=np.float32)


def nearest_images(
    session: Session,
    scope_id: str,
    vector: np.ndarray,
    limit: int,
    *,
    model: str,
    preprocess_version: str,
    exclude: UUID | None = None,
    filters: SearchFilters | None = None,
) -> list[tuple[UUID, float]]:
    """``[(meme_id, cosine)]`` of the scope's memes whose visual embedding is nearest to ``vector``
    (an exact scan of a scope of at most :data:`EXACT_SCAN_ROWS` images, else HNSW with iterative
    scans), narrowed by ``filters`` inside the query; ``exclude``: one meme to skip."""
    dims = len(vector)
    candidates = 2 * limit  # slack for the half-precision order: the float32 one picks the best
    hnsw_settings(session, max(EF_SEARCH, candidates))
    dist, exact = distance_sql(dims), exact_distance_sql(dims)  # found in half precision, ranked in full
    where, filter_params = exists_sql(filters, "meme_visual_embeddings.meme_id")
    nearest = f"""
        SELECT meme_id, {exact} AS distance FROM meme_visual_embeddings
        WHERE model = :model AND dimensions = :dims AND scope_id = :scope AND preprocess_version = :pv
          AND (CAST(:exclude AS uuid) IS NULL OR meme_id <> CAST(:exclude AS uuid)){where}"""
    scope_images = "meme_visual_embeddings WHERE scope_id = :scope AND model = :model AND preprocess_version = :pv"
    rows = session.execute(
        text(
            f"""
            SELECT meme_id, 1 - distance FROM ({exact_or_hnsw(nearest, exact, dist, scope_images)}) nearest
            ORDER BY distance LIMIT :limit
            """
        ),
        {
            "query": np.asarray(vector, dtype=np.float32),
            "model": model,
            "dims": dims,
            "scope": scope_id,
            "pv": preprocess_version,
            "exclude": str(exclude) if exclude is not None else None,
            "candidates": candidates,
            "limit": limit,
            "exact_rows": EXACT_SCAN_ROWS,
            **filter_params,
        },
    ).all()
    return [(m, float(c)) for m, c in rows]
