"""Connectors (issue 15, seed 004): external system definitions, grants, connections and audits;
scopes' analysis policies;
operation grants for provider chat and embedding calls.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_OLD_OPERATIONS = "'image.upload','analysis.agent','analysis.reverse_image_search','image.delete'"
_NEW_OPERATIONS = _OLD_OPERATIONS + ",'provider.chat','provider.embedding'"


def upgrade() -> None:
    op.create_table(
        "external_system_definitions",
        sa.Column("definition_id", sa.Uuid(), primary_key=True),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("config", postgresql.JSONB(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("owner_type", sa.Text(), nullable=False, server_default="platform"),
        sa.Column("owner_user_id", sa.Uuid(), sa.ForeignKey("users.user_id", ondelete="SET NULL")),
        sa.Column("visibility", sa.Text(), nullable=False, server_default="selected"),
        sa.Column("trust_level", sa.Text(), nullable=False, server_default="managed"),
        sa.Column("review_status", sa.Text(), nullable=False, server_default="active"),
        sa.Column("egress_policy_id", sa.Text()),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default=sa.text("true")),
        sa.Column("credentials", postgresql.JSONB(), nullable=False, server_default="{}"),
        sa.Column("credential_hint", sa.Text()),
        sa.Column("created_by", sa.Uuid(), sa.ForeignKey("users.user_id", ondelete="SET NULL")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("owner_type IN ('platform','user')", name="ck_esd_owner_type"),
        sa.CheckConstraint("visibility IN ('all','selected')", name="ck_esd_visibility"),
        sa.CheckConstraint("revision > 0", name="ck_esd_revision"),
    )
    op.create_index(
        "uq_external_system_definition_platform_name",
        "external_system_definitions",
        ["provider", "name"],
        unique=True,
        postgresql_where=sa.text("owner_type = 'platform'"),
    )
    op.create_index(
        "uq_external_system_definition_user_name",
        "external_system_definitions",
        ["owner_user_id", "provider", "name"],
        unique=True,
        postgresql_where=sa.text("owner_type = 'user'"),
    )
    op.create_table(
        "external_system_grants",
        sa.Column(
            "definition_id",
            sa.Uuid(),
            sa.ForeignKey("external_system_definitions.definition_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("user_id", sa.Uuid(), sa.ForeignKey("users.user_id", ondelete="CASCADE"), primary_key=True),
        sa.Column("granted_by", sa.Uuid(), sa.ForeignKey("users.user_id", ondelete="SET NULL")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "external_systems",
        sa.Column("external_system_id", sa.Uuid(), primary_key=True),
        sa.Column("user_id", sa.Uuid(), sa.ForeignKey("users.user_id", ondelete="CASCADE"), nullable=False),
        sa.Column(
            "definition_id",
            sa.Uuid(),
            sa.ForeignKey("external_system_definitions.definition_id", ondelete="RESTRICT"),
            nullable=False,
        ),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("credentials", postgresql.JSONB(), nullable=False),
        sa.Column("credential_hint", sa.Text(), nullable=False, server_default="***"),
        sa.Column("status", sa.Text(), nullable=False, server_default="active"),
        sa.Column("verified_revision", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text()),
        sa.Column("last_verified_at", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("user_id", "definition_id", name="uq_external_system_user_definition"),
    )
    op.create_table(
        "external_system_audits",
        sa.Column("audit_id", sa.Uuid(), primary_key=True),
        sa.Column("scope_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.Uuid(), sa.ForeignKey("users.user_id", ondelete="CASCADE")),
        sa.Column("task_id", sa.String(255)),
        sa.Column(
            "external_system_id", sa.Uuid(), sa.ForeignKey("external_systems.external_system_id", ondelete="SET NULL")
        ),
        sa.Column(
            "definition_id", sa.Uuid(), sa.ForeignKey("external_system_definitions.definition_id", ondelete="SET NULL")
        ),
        sa.Column("definition_revision", sa.Integer(), nullable=False),
        sa.Column("event", sa.Text(), nullable=False),
        sa.Column("operation_id", sa.Text()),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("status_code", sa.Integer()),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("response_bytes", sa.BigInteger()),
        sa.Column("detail", postgresql.JSONB(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_external_system_audits_scope_created", "external_system_audits", ["scope_id", "created_at"])
    op.create_index(
        "ix_external_system_audits_definition_created", "external_system_audits", ["definition_id", "created_at"]
    )
    op.create_table(
        "scope_analysis_policies",
        sa.Column("scope_id", sa.String(128), sa.ForeignKey("scopes.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("vision", sa.Boolean(), nullable=False),
        sa.Column("reverse_image_search", sa.Text(), nullable=False),
        sa.Column("llm_enhance", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("reverse_image_search IN ('forbid','auto')", name="ck_scope_analysis_reverse"),
    )
    op.drop_constraint("ck_operation_grant_operation", "operation_grants", type_="check")
    op.create_check_constraint("ck_operation_grant_operation", "operation_grants", f"operation IN ({_NEW_OPERATIONS})")


def downgrade() -> None:
    op.execute("DELETE FROM operation_grants WHERE operation IN ('provider.chat','provider.embedding')")
    op.drop_constraint("ck_operation_grant_operation", "operation_grants", type_="check")
    op.create_check_constraint("ck_operation_grant_operation", "operation_grants", f"operation IN ({_OLD_OPERATIONS})")
    op.drop_table("scope_analysis_policies")
    op.drop_table("external_system_audits")
    op.drop_table("external_systems")
    op.drop_table("external_system_grants")
    op.drop_table("external_system_definitions")
