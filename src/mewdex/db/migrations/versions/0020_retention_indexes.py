"""Indexes for retention and the metrics window (issue 34: bounded growth, /metrics).

Retention deletes finished rows oldest first in small batches (``runtime.retention``), and
``/metrics`` counts the rows of its last five minutes; without these, each batch and each scrape
read the whole table (the tasks table keeps three rows per meme until retention prunes them).

Revision ID: 0020
Revises: 0019
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_tasks_finished_completed",
        "tasks",
        ["completed_at"],
        postgresql_where=sa.text("status IN ('succeeded','failed')"),
    )
    op.create_index("ix_channel_deliveries_created", "channel_deliveries", ["created_at"])
    op.create_index("ix_external_system_audits_created", "external_system_audits", ["created_at"])
    op.create_index(
        "ix_conversations_scheduled_updated",
        "conversations",
        ["updated_at"],
        postgresql_where=sa.text("scheduled_job_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_conversations_scheduled_updated", table_name="conversations")
    op.drop_index("ix_external_system_audits_created", table_name="external_system_audits")
    op.drop_index("ix_channel_deliveries_created", table_name="channel_deliveries")
    op.drop_index("ix_tasks_finished_completed", table_name="tasks")
