"""Sharing collections (issue 43): ``collection_members`` (an account a collection is shared with, as
``viewer`` or ``editor``) and ``collection_links`` (public links; only the sha256 of each token is
kept, ``token_hash`` unique, so a token is found by its hash and never listed). Both end with their
collection (the members also with the account).

Revision ID: 0026
Revises: 0025
"""

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "collection_members",
        sa.Column("scope_id", sa.String(128), nullable=False),
        sa.Column("collection_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), sa.ForeignKey("users.user_id", ondelete="CASCADE"), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("collection_id", "user_id"),
        sa.ForeignKeyConstraint(
            ["scope_id", "collection_id"],
            ["meme_collections.scope_id", "meme_collections.id"],
            ondelete="CASCADE",
            name="fk_collection_members_collection",
        ),
        sa.CheckConstraint("role IN ('viewer','editor')", name="ck_collection_members_role"),
    )
    op.create_index("ix_collection_members_user", "collection_members", ["user_id"])
    op.create_table(
        "collection_links",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("scope_id", sa.String(128), nullable=False),
        sa.Column("collection_id", sa.Uuid(), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("show_owner", sa.Boolean(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.ForeignKeyConstraint(
            ["scope_id", "collection_id"],
            ["meme_collections.scope_id", "meme_collections.id"],
            ondelete="CASCADE",
            name="fk_collection_links_collection",
        ),
    )
    op.create_index("ix_collection_links_collection", "collection_links", ["scope_id", "collection_id"])


def downgrade() -> None:
    op.drop_table("collection_links")
    op.drop_table("collection_members")
