"""Indexes for library management: memes newest-first, open uploads by blob key, thumbnails by blob key.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_memes_scope_created", "memes", ["scope_id", sa.text("created_at DESC"), sa.text("id DESC")])
    op.create_index(
        "ix_storage_operations_open_key",
        "storage_operations",
        ["scope_id", "target_key"],
        postgresql_where=sa.text("status IN ('prepared', 'file_applied')"),
    )
    op.create_index("ix_thumbnails_output_key", "derived_image_thumbnails", ["scope_id", "output_key"])


def downgrade() -> None:
    op.drop_index("ix_thumbnails_output_key", table_name="derived_image_thumbnails")
    op.drop_index("ix_storage_operations_open_key", table_name="storage_operations")
    op.drop_index("ix_memes_scope_created", table_name="memes")
