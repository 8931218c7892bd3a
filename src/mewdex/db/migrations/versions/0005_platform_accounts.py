"""Platform accounts (seed 004): users, user_sessions, api_tokens, user_disk_usage (kept exact by a
trigger on memes), usage_events (v2 shape), platform_settings.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# One row per user; a meme's insert/delete/size change moves its owner's counters in the same
# transaction. Scopes no user owns (single-user mode, test scopes) are not tracked.
DISK_USAGE_TRIGGER = """
CREATE FUNCTION mewdex_track_disk_usage() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  owner uuid;
  sid text;
  delta_bytes bigint;
  delta_count integer;
BEGIN
  IF TG_OP = 'INSERT' THEN
    sid := NEW.scope_id; delta_bytes := NEW.size_bytes; delta_count := 1;
  ELSIF TG_OP = 'DELETE' THEN
    sid := OLD.scope_id; delta_bytes := -OLD.size_bytes; delta_count := -1;
  ELSE
    sid := NEW.scope_id; delta_bytes := NEW.size_bytes - OLD.size_bytes; delta_count := 0;
  END IF;
  IF delta_bytes = 0 AND delta_count = 0 THEN
    RETURN NULL;
  END IF;
  SELECT user_id INTO owner FROM users WHERE scope_id = sid;
  IF owner IS NULL THEN
    RETURN NULL;
  END IF;
  INSERT INTO user_disk_usage AS u (user_id, bytes_used, file_count, scanned_at)
  VALUES (owner, GREATEST(delta_bytes, 0), GREATEST(delta_count, 0), now())
  ON CONFLICT (user_id) DO UPDATE
    SET bytes_used = GREATEST(u.bytes_used + delta_bytes, 0),
        file_count = GREATEST(u.file_count + delta_count, 0);
  RETURN NULL;
END
$$;
CREATE TRIGGER trg_memes_disk_usage AFTER INSERT OR DELETE OR UPDATE OF size_bytes ON memes
FOR EACH ROW EXECUTE FUNCTION mewdex_track_disk_usage();
"""


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("email", sa.Text(), nullable=True),
        sa.Column("oidc_subject", sa.Text(), nullable=True),
        sa.Column("password_hash", sa.Text(), nullable=True),
        sa.Column("plan", sa.Text(), nullable=True),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("user_name", sa.Text(), nullable=True),
        sa.Column("role", sa.Text(), server_default="user", nullable=False),
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("disabled", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("quota_storage_bytes", sa.BigInteger(), nullable=True),
        sa.Column("quota_memes", sa.Integer(), nullable=True),
        sa.Column("quota_analysis_cost_per_month", sa.Numeric(12, 6), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("role IN ('user','admin')", name="ck_users_role"),
        sa.CheckConstraint("quota_storage_bytes IS NULL OR quota_storage_bytes >= 0", name="ck_users_quota_storage"),
        sa.CheckConstraint("quota_memes IS NULL OR quota_memes >= 0", name="ck_users_quota_memes"),
        sa.CheckConstraint(
            "quota_analysis_cost_per_month IS NULL OR quota_analysis_cost_per_month >= 0", name="ck_users_quota_cost"
        ),
        sa.ForeignKeyConstraint(
            ["scope_id"], ["scopes.id"], name=op.f("fk_users_scope_id_scopes"), ondelete="RESTRICT"
        ),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_users")),
        sa.UniqueConstraint("scope_id", name=op.f("uq_users_scope_id")),
    )
    op.create_index("uq_users_email_lower", "users", [sa.text("lower(email)")], unique=True)
    op.create_table(
        "user_sessions",
        sa.Column("session_hash", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("csrf_token", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.user_id"], name=op.f("fk_user_sessions_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("session_hash", name=op.f("pk_user_sessions")),
    )
    op.create_index("ix_user_sessions_user", "user_sessions", ["user_id"])
    op.create_table(
        "api_tokens",
        sa.Column("token_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("length(name) BETWEEN 1 AND 100", name="ck_api_tokens_name"),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.user_id"], name=op.f("fk_api_tokens_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("token_id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_index("ix_api_tokens_user", "api_tokens", ["user_id"])
    op.create_table(
        "user_disk_usage",
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("bytes_used", sa.BigInteger(), nullable=False),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("scanned_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.user_id"], name=op.f("fk_user_disk_usage_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_user_disk_usage")),
    )
    op.create_table(
        "usage_events",
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=True),
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=True),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("model_profile", sa.Text(), nullable=False),
        sa.Column("units", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("cost_cny", sa.Numeric(12, 6), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.user_id"], name=op.f("fk_usage_events_user_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_usage_events")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_usage_events_idempotency_key")),
    )
    op.create_index("ix_usage_created_brin", "usage_events", ["created_at"], postgresql_using="brin")
    op.create_index("ix_usage_events_user_created", "usage_events", ["user_id", "created_at"])
    op.create_index("ix_usage_events_scope_created", "usage_events", ["scope_id", "created_at"])
    op.create_table(
        "platform_settings",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_platform_settings")),
    )
    op.execute(DISK_USAGE_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS trg_memes_disk_usage ON memes")
    op.execute("DROP FUNCTION IF EXISTS mewdex_track_disk_usage()")
    op.drop_table("platform_settings")
    op.drop_index("ix_usage_events_scope_created", table_name="usage_events")
    op.drop_index("ix_usage_events_user_created", table_name="usage_events")
    op.drop_index("ix_usage_created_brin", table_name="usage_events")
    op.drop_table("usage_events")
    op.drop_table("user_disk_usage")
    op.drop_index("ix_api_tokens_user", table_name="api_tokens")
    op.drop_table("api_tokens")
    op.drop_index("ix_user_sessions_user", table_name="user_sessions")
    op.drop_table("user_sessions")
    op.drop_index("uq_users_email_lower", table_name="users")
    op.drop_table("users")
