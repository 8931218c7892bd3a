"""How the connectors' routes and pages show a definition, a connection and an audit row (the
shapes of :mod:`.shapes`, as plain dicts). Never a secret: only ``credential_hint``."""

from __future__ import annotations

from sqlalchemy.orm import Session

from mewdex.providers import connectors
from mewdex.providers.connectors import ExternalSystem, ExternalSystemAudit, ExternalSystemDefinition


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def definition_dict(d: ExternalSystemDefinition, *, admin: bool) -> dict:
    return {
        "id": str(d.definition_id),
        "provider": d.provider,
        "name": d.name,
        "config": d.config,
        "revision": d.revision,
        "owner_type": d.owner_type,
        "visibility": d.visibility,
        "trust_level": d.trust_level,
        "review_status": d.review_status,
        "enabled": d.enabled,
        "has_platform_credentials": bool(d.credentials),
        "credential_hint": d.credential_hint if admin else None,
    }


def connection_dict(session: Session, s: ExternalSystem) -> dict:
    d = connectors.get_definition(session, s.definition_id)
    return {
        "id": str(s.external_system_id),
        "definition_id": str(s.definition_id),
        "provider": d.provider,
        "name": s.name,
        "credential_hint": s.credential_hint,
        "state": connectors.connection_state(s, d),
        "verified_revision": s.verified_revision,
        "definition_revision": d.revision,
        "last_error": s.last_error,
        "last_verified_at": _iso(s.last_verified_at),
    }


def audit_dict(a: ExternalSystemAudit) -> dict:
    return {
        "id": str(a.audit_id),
        "scope_id": a.scope_id,
        "user_id": str(a.user_id) if a.user_id else None,
        "definition_id": str(a.definition_id) if a.definition_id else None,
        "definition_revision": a.definition_revision,
        "external_system_id": str(a.external_system_id) if a.external_system_id else None,
        "task_id": a.task_id,
        "event": a.event,
        "operation_id": a.operation_id,
        "outcome": a.outcome,
        "status_code": a.status_code,
        "duration_ms": a.duration_ms,
        "response_bytes": a.response_bytes,
        "detail": a.detail,
        "created_at": _iso(a.created_at),
    }
