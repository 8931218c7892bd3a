"""Learning from feedback (issue 33): ``search_feedback_events`` (what each person marked, copied,
downloaded, shared, sent, kept or rejected for a query, per scope), ``search_feedback_queries`` (each
past query's embedding per text model; per-model HNSW indexes are created at run time like those of
``meme_embeddings``) and ``search_feedback_settings`` (learning on or off per scope).

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import Vector

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

KINDS = "('mark','copy','download','share','send','kept','rejected')"
SOURCES = "('search','meme','assistant','channel','api','cli')"


def upgrade() -> None:
    op.create_table(
        "search_feedback_events",
        sa.Column("event_id", sa.Uuid(), primary_key=True),
        sa.Column("scope_id", sa.String(128), sa.ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("meme_id", sa.Uuid(), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("query_key", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
        sa.ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["memes.scope_id", "memes.id"],
            ondelete="CASCADE",
            name="fk_search_feedback_events_meme",
        ),
        sa.CheckConstraint("length(query) BETWEEN 1 AND 500", name="ck_search_feedback_events_query"),
        sa.CheckConstraint(f"kind IN {KINDS}", name="ck_search_feedback_events_kind"),
        sa.CheckConstraint(f"source IN {SOURCES}", name="ck_search_feedback_events_source"),
    )
    op.create_index(
        "ix_search_feedback_events_scope_query", "search_feedback_events", ["scope_id", "query_key", "created_at"]
    )
    op.create_index("ix_search_feedback_events_scope_created", "search_feedback_events", ["scope_id", "created_at"])
    op.create_index("ix_search_feedback_events_scope_meme", "search_feedback_events", ["scope_id", "meme_id"])
    op.create_table(
        "search_feedback_queries",
        sa.Column("scope_id", sa.String(128), sa.ForeignKey("scopes.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("model", sa.Text(), primary_key=True),
        sa.Column("query_key", sa.Text(), primary_key=True),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column("embedding", Vector(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
        sa.CheckConstraint(
            "dimensions > 0 AND vector_dims(embedding) = dimensions", name="ck_search_feedback_queries_dimensions"
        ),
    )
    op.create_table(
        "search_feedback_settings",
        sa.Column("scope_id", sa.String(128), sa.ForeignKey("scopes.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("learning_enabled", sa.Boolean(), nullable=False, server_default=sa.text("true")),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
    )


def downgrade() -> None:
    op.drop_table("search_feedback_settings")
    op.execute("DROP TABLE search_feedback_queries")  # with its run-time HNSW indexes
    op.drop_table("search_feedback_events")
