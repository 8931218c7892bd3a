"""Providers (issue 15, points 6–7): "the meme I wanted" marks of searches (``search_marks``, a
scope's query set for the eval gate) and the analysis policy's ``llm_rerank`` switch.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "search_marks",
        sa.Column("mark_id", sa.Uuid(), primary_key=True),
        sa.Column("scope_id", sa.String(128), sa.ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("meme_id", sa.Uuid(), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("query_key", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
        sa.ForeignKeyConstraint(
            ["scope_id", "meme_id"], ["memes.scope_id", "memes.id"], ondelete="CASCADE", name="fk_search_marks_meme"
        ),
        sa.UniqueConstraint("scope_id", "query_key", "meme_id", name="uq_search_marks_query_meme"),
        sa.CheckConstraint("length(query) BETWEEN 1 AND 500", name="ck_search_marks_query"),
    )
    op.create_index("ix_search_marks_scope_created", "search_marks", ["scope_id", "created_at"])
    op.add_column(
        "scope_analysis_policies",
        sa.Column("llm_rerank", sa.Boolean(), nullable=False, server_default=sa.text("false")),
    )


def downgrade() -> None:
    op.drop_column("scope_analysis_policies", "llm_rerank")
    op.drop_index("ix_search_marks_scope_created", table_name="search_marks")
    op.drop_table("search_marks")
