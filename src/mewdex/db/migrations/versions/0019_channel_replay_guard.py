"""Inbound replay guard of the channels (issue 31): each signed platform request (a WeCom callback's
nonce, a OneBot HTTP event's message id) is remembered per realm for the replay window, so a
captured request cannot be sent again; rows expire with the window and are pruned as new ones come.

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "channel_inbound_nonces",
        sa.Column("realm", sa.Text(), nullable=False),
        sa.Column("nonce", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("realm", "nonce"),
    )
    op.create_index("ix_channel_inbound_nonces_expires", "channel_inbound_nonces", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_channel_inbound_nonces_expires", table_name="channel_inbound_nonces")
    op.drop_table("channel_inbound_nonces")
