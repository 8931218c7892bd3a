"""Tags (issue 43): ``meme_tags``, a meme's normalised tag names (unique per meme, scoped like the meme;
deleted with it), with an index by (scope, tag) for the tag list's counts and ``tag:`` searches.

Revision ID: 0024
Revises: 0023
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "meme_tags",
        sa.Column("scope_id", sa.String(128), primary_key=True),
        sa.Column("meme_id", sa.Uuid(), primary_key=True),
        sa.Column("tag", sa.String(64), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
        sa.ForeignKeyConstraint(
            ["scope_id", "meme_id"], ["memes.scope_id", "memes.id"], ondelete="CASCADE", name="fk_meme_tags_meme"
        ),
        sa.CheckConstraint("tag <> '' AND tag = btrim(tag) AND tag !~ '[[:cntrl:]]'", name="ck_meme_tags_tag"),
    )
    op.create_index("ix_meme_tags_scope_tag", "meme_tags", ["scope_id", "tag", "meme_id"])


def downgrade() -> None:
    op.drop_table("meme_tags")
