"""Per-(model, dimensions) partial HNSW expression indexes over the dimensionless vector columns.

The indexes hold half-precision copies (``embedding::halfvec(N)``, pgvector's ``halfvec``): half the
bytes of a float32 graph, so twice the graph stays in memory (migration 0016; bench/scale.py at 100k
measures recall@10 against an exact float32 scan, docs/search-at-scale.md). The rows keep float32.
"""

from __future__ import annotations

import hashlib
import re

from sqlalchemy import text
from sqlalchemy.orm import Session

#: HNSW build parameters (pgvector's defaults are m = 16, ef_construction = 64). Measured with
#: bench/scale.py at 10k memes (docs/search-at-scale.md): the USE leg's queries lie far from its
#: passages (top-10 cosine ≈ 0.42, e5 ≈ 0.86) and its recall@10 stayed at 0.55–0.68 for any
#: ef_search with the defaults; m = 32, ef_construction = 200 took it to 0.94 (m = 48 / 300: 0.95, at
#: twice the build time). Migration 0012 rebuilds existing indexes with these.
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 200
HNSW_WITH = f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})"


#: The tables :func:`ensure_index` is called for (search generations, near-duplicates, feedback): the
#: only indexes mewdex makes outside its migrations (restore recognises them: :func:`made_index`).
INDEXED_TABLES = ("meme_embeddings", "meme_visual_embeddings", "search_feedback_queries")
_MADE_NAME = re.compile(r"ix_(\w+)_hnsw_[0-9a-f]{10}_(\d{1,5})")
#: ``pg_get_indexdef`` writes the predicate ``(model)::text = …`` over a varchar column (the embedding
#: tables) and ``model = …`` over a text one (``search_feedback_queries``).
_MADE_PREDICATE = re.compile(
    r" WHERE \(\((?:\(model\)::text|model) = '((?:[^']|'')*)'::text\) AND \(dimensions = (\d{1,5})\)\)$"
)


def index_name(table: str, model: str, dimensions: int) -> str:
    digest = hashlib.sha256(model.encode()).hexdigest()[:10]
    return f"ix_{table}_hnsw_{digest}_{dimensions}"


def ensure_index(session: Session, table: str, model: str, dimensions: int) -> None:
    """Create (if missing) ``USING hnsw ((embedding::halfvec(N)) halfvec_cosine_ops) WITH (…) WHERE model = '…'``.

    Queries must use the same expression and predicate (see :func:`distance_sql`) to use it. An index
    of that name over float32 vectors (made by a process of a version before migration 0016, e.g.
    during a rolling upgrade) is replaced: search could not use it.
    """
    name = index_name(table, model, dimensions)
    definition = session.execute(
        text("SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = :n"), {"n": name}
    ).scalar_one_or_none()
    if definition is not None and "halfvec_cosine_ops" not in definition:
        session.execute(text(f"DROP INDEX IF EXISTS {name}"))
    literal = model.replace("'", "''")
    session.execute(
        text(
            f"CREATE INDEX IF NOT EXISTS {name} ON {table} "
            f"USING hnsw ((embedding::halfvec({int(dimensions)})) halfvec_cosine_ops) {HNSW_WITH} "
            f"WHERE model = '{literal}' AND dimensions = {int(dimensions)}"
        )
    )


def made_index(name: str, definition: str) -> tuple[str, str, int] | None:
    """``(table, model, dimensions)`` when ``name`` is what :func:`ensure_index` names an index of
    those, read from the index's ``pg_get_indexdef`` ``definition``; None otherwise. The rest of the
    definition is not checked here: make the index with :func:`ensure_index` elsewhere and compare."""
    named, predicate = _MADE_NAME.fullmatch(name), _MADE_PREDICATE.search(definition)
    if not named or not predicate or named[1] not in INDEXED_TABLES or named[2] != predicate[2]:
        return None
    table, model, dimensions = named[1], predicate[1].replace("''", "'"), int(predicate[2])
    return (table, model, dimensions) if index_name(table, model, dimensions) == name else None


def distance_sql(dimensions: int, param: str = "query") -> str:
    """SQL for the cosine distance between the row's embedding and ``:param``, both in half precision
    (the HNSW indexes' expression, so the planner can use them; an exact scan computes the same)."""
    d = int(dimensions)
    return f"(embedding::halfvec({d}) <=> CAST(:{param} AS halfvec({d})))"


def exact_distance_sql(dimensions: int, param: str = "query") -> str:
    """The same cosine distance in the rows' own float32: what search reports and ranks its
    candidates by, once the index (in half precision) has found them."""
    d = int(dimensions)
    return f"(embedding::vector({d}) <=> CAST(:{param} AS vector({d})))"
