"""Channels (issue 17): channel bindings (seed 004), bind codes, the delivery log, per-chat pacing,
per-bot state and the per-bot media cache.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "channel_bindings",
        sa.Column("scope_id", sa.String(128), sa.ForeignKey("scopes.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("channel", sa.Text(), primary_key=True),
        sa.Column("user_id", sa.Uuid(), sa.ForeignKey("users.user_id", ondelete="CASCADE")),
        sa.Column("status", sa.Text(), nullable=False, server_default="active"),
        sa.Column("identity", sa.Text()),
        sa.Column("config", postgresql.JSONB(), nullable=False, server_default="{}"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint("status IN ('active','revoked')", name="ck_channel_bindings_status"),
    )
    op.create_index(
        "uq_channel_bindings_user_channel",
        "channel_bindings",
        ["user_id", "channel"],
        unique=True,
        postgresql_where=sa.text("user_id IS NOT NULL"),
    )
    op.create_index(
        "uq_channel_bindings_active_identity",
        "channel_bindings",
        ["channel", "identity"],
        unique=True,
        postgresql_where=sa.text("status = 'active' AND identity IS NOT NULL"),
    )
    op.create_table(
        "channel_bind_codes",
        sa.Column("code_sha256", sa.Text(), primary_key=True),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("scope_id", sa.String(128), sa.ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.Uuid(), sa.ForeignKey("users.user_id", ondelete="CASCADE")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_channel_bind_codes_scope_channel", "channel_bind_codes", ["scope_id", "channel"])
    op.create_table(
        "channel_deliveries",
        sa.Column("delivery_id", sa.Uuid(), primary_key=True),
        sa.Column("scope_id", sa.String(128), sa.ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.Uuid(), sa.ForeignKey("users.user_id", ondelete="SET NULL")),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False, server_default="meme"),
        sa.Column("meme_id", sa.Uuid(), sa.ForeignKey("memes.id", ondelete="SET NULL")),
        sa.Column("text", sa.Text()),
        sa.Column("source", sa.Text(), nullable=False, server_default="assistant"),
        sa.Column("conversation_id", sa.Uuid(), sa.ForeignKey("conversations.conversation_id", ondelete="SET NULL")),
        sa.Column("bound", sa.Boolean(), nullable=False, server_default=sa.text("true")),
        sa.Column("task_id", sa.Text()),
        sa.Column("status", sa.Text(), nullable=False, server_default="queued"),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("error_code", sa.Text()),
        sa.Column("platform_code", sa.Text()),
        sa.Column("platform_error", sa.Text()),
        sa.Column("retry_after_seconds", sa.Integer()),
        sa.Column("platform_message_id", sa.Text()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True)),
        sa.CheckConstraint(
            "status IN ('queued','retrying','sent','failed','cancelled','unknown')", name="ck_channel_deliveries_status"
        ),
        sa.CheckConstraint("kind IN ('meme','text')", name="ck_channel_deliveries_kind"),
    )
    op.create_index("ix_channel_deliveries_scope_created", "channel_deliveries", ["scope_id", "created_at"])
    op.create_table(
        "channel_chat_pacing",
        sa.Column("channel", sa.Text(), primary_key=True),
        sa.Column("target", sa.Text(), primary_key=True),
        sa.Column("next_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "channel_bots",
        sa.Column("channel", sa.Text(), primary_key=True),
        sa.Column("bot_id", sa.Text(), primary_key=True),
        sa.Column("username", sa.Text()),
        sa.Column("update_offset", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("webhook_url", sa.Text()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "channel_media_cache",
        sa.Column("channel", sa.Text(), primary_key=True),
        sa.Column("bot_id", sa.Text(), primary_key=True),
        sa.Column("content_sha256", sa.Text(), primary_key=True),
        sa.Column("media_kind", sa.Text(), primary_key=True),
        sa.Column("file_id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True)),
    )


def downgrade() -> None:
    op.drop_table("channel_media_cache")
    op.drop_table("channel_bots")
    op.drop_table("channel_chat_pacing")
    op.drop_table("channel_deliveries")
    op.drop_table("channel_bind_codes")
    op.drop_table("channel_bindings")
