"""Vector leg: nearest memes by cosine similarity in the scope's active generation of a leg,
taking each meme's best field (pgvector HNSW with iterative scans, so a small scope next to a
large one still gets its own k best)."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session

from mewdex.dto.search import SearchFilters
from mewdex.library.listing import exists_sql
from mewdex.search.generations import current_generation
from mewdex.search.vector_index import distance_sql

# pgvector iterative index scans: with a filter, HNSW keeps scanning until enough rows pass it.
_ITERATIVE_SCAN = text(
    "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('hnsw.ef_search', :ef, true)"
)


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
    generation instead of the active one (the eval gate measures a candidate).

    Returns [] when the scope has no generation for ``leg`` or its dimensions differ from the query's.
    """
    generation = generation or current_generation(session, scope_id, leg)
    if generation is None or generation.dimensions != query.shape[0]:
        return []
    session.execute(_ITERATIVE_SCAN, {"ef": str(max(40, limit * 4))})
    dist = distance_sql(generation.dimensions)
    where, filter_params = exists_sql(filters, "meme_embeddings.meme_id")
    rows = session.execute(
        text(
            f"""
            SELECT meme_id, field, 1 - distance AS similarity FROM (
                SELECT meme_id, field, {dist} AS distance
                FROM meme_embeddings
                WHERE model = :model AND dimensions = :dims
                  AND scope_id = :scope AND generation_id = :generation AND item_status = 'ready'{where}
                ORDER BY {dist}
                LIMIT :candidates
            ) nearest
            ORDER BY distance
            """
        ),
        {
            "query": query.astype(np.float32),
            "model": generation.model,
            "dims": generation.dimensions,
            "scope": scope_id,
            "generation": generation.id,
            "candidates": limit * 4,
            **filter_params,
        },
    ).all()
    best: dict[UUID, VectorHit] = {}
    for meme_id, field, similarity in rows:
        if meme_id not in best:
            best[meme_id] = VectorHit(meme_id, float(similarity), field)
    return list(best.values())[:limit]


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
    (HNSW with iterative scans), narrowed by ``filters`` inside the query; ``exclude``: one meme to skip."""
    dims = len(vector)
    session.execute(_ITERATIVE_SCAN, {"ef": str(max(40, limit * 4))})
    dist = distance_sql(dims)
    where, filter_params = exists_sql(filters, "meme_visual_embeddings.meme_id")
    rows = session.execute(
        text(
            f"""
            SELECT meme_id, 1 - distance FROM (
                SELECT meme_id, {dist} AS distance FROM meme_visual_embeddings
                WHERE model = :model AND dimensions = :dims AND scope_id = :scope AND preprocess_version = :pv
                  AND (CAST(:exclude AS uuid) IS NULL OR meme_id <> CAST(:exclude AS uuid)){where}
                ORDER BY {dist} LIMIT :limit
            ) nearest ORDER BY distance
            """
        ),
        {
            "query": np.asarray(vector, dtype=np.float32),
            "model": model,
            "dims": dims,
            "scope": scope_id,
            "pv": preprocess_version,
            "exclude": str(exclude) if exclude is not None else None,
            "limit": limit,
            **filter_params,
        },
    ).all()
    return [(m, float(c)) for m, c in rows]
