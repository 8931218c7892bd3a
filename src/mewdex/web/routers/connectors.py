"""Connectors API (issue 15; services in :mod:`mewdex.providers`). Never answers a secret.

User (their own only; definitions not granted to them answer 404):

* ``GET /api/v1/connectors/definitions`` — definitions the caller may use
* ``GET|POST /api/v1/connectors/connections`` — their connections; POST saves credentials and
  runs the verification call (the answer's ``state`` says how it went)
* ``POST /api/v1/connectors/connections/{id}/verify``, ``DELETE /api/v1/connectors/connections/{id}``
* ``GET /api/v1/connectors/audits`` — their outside calls
* ``GET|PATCH /api/v1/analysis-policy`` — the scope's analysis policy

Admin (404 for others): ``GET|POST /api/v1/admin/connectors``, ``PATCH /api/v1/admin/connectors/{id}``,
``PUT|DELETE /api/v1/admin/connectors/{id}/grants/{user_id}``, ``GET /api/v1/admin/connectors/audits``.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Response
from sqlalchemy.orm import Session

from mewdex.db.engine import get_sessionmaker
from mewdex.dto.connectors import (
    AnalysisPolicy,
    AnalysisPolicyPatch,
    AuditList,
    Connection,
    ConnectionCreate,
    ConnectionList,
    ConnectorDefinition,
    ConnectorDefinitionCreate,
    ConnectorDefinitionList,
    ConnectorDefinitionPatch,
)
from mewdex.dto.scopes import ScopeContext
from mewdex.platform.auth import Principal
from mewdex.providers import connectors, policy
from mewdex.providers.connectors import ExternalSystem, ExternalSystemAudit, ExternalSystemDefinition
from mewdex.providers.errors import ProviderError
from mewdex.web.deps import current_principal, current_scope, db_session, parse_id, require_admin
from mewdex.web.errors import error_responses

router = APIRouter(prefix="/api/v1", tags=["connectors"], responses=error_responses(401, 403, 404, 409, 422))


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


def _user(principal: Principal):
    from mewdex.web.errors import ApiError

    if principal.user is None:
        raise ApiError(
            409,
            "no_accounts",
            "connections belong to accounts; single-user mode uses the platform's "
            "connectors (MEWDEX_OPENAI_* or `mewdex connectors create`)",
        )
    return principal.user


# ---------------------------------------------------------------- user


@router.get("/connectors/definitions", response_model=ConnectorDefinitionList)
def my_definitions(principal: Principal = Depends(current_principal), session: Session = Depends(db_session)):
    return {
        "definitions": [
            definition_dict(d, admin=False) for d in connectors.visible_definitions(session, principal.user)
        ]
    }


@router.get("/connectors/connections", response_model=ConnectionList)
def my_connections(principal: Principal = Depends(current_principal), session: Session = Depends(db_session)):
    if principal.user is None:
        return {"connections": []}
    return {"connections": [connection_dict(session, s) for s in connectors.user_connections(session, principal.user)]}


@router.post("/connectors/connections", response_model=Connection, status_code=201)
def connect(body: ConnectionCreate, principal: Principal = Depends(current_principal)):
    """Save credentials for a granted definition, then verify them (no transaction held during the
    call); ``state`` ``verified`` or ``failed`` (``last_error``)."""
    sessions = get_sessionmaker()
    with sessions.begin() as session:
        user = session.merge(_user(principal), load=True)
        system = connectors.save_connection(
            session, user, parse_id(body.definition_id, "connector"), body.credentials, body.name
        )
        system_id = system.external_system_id
    return _verified(sessions, principal.scope, system_id, principal)


@router.post("/connectors/connections/{connection_id}/verify", response_model=Connection)
def verify(connection_id: str, principal: Principal = Depends(current_principal)):
    _user(principal)
    return _verified(get_sessionmaker(), principal.scope, parse_id(connection_id, "connection"), principal)


def _verified(sessions, scope: ScopeContext, system_id, principal: Principal) -> dict:
    try:
        connectors.verify_connection(sessions, scope, system_id)
    except ProviderError as exc:
        if exc.code == "not_found":
            raise
    with sessions.begin() as session:
        user = session.merge(principal.user, load=True)
        return connection_dict(session, connectors.get_connection(session, user, system_id))


@router.delete("/connectors/connections/{connection_id}", status_code=204, response_class=Response)
def disconnect(
    connection_id: str, principal: Principal = Depends(current_principal), session: Session = Depends(db_session)
):
    connectors.delete_connection(session, _user(principal), parse_id(connection_id, "connection"))
    return Response(status_code=204)


@router.get("/connectors/audits", response_model=AuditList)
def my_audits(
    limit: int = Query(100, ge=1, le=500),
    event: str | None = Query(None, max_length=64),
    outcome: str | None = Query(None, max_length=16),
    definition_id: str | None = Query(None, max_length=64),
    cursor: str | None = Query(None, max_length=2048),
    scope: ScopeContext = Depends(current_scope),
    session: Session = Depends(db_session),
):
    """The caller's outside calls, newest first; ``next_cursor`` pages on."""
    rows, next_cursor = connectors.list_audits(
        session,
        scope_id=scope.scope_id,
        limit=limit,
        event=event,
        outcome=outcome,
        definition_id=parse_id(definition_id, "connector") if definition_id else None,
        cursor=cursor,
    )
    return {"audits": [audit_dict(a) for a in rows], "next_cursor": next_cursor}


