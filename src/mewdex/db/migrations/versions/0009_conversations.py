"""Assistant (issue 16): conversations, messages and artifacts of seed 004 (its ``tasks`` table is
``conversations`` here: ``tasks`` is the work queue).

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("conversation_id", sa.Uuid(), primary_key=True),
        sa.Column("scope_id", sa.String(128), sa.ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.Uuid(), sa.ForeignKey("users.user_id", ondelete="SET NULL")),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("auto_title_pending", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("title_source", sa.Text(), nullable=False, server_default="manual"),
        sa.Column("auto_title_version", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("channel", sa.Text(), nullable=False, server_default="web"),
        sa.Column("status", sa.Text(), nullable=False, server_default="active"),
        sa.Column("model", sa.Text(), nullable=False, server_default=""),
        sa.Column("model_profile", sa.Text(), nullable=False, server_default=""),
        sa.Column("tokens_prompt", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("tokens_completion", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("cost_cny", sa.Numeric(12, 6), nullable=False, server_default="0"),
        sa.Column("run_status", sa.Text(), nullable=False, server_default="idle"),
        sa.Column("run_error", sa.Text()),
        sa.Column("run_owner", sa.Text()),
        sa.Column("run_started_at", sa.DateTime(timezone=True)),
        sa.Column("next_message_idx", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("context_base_idx", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("context_summary", sa.Text()),
        sa.Column("scheduled_job_id", sa.Uuid()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint(
            "run_status IN ('idle','running','cancelling','error','cancelled')", name="ck_conversations_run_status"
        ),
        sa.CheckConstraint("title_source IN ('auto','manual','fixed')", name="ck_conversations_title_source"),
    )
    op.create_index(
        "ix_conversations_scope_active_updated",
        "conversations",
        ["scope_id", "updated_at", "conversation_id"],
        postgresql_where=sa.text("deleted_at IS NULL AND scheduled_job_id IS NULL"),
    )
    op.create_index(
        "ix_conversations_active_runs",
        "conversations",
        ["run_status"],
        postgresql_where=sa.text("run_status IN ('running','cancelling')"),
    )
    op.create_table(
        "messages",
        sa.Column("message_id", sa.Uuid(), primary_key=True),
        sa.Column(
            "conversation_id",
            sa.Uuid(),
            sa.ForeignKey("conversations.conversation_id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("payload", postgresql.JSONB(), nullable=False),
        sa.Column("artifact_refs", postgresql.JSONB()),
        sa.Column("tokens_in", sa.Integer()),
        sa.Column("tokens_out", sa.Integer()),
        sa.Column("model_profile", sa.Text()),
        sa.Column("kind", sa.Text()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("conversation_id", "idx", name="uq_messages_conversation_idx"),
    )
    op.execute("CREATE INDEX ix_messages_payload_gin ON messages USING gin (payload)")
    op.create_table(
        "artifacts",
        sa.Column("artifact_id", sa.Uuid(), primary_key=True),
        sa.Column("scope_id", sa.String(128), sa.ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.Uuid(), sa.ForeignKey("users.user_id", ondelete="SET NULL")),
        sa.Column(
            "origin_conversation_id", sa.Uuid(), sa.ForeignKey("conversations.conversation_id", ondelete="SET NULL")
        ),
        sa.Column("copied_from_artifact_id", sa.Uuid(), sa.ForeignKey("artifacts.artifact_id", ondelete="SET NULL")),
        sa.Column("kind", sa.Text(), nullable=False, server_default="meme_pick"),
        sa.Column("meme_id", sa.Uuid(), sa.ForeignKey("memes.id", ondelete="SET NULL")),
        sa.Column("current_path", sa.Text()),
        sa.Column("label", sa.Text(), nullable=False, server_default=""),
        sa.Column("media_type", sa.Text()),
        sa.Column("size_bytes", sa.BigInteger()),
        sa.Column("content_sha256", sa.Text()),
        sa.Column("status", sa.Text(), nullable=False, server_default="active"),
        sa.Column("trash_path", sa.Text()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint("status IN ('active','trashed')", name="ck_artifacts_status"),
    )
    op.create_index("ix_artifacts_scope_status", "artifacts", ["scope_id", "status"])
    op.create_index("ix_artifacts_origin_conversation", "artifacts", ["origin_conversation_id"])


def downgrade() -> None:
    op.drop_table("artifacts")
    op.drop_table("messages")
    op.drop_table("conversations")
