"""The trash (issue 43): ``memes.deleted_at``, the time a meme was moved to the trash (NULL: a live
meme; the column name of the soft deletes of seed 004). A trashed meme keeps its row, files, tags,
collections and learning; every listing and search leaves it out, and it is purged after
``MEWDEX_TRASH_DAYS``. The partial index serves the trash listing and the purge of old items.

Revision ID: 0025
Revises: 0024
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("memes", sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_memes_scope_trash",
        "memes",
        ["scope_id", sa.text("deleted_at DESC"), sa.text("id DESC")],
        postgresql_where=sa.text("deleted_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_memes_scope_trash", table_name="memes")
    op.drop_column("memes", "deleted_at")
