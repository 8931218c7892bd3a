"""Accounts in the browser: each account's time zone and page language, and one-time password reset
links an admin makes for a user (only the sha256 of a link's token is stored).

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("users", sa.Column("time_zone", sa.Text(), nullable=True))
    op.add_column("users", sa.Column("language", sa.Text(), nullable=True))
    op.create_check_constraint("ck_users_language", "users", "language IS NULL OR language IN ('en','zh')")
    op.create_check_constraint("ck_users_time_zone", "users", "time_zone IS NULL OR length(time_zone) BETWEEN 1 AND 64")
    op.create_table(
        "password_reset_links",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("created_by", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.user_id"], name=op.f("fk_password_reset_links_user_id_users"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["created_by"],
            ["users.user_id"],
            name=op.f("fk_password_reset_links_created_by_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_password_reset_links")),
    )
    op.create_index("ix_password_reset_links_user", "password_reset_links", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_password_reset_links_user", table_name="password_reset_links")
    op.drop_table("password_reset_links")
    op.drop_constraint("ck_users_time_zone", "users", type_="check")
    op.drop_constraint("ck_users_language", "users", type_="check")
    op.drop_column("users", "language")
    op.drop_column("users", "time_zone")
