"""Security (issue 13): token scopes and expiry, a per-user auth epoch (bumped by a password change
or disabling: it kills the user's signed links and tokens), session idle time, and sign-in
failure counters shared by every API process.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("users", sa.Column("auth_epoch", sa.Integer(), nullable=False, server_default="0"))
    op.add_column(
        "api_tokens",
        sa.Column(
            "scopes", postgresql.ARRAY(sa.Text()), nullable=False, server_default=sa.text("'{read,write}'::text[]")
        ),
    )
    op.add_column("api_tokens", sa.Column("expires_at", sa.DateTime(timezone=True)))
    # Tokens made before scopes existed could do everything their user could: keep that.
    op.execute("UPDATE api_tokens SET scopes = '{read,write,admin}'")
    op.create_check_constraint(
        "ck_api_tokens_scopes",
        "api_tokens",
        "scopes <@ ARRAY['read','write','admin']::text[] AND cardinality(scopes) > 0",
    )
    op.add_column(
        "user_sessions",
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_table(
        "login_failures",
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("window_started_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("last_failure_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )


def downgrade() -> None:
    op.drop_table("login_failures")
    op.drop_column("user_sessions", "last_seen_at")
    op.drop_constraint("ck_api_tokens_scopes", "api_tokens")
    op.drop_column("api_tokens", "expires_at")
    op.drop_column("api_tokens", "scopes")
    op.drop_column("users", "auth_epoch")
