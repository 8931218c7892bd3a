"""The connectors' routes (issue 15; the service is the package, :mod:`mewdex.providers.connectors`),
imported by the web layer only, which mounts :data:`router`: the JSON API below, then the pages
(:mod:`.pages`). Never answers a secret.

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
from sqlalchemy.orm import Session, sessionmaker

from mewdex.capability import web_kit
from mewdex.dto.errors import DomainError, ErrorBody
from mewdex.dto.scopes import ScopeContext
from mewdex.platform.auth import Principal
from mewdex.providers import connectors, policy
from mewdex.providers.connectors import pages
from mewdex.providers.connectors.shapes import (
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
from mewdex.providers.connectors.views import audit_dict, connection_dict, definition_dict
from mewdex.providers.errors import ProviderError

#: The web layer's dependencies (lent once per process: mewdex.capability.lend).
web = web_kit()
current_principal, current_scope, db_session, parse_id, require_admin = (
    web.current_principal,
    web.current_scope,
    web.db_session,
    web.parse_id,
    web.require_admin,
)

api = APIRouter(
    prefix="/api/v1",
    tags=["connectors"],
    responses={status: {"model": ErrorBody} for status in (401, 403, 404, 409, 422)},
)


def _user(principal: Principal):
    if principal.user is None:
        raise DomainError(
            "no_accounts",
            "connections belong to accounts; single-user mode uses the platform's "
            "connectors (MEWDEX_OPENAI_* or `mewdex connectors create`)",
        )
    return principal.user


# ---------------------------------------------------------------- user


@api.get("/connectors/definitions", response_model=ConnectorDefinitionList)
def my_definitions(principal: Principal = Depends(current_principal), session: Session = Depends(db_session)):
    return {
        "definitions": [
            definition_dict(d, admin=False) for d in connectors.visible_definitions(session, principal.user)
        ]
    }


@api.get("/connectors/connections", response_model=ConnectionList)
def my_connections(principal: Principal = Depends(current_principal), session: Session = Depends(db_session)):
    if principal.user is None:
        return {"connections": []}
    return {"connections": [connection_dict(session, s) for s in connectors.user_connections(session, principal.user)]}


@api.post("/connectors/connections", response_model=Connection, status_code=201)
def connect(
    body: ConnectionCreate,
    principal: Principal = Depends(current_principal),
    sessions: sessionmaker[Session] = Depends(web.sessions),
):
    """Save credentials for a granted definition, then verify them (no transaction held during the
    call); ``state`` ``verified`` or ``failed`` (``last_error``)."""
    with sessions.begin() as session:
        user = session.merge(_user(principal), load=True)
        system = connectors.save_connection(
            session, user, parse_id(body.definition_id, "connector"), body.credentials, body.name
        )
        system_id = system.external_system_id
    return _verified(sessions, principal.scope, system_id, principal)


@api.post("/connectors/connections/{connection_id}/verify", response_model=Connection)
def verify(
    connection_id: str,
    principal: Principal = Depends(current_principal),
    sessions: sessionmaker[Session] = Depends(web.sessions),
):
    _user(principal)
    return _verified(sessions, principal.scope, parse_id(connection_id, "connection"), principal)


def _verified(sessions, scope: ScopeContext, system_id, principal: Principal) -> dict:
    try:
        connectors.verify_connection(sessions, scope, system_id)
    except ProviderError as exc:
        if exc.code == "not_found":
            raise
    with sessions.begin() as session:
        user = session.merge(principal.user, load=True)
        return connection_dict(session, connectors.get_connection(session, user, system_id))


@api.delete("/connectors/connections/{connection_id}", status_code=204, response_class=Response)
def disconnect(
    connection_id: str, principal: Principal = Depends(current_principal), session: Session = Depends(db_session)
):
    connectors.delete_connection(session, _user(principal), parse_id(connection_id, "connection"))
    return Response(status_code=204)


@api.get("/connectors/audits", response_model=AuditList)
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


@api.get("/analysis-policy", response_model=AnalysisPolicy)
def get_policy(scope: ScopeContext = Depends(current_scope), session: Session = Depends(db_session)):
    return policy.for_scope(session, scope.scope_id)


@api.patch("/analysis-policy", response_model=AnalysisPolicy)
def patch_policy(
    body: AnalysisPolicyPatch, scope: ScopeContext = Depends(current_scope), session: Session = Depends(db_session)
):
    return policy.update(session, scope, **body.model_dump(exclude_none=True))


# ---------------------------------------------------------------- admin


@api.get("/admin/connectors", response_model=ConnectorDefinitionList, dependencies=[Depends(require_admin)])
def all_definitions(session: Session = Depends(db_session)):
    return {"definitions": [definition_dict(d, admin=True) for d in connectors.list_definitions(session)]}


@api.post("/admin/connectors", response_model=ConnectorDefinition, status_code=201)
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


@api.patch(
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


@api.put("/admin/connectors/{definition_id}/grants/{user_id}", status_code=204, response_class=Response)
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


@api.delete(
    "/admin/connectors/{definition_id}/grants/{user_id}",
    status_code=204,
    response_class=Response,
    dependencies=[Depends(require_admin)],
)
def revoke(definition_id: str, user_id: str, session: Session = Depends(db_session)):
    connectors.revoke(session, parse_id(definition_id, "connector"), parse_id(user_id, "user"))
    return Response(status_code=204)


@api.get("/admin/connectors/audits", response_model=AuditList, dependencies=[Depends(require_admin)])
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


#: What the web layer mounts: the API, then the pages (:mod:`.pages`).
router = APIRouter()
router.include_router(api)
router.include_router(pages.router)