@router.get("/analysis-policy", response_model=AnalysisPolicy)
def get_policy(scope: ScopeContext = Depends(current_scope), session: Session = Depends(db_session)):
    return policy.for_scope(session, scope.scope_id)


@router.patch("/analysis-policy", response_model=AnalysisPolicy)
def patch_policy(
    body: AnalysisPolicyPatch, scope: ScopeContext = Depends(current_scope), session: Session = Depends(db_session)
):
    return policy.update(session, scope, **body.model_dump(exclude_none=True))


# ---------------------------------------------------------------- admin


@router.get("/admin/connectors", response_model=ConnectorDefinitionList, dependencies=[Depends(require_admin)])
def all_definitions(session: Session = Depends(db_session)):
    return {"definitions": [definition_dict(d, admin=True) for d in connectors.list_definitions(session)]}


@router.post("/admin/connectors", response_model=ConnectorDefinition, status_code=201)
def create_definition(
    body: ConnectorDefinitionCreate,
    principal: Principal = Depends(require_admin),
    session: Session = Depends(db_session),
):
    row = connectors.create_definition(
        session,
        provider=body.provider,
        name=body.name,
        config=body.config,
        visibility=body.visibility,
        trust_level=body.trust_level,
        enabled=body.enabled,
        credentials=body.credentials,
        created_by=principal.user.user_id if principal.user else None,
    )
    return definition_dict(row, admin=True)


@router.patch(
    "/admin/connectors/{definition_id}", response_model=ConnectorDefinition, dependencies=[Depends(require_admin)]
)
def patch_definition(definition_id: str, body: ConnectorDefinitionPatch, session: Session = Depends(db_session)):
    changes = body.model_dump(exclude_none=True)
    row = connectors.update_definition(
        session,
        parse_id(definition_id, "connector"),
        config=changes.pop("config", None),
        credentials=changes.pop("credentials", None),
        **changes,
    )
    return definition_dict(row, admin=True)


@router.put("/admin/connectors/{definition_id}/grants/{user_id}", status_code=204, response_class=Response)
def grant(
    definition_id: str,
    user_id: str,
    principal: Principal = Depends(require_admin),
    session: Session = Depends(db_session),
):
    from mewdex.platform.users import get_user

    target = get_user(session, parse_id(user_id, "user"))
    if target is None:
        raise ProviderError("not_found", "user not found")
    connectors.grant(
        session,
        parse_id(definition_id, "connector"),
        target.user_id,
        principal.user.user_id if principal.user else None,
    )
    return Response(status_code=204)


@router.delete(
    "/admin/connectors/{definition_id}/grants/{user_id}",
    status_code=204,
    response_class=Response,
    dependencies=[Depends(require_admin)],
)
def revoke(definition_id: str, user_id: str, session: Session = Depends(db_session)):
    connectors.revoke(session, parse_id(definition_id, "connector"), parse_id(user_id, "user"))
    return Response(status_code=204)


@router.get("/admin/connectors/audits", response_model=AuditList, dependencies=[Depends(require_admin)])
def all_audits(
    limit: int = Query(100, ge=1, le=500),
    event: str | None = Query(None, max_length=64),
    outcome: str | None = Query(None, max_length=16),
    definition_id: str | None = Query(None, max_length=64),
    user_id: str | None = Query(None, max_length=64),
    cursor: str | None = Query(None, max_length=2048),
    session: Session = Depends(db_session),
):
    """Every user's outside calls, newest first; ``next_cursor`` pages on."""
    rows, next_cursor = connectors.list_audits(
        session,
        scope_id=None,
        limit=limit,
        event=event,
        outcome=outcome,
        definition_id=parse_id(definition_id, "connector") if definition_id else None,
        user_id=parse_id(user_id, "user") if user_id else None,
        cursor=cursor,
    )
    return {"audits": [audit_dict(a) for a in rows], "next_cursor": next_cursor}
