"""A member's choice to answer from a shared collection (issue 43 item 5): ``collection_members.use_in_chat``
(default false): the member's assistant (web chat, MCP, channels) searches that collection's memes
beside the member's own library. Ends with the membership.

Revision ID: 0028
Revises: 0027
"""

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "collection_members",
        sa.Column("use_in_chat", sa.Boolean(), nullable=False, server_default=sa.text("false")),
    )


def downgrade() -> None:
    op.drop_column("collection_members", "use_in_chat")
