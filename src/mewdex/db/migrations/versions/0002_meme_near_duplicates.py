"""Near-duplicate pairs recorded by the visual stage (meme_near_duplicates).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "meme_near_duplicates",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("meme_id", sa.Uuid(), nullable=False),
        sa.Column("duplicate_of", sa.Uuid(), nullable=False),
        sa.Column("phash_distance", sa.Integer(), nullable=True),
        sa.Column("cosine", sa.Float(), nullable=True),
        sa.Column("model", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("meme_id <> duplicate_of", name="ck_meme_near_duplicates_distinct"),
        sa.CheckConstraint(
            "phash_distance IS NULL OR phash_distance BETWEEN 0 AND 64", name="ck_meme_near_duplicates_phash"
        ),
        sa.CheckConstraint(
            "cosine IS NULL OR cosine BETWEEN -1.0001 AND 1.0001", name="ck_meme_near_duplicates_cosine"
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["memes.scope_id", "memes.id"],
            name=op.f("fk_meme_near_duplicates_scope_id_memes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "duplicate_of"],
            ["memes.scope_id", "memes.id"],
            name="fk_meme_near_duplicates_duplicate_of_memes",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("scope_id", "meme_id", "duplicate_of", name=op.f("pk_meme_near_duplicates")),
    )
    op.create_index("ix_meme_near_duplicates_of", "meme_near_duplicates", ["scope_id", "duplicate_of"])


def downgrade() -> None:
    op.drop_index("ix_meme_near_duplicates_of", table_name="meme_near_duplicates")
    op.drop_table("meme_near_duplicates")
