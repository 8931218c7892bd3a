"""An index for the scheduler's statements (issue 14: a million memes).

Every schedule tick looked up its slot's task and pruned old ones with a condition on
``(scope_id, task_type, dedupe_key)`` whatever the status, which no index served (the dedupe index
covers active tasks only): two sequential scans of ``tasks`` per tick, and a library of a million
memes keeps three pipeline tasks per meme. The scheduler's tasks are standalone; this partial index
holds only those.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_tasks_standalone_dedupe",
        "tasks",
        ["scope_id", "task_type", "dedupe_key"],
        postgresql_where=sa.text("submission_mode = 'standalone'"),
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_standalone_dedupe", table_name="tasks")
