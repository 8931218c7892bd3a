"""``meme_embeddings.written_xid``: the transaction that inserted the row, so a process that holds a
scope's rows in memory (:mod:`mewdex.search.exact_scan`) reads only the rows written since.

The column is the inserting transaction's full 64-bit id (``pg_current_xact_id()``, as a bigint) set
by its default; rows from before this migration keep NULL (a process loads them whole, never as news).
An index on ``(scope_id, generation_id, written_xid)`` finds a generation's news without reading its
other rows. Adding a nullable column and then its default
rewrites nothing.

Revision ID: 0032
Revises: 0031
"""

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("meme_embeddings", sa.Column("written_xid", sa.BigInteger(), nullable=True))
    op.alter_column("meme_embeddings", "written_xid", server_default=sa.text("(pg_current_xact_id())::text::bigint"))
    op.create_index(
        "ix_meme_embeddings_written",
        "meme_embeddings",
        ["scope_id", "generation_id", "written_xid"],
    )


def downgrade() -> None:
    op.drop_index("ix_meme_embeddings_written", table_name="meme_embeddings")
    op.drop_column("meme_embeddings", "written_xid")
