"""Queue control plane: the dispatch sequence of lane fairness, and the claim and reaper indexes.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SEQUENCE IF NOT EXISTS task_dispatch_sequence")
    # A claim reads one scope's oldest due task of a lane/resource key.
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_tasks_lane_claim ON tasks (scope_id, lane, lane_resource_key, available_at, "
        "created_at) WHERE status = 'queued'"
    )
    # The reaper reads running tasks by lease expiry.
    op.execute("CREATE INDEX IF NOT EXISTS ix_tasks_running_lease ON tasks (lease_expires_at) WHERE status = 'running'")
    # Slot release and lookups by the task holding the slot.
    op.execute("CREATE INDEX IF NOT EXISTS ix_task_batch_items_task ON task_batch_items (scope_id, task_id)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_task_batch_items_task")
    op.execute("DROP INDEX IF EXISTS ix_tasks_running_lease")
    op.execute("DROP INDEX IF EXISTS ix_tasks_lane_claim")
    op.execute("DROP SEQUENCE IF EXISTS task_dispatch_sequence")
