"""Vector rows: writing a meme's ``meme_embeddings`` rows into a search generation.

One row per (generation, meme, field) with the field's document, its sha256, the meme's metadata
hash, image hash and revision. A text many memes share (a folder's words, a label set) keeps its
vector in at most :data:`CARRIERS_PER_TEXT` rows of a generation; the others' ``embedding`` is
NULL and search gives them their carrier's distance (:mod:`mewdex.search.vector`).
"""

from __future__ import annotations

import hashlib
from typing import Any, cast
from uuid import UUID

from sqlalchemy import CursorResult, delete, text
from sqlalchemy.orm import Session

from mewdex.db.models import MemeEmbedding, SearchGeneration

#: At most this many rows of one (scope, generation, field, text) carry the text's vector; the rest
#: of the memes sharing the text (a folder's words, a generic name, a label set) keep ``embedding``
#: NULL and search gives them their carrier's distance. Identical vectors in bulk break an HNSW graph
#: (a group larger than ``ef_construction`` links only to itself and traps searches: at 10k memes
#: with one folder vector per folder, e5 recall@10 fell to 0.62). Migration 0015 holds the trigger
#: that hands a deleted carrier's vector to a member.
CARRIERS_PER_TEXT = 2


def write_vectors(
    session: Session, generation: SearchGeneration, meme: Any, metadata_hash: str, items: list[tuple[str, str, Any]]
) -> None:
    """Replace the meme's rows in ``generation`` by ``items`` = [(field, document, vector)]; a row
    stores its vector only while its text has fewer than :data:`CARRIERS_PER_TEXT` carriers in the
    generation (one statement finds them). ``meme`` needs ``scope_id``, ``id``, ``sha256``, ``revision``."""
    session.execute(
        delete(MemeEmbedding).where(
            MemeEmbedding.scope_id == meme.scope_id,
            MemeEmbedding.generation_id == generation.id,
            MemeEmbedding.meme_id == meme.id,
        )
    )
    hashed = [
        (field, document, vector, hashlib.sha256(document.encode()).hexdigest()) for field, document, vector in items
    ]
    carriers = _carriers(session, meme.scope_id, generation.id, [(f, h) for f, _, _, h in hashed])
    for field, document, vector, digest in hashed:
        carries = carriers.get((field, digest), 0) < CARRIERS_PER_TEXT
        session.add(
            MemeEmbedding(
                scope_id=meme.scope_id,
                generation_id=generation.id,
                meme_id=meme.id,
                field=field,
                model=generation.model,
                dimensions=generation.dimensions,
                embedding=vector if carries else None,
                semantic_document=document[:6000],
                semantic_document_hash=digest,
                metadata_hash=metadata_hash,
                image_sha256=meme.sha256,
                meme_revision=meme.revision,
                item_status="ready",
            )
        )


def share_vectors(session: Session, scope_id: str) -> int:
    """Keep the vector of each shared text in its first :data:`CARRIERS_PER_TEXT` rows (by meme id)
    of the scope's generations and clear it in the others (members); returns how many were cleared.
    For rows written without :func:`write_vectors` (bench/scale.py's clones)."""
    result = session.execute(
        text(
            """
            UPDATE meme_embeddings m SET embedding = NULL
            FROM (
                SELECT generation_id, meme_id, field,
                       row_number() OVER (PARTITION BY generation_id, field, semantic_document_hash
                                          ORDER BY meme_id) AS n
                FROM meme_embeddings WHERE scope_id = :scope AND embedding IS NOT NULL
            ) r
            WHERE r.n > :carriers AND m.scope_id = :scope AND m.generation_id = r.generation_id
              AND m.meme_id = r.meme_id AND m.field = r.field
            """
        ),
        {"scope": scope_id, "carriers": CARRIERS_PER_TEXT},
    )
    return cast(CursorResult[Any], result).rowcount


def _carriers(session: Session, scope_id: str, generation_id: UUID, keys: list[tuple[str, str]]) -> dict:
    """``{(field, text hash): rows carrying its vector}`` in the generation, for ``keys``."""
    if not keys:
        return {}
    rows = session.execute(
        text(
            """
            SELECT e.field, e.semantic_document_hash, count(*) FROM meme_embeddings e
            JOIN unnest(CAST(:fields AS varchar[]), CAST(:hashes AS varchar[])) AS k(field, digest)
              ON e.field = k.field AND left(e.semantic_document_hash, 16) = left(k.digest, 16)
             AND e.semantic_document_hash = k.digest
            WHERE e.scope_id = :scope AND e.generation_id = :generation AND e.embedding IS NOT NULL
            GROUP BY 1, 2
            """
        ),
        {
            "scope": scope_id,
            "generation": generation_id,
            "fields": [f for f, _ in keys],
            "hashes": [h for _, h in keys],
        },
    ).all()
    return {(field, digest): n for field, digest, n in rows}
