"""Connector shapes (seed 004): definitions, connections, audits, analysis policy. No shape carries
a secret: credentials appear only as ``credential_hint`` (``sk-…a1b2``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from mewdex.dto.common import Dto, Timestamp


class ConnectorDefinition(Dto):
    id: str
    provider: str
    name: str
    config: dict[str, Any]
    revision: int
    owner_type: str
    visibility: str
    trust_level: str
    review_status: str
    enabled: bool
    has_platform_credentials: bool
    credential_hint: str | None = None


class ConnectorDefinitionList(Dto):
    definitions: list[ConnectorDefinition]


class ConnectorDefinitionCreate(Dto):
    provider: str = Field(max_length=64)
    name: str = Field(max_length=200)
    config: dict[str, Any] = Field(default_factory=dict)
    visibility: Literal["all", "selected"] = "selected"
    trust_level: str = Field("managed", max_length=32)
    enabled: bool = True
    credentials: dict[str, str] | None = None


class ConnectorDefinitionPatch(Dto):
    name: str | None = Field(None, max_length=200)
    config: dict[str, Any] | None = None
    visibility: Literal["all", "selected"] | None = None
    review_status: Literal["active", "suspended"] | None = None
    enabled: bool | None = None
    credentials: dict[str, str] | None = None


class Connection(Dto):
    id: str
    definition_id: str
    provider: str
    name: str
    credential_hint: str
    state: Literal["verified", "needs_verification", "failed", "revoked", "disabled"]
    verified_revision: int
    definition_revision: int
    last_error: str | None = None
    last_verified_at: Timestamp | None = None


class ConnectionList(Dto):
    connections: list[Connection]


class ConnectionCreate(Dto):
    definition_id: str
    credentials: dict[str, str]
    name: str | None = Field(None, max_length=200)


class Audit(Dto):
    id: str
    scope_id: str
    user_id: str | None = None
    definition_id: str | None = None
    definition_revision: int
    external_system_id: str | None = None
    task_id: str | None = None
    event: str
    operation_id: str | None = None
    outcome: str
    status_code: int | None = None
    duration_ms: int
    response_bytes: int | None = None
    detail: dict[str, Any]
    created_at: Timestamp


class AuditList(Dto):
    audits: list[Audit]
    next_cursor: str | None = None


class AnalysisPolicy(Dto):
    vision: bool
    reverse_image_search: Literal["forbid", "auto"]
    llm_enhance: bool
    llm_rerank: bool = False


class AnalysisPolicyPatch(Dto):
    vision: bool | None = None
    reverse_image_search: Literal["forbid", "auto"] | None = None
    llm_enhance: bool | None = None
    llm_rerank: bool | None = None
