"""HNSW indexes over half-precision copies of the vectors (issue 14: a million memes on one disk).

Every per-(model, dimensions) HNSW index of ``meme_embeddings`` and ``meme_visual_embeddings`` is
rebuilt over ``embedding::halfvec(N)`` with ``halfvec_cosine_ops`` (same name, predicate and build
parameters), and search compares half-precision copies (:func:`mewdex.search.vector_index.distance_sql`):
the graphs take half the bytes (at 100k memes 1.9 → ~1.0 GB), so more of them stays in memory. The
rows keep float32. Recall@10 against an exact float32 scan is measured by ``bench/scale.py``.

Rebuilding takes as long as building the graphs did (minutes per 100k memes, at the first start
after the upgrade).

Revision ID: 0016
Revises: 0015
"""

import re

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_HALF = (re.compile(r"::vector\((\d+)\)\) vector_cosine_ops"), r"::halfvec(\1)) halfvec_cosine_ops")
_FULL = (re.compile(r"::halfvec\((\d+)\)\) halfvec_cosine_ops"), r"::vector(\1)) vector_cosine_ops")


def _rebuild(rewrite: tuple[re.Pattern[str], str], max_dimensions: int) -> None:
    """Recreate each HNSW index of the vector tables whose definition ``rewrite`` changes (same name);
    one wider than ``max_dimensions`` is dropped (the models of remote connectors can be that wide)."""
    pattern, replacement = rewrite
    rows = (
        op.get_bind()
        .execute(
            sa.text(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
                " AND tablename IN ('meme_embeddings', 'meme_visual_embeddings') AND indexdef ILIKE '%USING hnsw%'"
            )
        )
        .all()
    )
    for name, definition in rows:
        match = pattern.search(definition)
        if match is None:
            continue
        op.execute(f'DROP INDEX "{name}"')
        if int(match.group(1)) <= max_dimensions:  # a float32 HNSW index takes ≤ 2,000: a wider one is only dropped
            op.execute(pattern.sub(replacement, definition))


#: pgvector's HNSW limits: 4,000 dimensions over halfvec, 2,000 over vector.
HALFVEC_MAX_DIMENSIONS, VECTOR_MAX_DIMENSIONS = 4000, 2000


def upgrade() -> None:
    _rebuild(_HALF, HALFVEC_MAX_DIMENSIONS)


def downgrade() -> None:
    _rebuild(_FULL, VECTOR_MAX_DIMENSIONS)
