"""Discord's HTTP routes, mounted by the web app (:func:`router`).

Set-up (the caller's session; errors as :mod:`mewdex.channels.discord.setup` says):

* ``GET /api/v1/channels/discord`` — the card's state: the application, the Interactions Endpoint
  URL to paste into the developer portal, whether the commands are registered, the linked person,
  the schedules' channel, ``loopback`` (Discord cannot reach this URL);
* ``PUT /api/v1/channels/discord`` ``{"bot_token", "channel_id"?}`` — connect the application;
* ``POST /api/v1/channels/discord/commands`` — register ``/meme``, ``/link``, "Find a meme for this";
* ``PUT /api/v1/channels/discord/channel`` ``{"channel_id"}`` — where scheduled memes go (null: nowhere).

The link code is the framework's (``POST /api/v1/channels/discord/code``: the adapter binds by a code).

The card on the Channels page is declared (``card.py``), rendered by the web shell's generic card.

Discord's side (no session: the Ed25519 signature is checked):
``POST /channels/discord/{application_id}/interactions`` — 401 ``channel_webhook_secret_invalid``
for a bad or missing signature, else the interaction response (:func:`interactions.accept`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings
from mewdex.channels.discord import interactions, setup
from mewdex.channels.platform import loopback
from mewdex.channels.registry import web_kit
from mewdex.dto.scopes import ScopeContext


class Connect(BaseModel):
    bot_token: str = Field(min_length=1, max_length=200, description="The application's bot token (Bot → Reset Token).")
    channel_id: str | None = Field(None, max_length=32, description="Where scheduled memes go (Copy Channel ID).")


class ChannelChoice(BaseModel):
    channel_id: str | None = Field(None, max_length=32, description="Where scheduled memes go; null: nowhere.")


class Status(BaseModel):
    application_id: str | None
    application_name: str | None
    endpoint_url: str | None = Field(description="The Interactions Endpoint URL for the developer portal.")
    loopback: bool = Field(description="The endpoint URL is this machine only: Discord cannot reach it.")
    commands_registered: bool
    linked: bool = Field(description="Someone ran /link with this account's code.")
    channel_id: str | None


class Commands(BaseModel):
    registered: list[str]


#: The web layer's dependencies (lent once per process: channels.registry.lend).
web = web_kit()
router = APIRouter(tags=["channels"])


def status(session: Session, scope: ScopeContext, base: str) -> dict[str, Any]:
    """The card's state (``base``: the public base URL of the request's app)."""
    found = setup.status(bindings.get(session, scope.scope_id, setup.NAME))
    app = found["application_id"]
    url = f"{base}{setup.endpoint_path(app)}" if app else None
    return {**found, "endpoint_url": url, "loopback": loopback(url or base)}


@router.get("/api/v1/channels/discord", response_model=Status)
def discord_status(
    base: str = Depends(web.public_base_url),
    session: Session = Depends(web.db_session),
    scope: ScopeContext = Depends(web.current_scope),
):
    """The Discord card's state (module doc); nothing of the bot token."""
    return status(session, scope, base)


@router.put("/api/v1/channels/discord", response_model=Status)
def discord_connect(
    body: Connect,
    base: str = Depends(web.public_base_url),
    session: Session = Depends(web.db_session),
    scope: ScopeContext = Depends(web.current_scope),
):
    """Connect the caller's Discord application by its bot token (Discord is asked which
    application it is). 422 ``channel_config_invalid``, 409 ``channel_identity_taken``, 502
    ``channel_platform_error``."""
    owner = bindings.owner_user_id(session, scope.scope_id)
    setup.connect(session, scope_id=scope.scope_id, user_id=owner, bot_token=body.bot_token, channel_id=body.channel_id)
    return status(session, scope, base)


@router.post("/api/v1/channels/discord/commands", response_model=Commands)
def discord_commands(session: Session = Depends(web.db_session), scope: ScopeContext = Depends(web.current_scope)):
    """Register the commands on the caller's application. 404 ``channel_not_bound``, 502."""
    return {"registered": setup.register_commands(session, scope.scope_id)}


@router.put("/api/v1/channels/discord/channel", response_model=Status)
def discord_channel(
    body: ChannelChoice,
    base: str = Depends(web.public_base_url),
    session: Session = Depends(web.db_session),
    scope: ScopeContext = Depends(web.current_scope),
):
    """Choose the channel scheduled memes go to. 422 ``channel_config_invalid``, 404."""
    setup.set_channel(session, scope.scope_id, body.channel_id)
    return status(session, scope, base)


@router.post(setup.endpoint_path("{application_id}"), include_in_schema=False)
async def discord_interactions(
    application_id: str,
    request: Request,
    signature: str | None = Header(None, alias="X-Signature-Ed25519"),
    timestamp: str | None = Header(None, alias="X-Signature-Timestamp"),
    sessions: sessionmaker[Session] = Depends(web.sessions),
):
    """Discord's interactions (module doc)."""
    body = await request.body()

    def work() -> dict[str, Any]:
        with sessions.begin() as session:
            return interactions.accept(session, application_id, signature, timestamp, body)

    return await run_in_threadpool(work)
