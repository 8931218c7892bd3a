"""Telegram's routes (imported by the web layer only):

* ``POST /api/v1/channels/telegram/link`` — a one-time deep link ``https://t.me/<bot>?start=<code>``;
* ``PUT /api/v1/channels/telegram/token`` (admin) — the installation's bot token (sealed; empty removes it);
* ``POST /channels/telegram/webhook`` — Telegram's updates in webhook mode (the secret header is checked).
* ``GET /channels/telegram/card.js`` — the Channels page card's script (its markup: ``card.html``).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings
from mewdex.channels.errors import ChannelError
from mewdex.channels.registry import web_kit
from mewdex.channels.telegram import inbound, setup
from mewdex.dto import channels as dto
from mewdex.dto.scopes import ScopeContext

#: The card's script (its markup is card.html, included by the Channels page).
CARD_SCRIPT = Path(__file__).with_name("card.js")


#: The web layer's dependencies (lent once per process: channels.registry.lend).
web = web_kit()
router = APIRouter(tags=["channels"])


@router.get("/channels/telegram/card.js", include_in_schema=False)
def telegram_card_script():
    """The Telegram card's script (card.js beside this module)."""
    return Response(CARD_SCRIPT.read_bytes(), media_type="text/javascript", headers={"cache-control": "no-cache"})


@router.post("/api/v1/channels/telegram/link", response_model=dto.TelegramLink)
def telegram_link(
    session: Session = Depends(web.db_session),
    scope: ScopeContext = Depends(web.current_scope),
    sessions: sessionmaker[Session] = Depends(web.sessions),
):
    """A one-time deep link ``https://t.me/<bot>?start=<code>``: the chat that opens it (Start) is bound."""
    user_id = bindings.owner_user_id(session, scope.scope_id)
    return setup.link(session, sessions, scope_id=scope.scope_id, user_id=user_id)


@router.put("/api/v1/channels/telegram/token", response_model=dto.TelegramTokenStatus)
def telegram_token_set(
    body: dto.TelegramTokenSet, session: Session = Depends(web.db_session), _admin=Depends(web.require_admin)
):
    """Save the installation's bot token (admin; sealed; empty removes it). It is used at once, without
    a restart; ``MEWDEX_TELEGRAM_BOT_TOKEN``, when set, still wins (``source: environment``).
    422 ``channel_config_invalid`` for a value that is not a bot token."""
    return setup.set_stored_token(session, body.token)


@router.post(inbound.WEBHOOK_PATH, include_in_schema=False)
async def telegram_webhook(
    request: Request,
    secret: str | None = Header(None, alias=inbound.SECRET_HEADER),
    sessions: sessionmaker[Session] = Depends(web.sessions),
):
    """Telegram's updates (webhook mode): the secret header is checked, the update queued, 200 at once."""
    try:
        update = await request.json()
    except ValueError:
        raise ChannelError("invalid_request", "the body is not JSON") from None

    def work() -> str:
        with sessions.begin() as session:
            return inbound.accept_webhook(session, secret, update)

    return {"ok": True, "queued": await run_in_threadpool(work)}
