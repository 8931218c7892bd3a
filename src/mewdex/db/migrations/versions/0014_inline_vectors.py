"""Keep embeddings inside their rows (issue 20: search throughput).

A 512-dimension vector is 2,056 bytes, just over PostgreSQL's 2 KB TOAST threshold, so every USE
and visual embedding row was stored out of line: an exact scan of a scope's vectors read ~3 extra
buffers per row (the TOAST index and chunks), 8.9 ms for 3,007 rows instead of 2.6 ms. With
``toast_tuple_target`` at its maximum a row is only TOASTed when it does not fit a page (~8 KB:
vectors up to ~1,900 dimensions stay inline; larger ones are TOASTed as before). The rows already
stored are rewritten once (the vector re-assigned, so the TOASTed copy is dropped).

Revision ID: 0014
Revises: 0013
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

TABLES = ("meme_embeddings", "meme_visual_embeddings")
TOAST_TUPLE_TARGET_MAX = 8160  # PostgreSQL's upper bound (TOAST_TUPLE_TARGET_MAIN)


def upgrade() -> None:
    bind = op.get_bind()
    # PostgreSQL 17+ tells which values are TOASTed; before it, every row is rewritten.
    toasted = (
        "pg_column_toast_chunk_id(embedding) IS NOT NULL"
        if int(bind.exec_driver_sql("SHOW server_version_num").scalar_one()) >= 170000
        else "true"
    )
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} SET (toast_tuple_target = {TOAST_TUPLE_TARGET_MAX})")
        # subvector() builds a fresh value: an UPDATE that kept the old datum would keep it TOASTed.
        op.execute(f"UPDATE {table} SET embedding = subvector(embedding, 1, vector_dims(embedding)) WHERE {toasted}")


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} RESET (toast_tuple_target)")
