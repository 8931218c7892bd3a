"""The connectors' pages (issue 15, point 8), mounted with the API by :mod:`.routes` (web layer only).
Reads only; every change goes through the connectors JSON API (``/static/connectors.js``, this
package's ``static/``). Templates: ``connectors/page.html``, ``connectors/admin.html``,
``connectors/audits.html`` (this package's).

* ``/connectors`` — the user's page: connectors they may use (platform ones and granted ones), a
  form per definition to connect with their own credentials (only the hint is ever shown back),
  their connections with verification state, the scope's analysis policy, and this month's usage
  by model profile with costs (CNY).
* ``/connectors/audits`` — the user's own outside calls; ``/admin/connectors/audits`` — everyone's
  (admin). Filters: event, outcome, connector (and user for admins); cursor paging.
* ``/admin/connectors`` — admins: definitions (create, enable/disable, visibility, config with its
  revision, platform credentials) and grants to users.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from sqlalchemy.orm import Session

from mewdex.capability import web_kit
from mewdex.dto.cursor import CursorInvalid
from mewdex.platform import usage, users
from mewdex.platform.auth import Principal
from mewdex.providers import connectors, policy
from mewdex.providers.connectors.views import audit_dict, connection_dict, definition_dict

#: The web layer's dependencies (lent once per process: mewdex.capability.lend).
web = web_kit()
current_principal, db_session, require_admin, render = (
    web.current_principal,
    web.db_session,
    web.require_admin,
    web.render,
)

router = APIRouter(include_in_schema=False)
AUDIT_PAGE = 50


def _month_start() -> datetime:
    return datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _credential_fields(provider: str) -> tuple[str, ...]:
    try:
        return connectors.provider_spec(provider).credential_fields
    except Exception:  # noqa: BLE001 — a definition of a provider this build no longer knows
        return ()


@router.get("/connectors")
def connectors_page(
    request: Request, principal: Principal = Depends(current_principal), session: Session = Depends(db_session)
):
    user = principal.user
    connections = [connection_dict(session, s) for s in connectors.user_connections(session, user)] if user else []
    by_definition = {c["definition_id"]: c for c in connections}
    definitions = []
    for d in connectors.visible_definitions(session, user):
        item = definition_dict(d, admin=False)
        item["credential_fields"] = _credential_fields(d.provider)
        item["connection"] = by_definition.get(item["id"])
        definitions.append(item)
    now = datetime.now(UTC)
    return render(
        request,
        "connectors/page.html",
        {
            "page": "connectors",
            "accounts": user is not None,
            "definitions": definitions,
            "connections": connections,
            "policy": policy.for_scope(session, principal.scope.scope_id),
            "usage": usage.summary(
                session, start=_month_start(), end=now, group_by="model_profile", scope_id=principal.scope.scope_id
            ),
        },
    )


def _audits_context(
    session: Session, *, scope_id: str | None, filters: dict[str, str], cursor: str, admin: bool
) -> dict[str, Any]:
    definitions = {str(d.definition_id): d.name for d in connectors.list_definitions(session)}
    people = {str(u.user_id): u.email for u in users.list_users(session)} if admin else {}
    known_definition = filters["definition"] if filters["definition"] in definitions else None
    known_user = filters["user"] if filters["user"] in people else None
    try:
        rows, next_cursor = connectors.list_audits(
            session,
            scope_id=scope_id,
            limit=AUDIT_PAGE,
            event=filters["event"] or None,
            outcome=filters["outcome"] or None,
            definition_id=known_definition,
            user_id=known_user,
            cursor=cursor or None,
        )
        bad_cursor = False
    except CursorInvalid:
        rows, next_cursor, bad_cursor = [], None, True
    return {
        "audits": [audit_dict(a) for a in rows],
        "next_cursor": next_cursor,
        "paged": bool(cursor),
        "bad_cursor": bad_cursor,
        "filters": filters,
        "events": connectors.audit_events(session, scope_id),
        "outcomes": connectors.AUDIT_OUTCOMES,
        "definition_names": definitions,
        "user_emails": people,
        "admin": admin,
    }


def _filters(event: str, outcome: str, definition: str, user: str = "") -> dict[str, str]:
    return {"event": event[:64], "outcome": outcome[:16], "definition": definition[:64], "user": user[:64]}


@router.get("/connectors/audits")
def my_audits_page(
    request: Request,
    event: str = "",
    outcome: str = "",
    definition: str = "",
    cursor: str = Query("", max_length=2048),
    principal: Principal = Depends(current_principal),
    session: Session = Depends(db_session),
):
    context = _audits_context(
        session,
        scope_id=principal.scope.scope_id,
        filters=_filters(event, outcome, definition),
        cursor=cursor,
        admin=False,
    )
    return render(request, "connectors/audits.html", {"page": "connectors", "action": "/connectors/audits", **context})


@router.get("/admin/connectors/audits", dependencies=[Depends(require_admin)])
def all_audits_page(
    request: Request,
    event: str = "",
    outcome: str = "",
    definition: str = "",
    user: str = "",
    cursor: str = Query("", max_length=2048),
    session: Session = Depends(db_session),
):
    context = _audits_context(
        session, scope_id=None, filters=_filters(event, outcome, definition, user), cursor=cursor, admin=True
    )
    return render(request, "connectors/audits.html", {"page": "admin", "action": "/admin/connectors/audits", **context})


@router.get("/admin/connectors", dependencies=[Depends(require_admin)])
def admin_connectors_page(request: Request, session: Session = Depends(db_session)):
    specs = connectors.provider_specs()
    definitions = []
    for d in connectors.list_definitions(session):
        item = definition_dict(d, admin=True)
        item["grants"] = [
            {"id": str(u.user_id), "email": u.email} for u in connectors.grants_of(session, d.definition_id)
        ]
        item["credential_fields"] = _credential_fields(d.provider)
        definitions.append(item)
    return render(
        request,
        "connectors/admin.html",
        {
            "page": "admin",
            "definitions": definitions,
            "providers": list(specs),
            "credential_fields": {name: list(spec.credential_fields) for name, spec in specs.items()},
            "users": [{"id": str(u.user_id), "email": u.email} for u in users.list_users(session)],
        },
    )
