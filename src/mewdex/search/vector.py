"""Vector leg: nearest memes by cosine similarity in the scope's active generation of a leg,
taking each meme's best field (pgvector HNSW with iterative scans, so a small scope next to a
large one still gets its own k best)."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session

from mewdex.search.generations import current_generation
from mewdex.search.vector_index import distance_sql


@dataclass(frozen=True)
class VectorHit:
    meme_id: UUID
    similarity: float
    field: str


def search(session: Session, scope_id: str, leg: str, query: np.ndarray, limit: int) -> list[VectorHit]:
    """The ``limit`` memes nearest to ``query`` ((d,) float32, L2-normalised, embedded with the
    active generation's model), best field per meme.

    Returns [] when the scope has no generation for ``leg`` or its dimensions differ from the query's.
    """
    generation = current_generation(session, scope_id, leg)
    if generation is None or generation.dimensions != query.shape[0]:
        return []
    session.execute(
        text("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('hnsw.ef_search', :ef, true)"),
        {"ef": str(max(40, limit * 4))},
    )
    dist = distance_sql(generation.dimensions)
    rows = session.execute(
        text(
            f"""
            SELECT meme_id, field, 1 - distance AS similarity FROM (
                SELECT meme_id, field, {dist} AS distance
                FROM meme_embeddings
                WHERE model = :model AND dimensions = :dims
                  AND scope_id = :scope AND generation_id = :generation AND item_status = 'ready'
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
        },
    ).all()
    best: dict[UUID, VectorHit] = {}
    for meme_id, field, similarity in rows:
        if meme_id not in best:
            best[meme_id] = VectorHit(meme_id, float(similarity), field)
    return list(best.values())[:limit]
