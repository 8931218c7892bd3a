"""The webhook channel's route: ``POST /api/v1/channels/webhook`` binds (or re-binds) the caller's
webhook to a URL with a new signing secret, shown this once. Imported by the web layer only."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session

from mewdex.channels import bindings
from mewdex.channels.registry import web_kit
from mewdex.channels.webhook import setup
from mewdex.channels.webhook import shapes as dto
from mewdex.dto.scopes import ScopeContext

#: The web layer's dependencies (lent once per process: channels.registry.lend).
web = web_kit()
router = APIRouter(tags=["channels"])


@router.post("/api/v1/channels/webhook", response_model=dto.WebhookCreated, status_code=201)
def channel_webhook_create(
    body: dto.WebhookCreate,
    session: Session = Depends(web.db_session),
    scope: ScopeContext = Depends(web.current_scope),
):
    """Bind (or re-bind) the webhook channel to ``url`` with a new signing secret, shown this once."""
    user_id = bindings.owner_user_id(session, scope.scope_id)
    row, secret = setup.connect(session, scope_id=scope.scope_id, user_id=user_id, url=body.url)
    return {"binding": bindings.api_view(row), "secret": secret}
