"""Per-(model, dimensions) partial HNSW expression indexes over the dimensionless vector columns."""

from __future__ import annotations

import hashlib

from sqlalchemy import text
from sqlalchemy.orm import Session


def index_name(table: str, model: str, dimensions: int) -> str:
    digest = hashlib.sha256(model.encode()).hexdigest()[:10]
    return f"ix_{table}_hnsw_{digest}_{dimensions}"


def ensure_index(session: Session, table: str, model: str, dimensions: int) -> None:
    """Create (if missing) ``USING hnsw ((embedding::vector(N)) vector_cosine_ops) WHERE model = '…'``.

    Queries must use the same expression and predicate (see :func:`distance_sql`) to use it.
    """
    literal = model.replace("'", "''")
    session.execute(
        text(
            f"CREATE INDEX IF NOT EXISTS {index_name(table, model, dimensions)} ON {table} "
            f"USING hnsw ((embedding::vector({int(dimensions)})) vector_cosine_ops) "
            f"WHERE model = '{literal}' AND dimensions = {int(dimensions)}"
        )
    )


def distance_sql(dimensions: int, param: str = "query") -> str:
    """SQL for the cosine distance between the row's embedding and ``:param`` (index-compatible)."""
    d = int(dimensions)
    return f"(embedding::vector({d}) <=> CAST(:{param} AS vector({d})))"
