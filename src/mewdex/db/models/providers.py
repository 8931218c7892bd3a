"""Outside systems (seed 004): connector definitions, grants, user connections and call audits.

Seed 004 is the spec. Deliberate changes:

* ``external_system_definitions`` gains ``credentials`` / ``credential_hint``: the platform's own
  sealed credentials (:mod:`mewdex.providers.secrets`) for definitions users may use without
  connecting their own (e.g. the one made from ``MEWDEX_OPENAI_*``); ``config`` never holds a
  secret.
* ``external_system_audits`` carries ``scope_id`` and allows a NULL ``user_id`` (single-user mode
  has no user row); ``task_id`` is a queue task id without a foreign key (audits outlive pruned
  tasks), like ``usage_events``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mewdex.db.models.base import Base, created_at, updated_at

PROVIDERS = ("openai_compatible", "serpapi_google_lens", "yandex_image_search", "webhook")


class ExternalSystemDefinition(Base):
    """A connector an admin defines (provider, config, revision, owner, visibility, trust, review)."""

    __tablename__ = "external_system_definitions"
    definition_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    provider: Mapped[str] = mapped_column(Text, nullable=False)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    config: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, default=dict)
    revision: Mapped[int] = mapped_column(Integer, nullable=False, default=1, server_default="1")
    owner_type: Mapped[str] = mapped_column(Text, nullable=False, default="platform", server_default="platform")
    owner_user_id: Mapped[UUID | None] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="SET NULL"))
    visibility: Mapped[str] = mapped_column(Text, nullable=False, default="selected", server_default="selected")
    trust_level: Mapped[str] = mapped_column(Text, nullable=False, default="managed", server_default="managed")
    review_status: Mapped[str] = mapped_column(Text, nullable=False, default="active", server_default="active")
    egress_policy_id: Mapped[str | None] = mapped_column(Text)
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True, server_default=text("true"))
    credentials: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, default=dict, server_default="{}")
    credential_hint: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[UUID | None] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = created_at()
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (
        Index(
            "uq_external_system_definition_platform_name",
            "provider",
            "name",
            unique=True,
            postgresql_where=text("owner_type = 'platform'"),
        ),
        Index(
            "uq_external_system_definition_user_name",
            "owner_user_id",
            "provider",
            "name",
            unique=True,
            postgresql_where=text("owner_type = 'user'"),
        ),
        CheckConstraint("owner_type IN ('platform','user')", name="ck_esd_owner_type"),
        CheckConstraint("visibility IN ('all','selected')", name="ck_esd_visibility"),
        CheckConstraint("revision > 0", name="ck_esd_revision"),
    )


class ExternalSystemGrant(Base):
    """A definition granted to a user (visibility ``selected``)."""

    __tablename__ = "external_system_grants"
    definition_id: Mapped[UUID] = mapped_column(
        Uuid, ForeignKey("external_system_definitions.definition_id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[UUID] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="CASCADE"), primary_key=True)
    granted_by: Mapped[UUID | None] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = created_at()


class ExternalSystem(Base):
    """A user's connection to a definition: sealed credentials, hint, status, verified revision."""

    __tablename__ = "external_systems"
    external_system_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[UUID] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="CASCADE"), nullable=False)
    definition_id: Mapped[UUID] = mapped_column(
        Uuid, ForeignKey("external_system_definitions.definition_id", ondelete="RESTRICT"), nullable=False
    )
    name: Mapped[str] = mapped_column(Text, nullable=False)
    credentials: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, default=dict)
    credential_hint: Mapped[str] = mapped_column(Text, nullable=False, default="***", server_default="***")
    status: Mapped[str] = mapped_column(Text, nullable=False, default="active", server_default="active")
    verified_revision: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    last_error: Mapped[str | None] = mapped_column(Text)
    last_verified_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = created_at()
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (UniqueConstraint("user_id", "definition_id", name="uq_external_system_user_definition"),)


class ExternalSystemAudit(Base):
    """One outside call (or refusal): never credentials, request bodies or whole responses."""

    __tablename__ = "external_system_audits"
    audit_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    scope_id: Mapped[str] = mapped_column(String(128), nullable=False)
    user_id: Mapped[UUID | None] = mapped_column(Uuid, ForeignKey("users.user_id", ondelete="CASCADE"))
    task_id: Mapped[str | None] = mapped_column(String(255))
    external_system_id: Mapped[UUID | None] = mapped_column(
        Uuid, ForeignKey("external_systems.external_system_id", ondelete="SET NULL")
    )
    definition_id: Mapped[UUID | None] = mapped_column(
        Uuid, ForeignKey("external_system_definitions.definition_id", ondelete="SET NULL")
    )
    definition_revision: Mapped[int] = mapped_column(Integer, nullable=False)
    event: Mapped[str] = mapped_column(Text, nullable=False)
    operation_id: Mapped[str | None] = mapped_column(Text)
    outcome: Mapped[str] = mapped_column(Text, nullable=False)
    status_code: Mapped[int | None] = mapped_column(Integer)
    duration_ms: Mapped[int] = mapped_column(Integer, nullable=False)
    response_bytes: Mapped[int | None] = mapped_column(BigInteger)
    detail: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, default=dict)
    created_at: Mapped[datetime] = created_at()

    __table_args__ = (
        Index("ix_external_system_audits_scope_created", "scope_id", "created_at"),
        Index("ix_external_system_audits_definition_created", "definition_id", "created_at"),
        Index("ix_external_system_audits_created", "created_at"),  # retention, /metrics (migration 0019)
    )


class ScopeAnalysisPolicy(Base):
    """A scope's analysis policy (what outside help analysis may use): ``vision`` (the vision-LLM
    analysis), ``reverse_image_search`` (``forbid`` | ``auto``), ``llm_enhance`` (query rewriting),
    ``llm_rerank`` (LLM rerank of the top results).
    No row: the defaults (:func:`mewdex.providers.policy.for_scope`). Frozen into each new job's
    ``analysis_policy``."""

    __tablename__ = "scope_analysis_policies"
    scope_id: Mapped[str] = mapped_column(String(128), ForeignKey("scopes.id", ondelete="CASCADE"), primary_key=True)
    vision: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    reverse_image_search: Mapped[str] = mapped_column(Text, nullable=False, default="forbid")
    llm_enhance: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    llm_rerank: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False, server_default=text("false"))
    updated_at: Mapped[datetime] = updated_at()

    __table_args__ = (CheckConstraint("reverse_image_search IN ('forbid','auto')", name="ck_scope_analysis_reverse"),)
