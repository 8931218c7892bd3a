"""Schedules (issue 18): ``scheduled_jobs`` of seed 004 (plus max_runs, cost cap, disabled reason),
``scheduled_job_runs`` unique on (job, slot), and the foreign key of ``conversations.scheduled_job_id``.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduled_jobs",
        sa.Column("job_id", sa.Uuid(), primary_key=True),
        sa.Column("scope_id", sa.String(128), sa.ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.Uuid(), sa.ForeignKey("users.user_id", ondelete="CASCADE")),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("cron", sa.Text(), nullable=False),
        sa.Column("tz", sa.Text(), nullable=False, server_default="Asia/Shanghai"),
        sa.Column("mode", sa.Text(), nullable=False, server_default="isolated"),
        sa.Column("bound_task_id", sa.Uuid(), sa.ForeignKey("conversations.conversation_id", ondelete="SET NULL")),
        sa.Column("skill", sa.Text(), nullable=False, server_default=""),
        sa.Column("model_profile", sa.Text(), nullable=False, server_default=""),
        sa.Column("notify", postgresql.JSONB()),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default=sa.text("true")),
        sa.Column("timeout_seconds", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("next_run_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_run_at", sa.DateTime(timezone=True)),
        sa.Column("last_status", sa.Text()),
        sa.Column("last_error", sa.Text()),
        sa.Column("last_task_id", sa.Text()),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("run_count", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("expires_at", sa.DateTime(timezone=True)),
        sa.Column("max_runs", sa.Integer()),
        sa.Column("cost_cap_cny", sa.Numeric(12, 6)),
        sa.Column("disabled_reason", sa.Text()),
        sa.Column("disabled_at", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint("mode IN ('isolated','persistent')", name="ck_scheduled_jobs_mode"),
        sa.CheckConstraint(
            "last_status IS NULL OR last_status IN ('ok','error','skipped')", name="ck_scheduled_jobs_last_status"
        ),
        sa.CheckConstraint("timeout_seconds >= 0", name="ck_scheduled_jobs_timeout"),
    )
    op.create_index(
        "ix_scheduled_jobs_due_active",
        "scheduled_jobs",
        ["next_run_at"],
        postgresql_where=sa.text("enabled IS TRUE AND deleted_at IS NULL"),
    )
    op.create_index(
        "ix_scheduled_jobs_scope_active_created",
        "scheduled_jobs",
        ["scope_id", "created_at"],
        postgresql_where=sa.text("deleted_at IS NULL"),
    )
    op.create_table(
        "scheduled_job_runs",
        sa.Column("run_id", sa.Uuid(), primary_key=True),
        sa.Column("job_id", sa.Uuid(), sa.ForeignKey("scheduled_jobs.job_id", ondelete="CASCADE"), nullable=False),
        sa.Column("scope_id", sa.String(128), sa.ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("slot", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.Text(), nullable=False, server_default="queued"),
        sa.Column("reason", sa.Text()),
        sa.Column("coalesced", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("task_id", sa.Text()),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("conversation_id", sa.Uuid(), sa.ForeignKey("conversations.conversation_id", ondelete="SET NULL")),
        sa.Column("meme_id", sa.Uuid()),
        sa.Column("delivery_status", sa.Text(), nullable=False, server_default="none"),
        sa.Column("delivery_detail", postgresql.JSONB()),
        sa.Column("error_code", sa.Text()),
        sa.Column("error", sa.Text()),
        sa.Column("cost_cny", sa.Numeric(12, 6), nullable=False, server_default="0"),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("job_id", "slot", name="uq_scheduled_job_runs_job_slot"),
        sa.CheckConstraint(
            "status IN ('queued','running','ok','error','skipped')", name="ck_scheduled_job_runs_status"
        ),
        sa.CheckConstraint(
            "delivery_status IN ('none','queued','succeeded','failed','unknown')", name="ck_scheduled_job_runs_delivery"
        ),
    )
    op.create_index("ix_scheduled_job_runs_scope_created", "scheduled_job_runs", ["scope_id", "created_at"])
    op.create_foreign_key(
        "fk_conversations_scheduled_job_id",
        "conversations",
        "scheduled_jobs",
        ["scheduled_job_id"],
        ["job_id"],
        ondelete="SET NULL",
    )


def downgrade() -> None:
    op.drop_constraint("fk_conversations_scheduled_job_id", "conversations", type_="foreignkey")
    op.drop_index("ix_scheduled_job_runs_scope_created", table_name="scheduled_job_runs")
    op.drop_table("scheduled_job_runs")
    op.drop_index("ix_scheduled_jobs_scope_active_created", table_name="scheduled_jobs")
    op.drop_index("ix_scheduled_jobs_due_active", table_name="scheduled_jobs")
    op.drop_table("scheduled_jobs")
