"""Telegram's routes (imported by the web layer only):

* ``POST /api/v1/channels/telegram/link`` — a one-time deep link ``https://t.me/<bot>?start=<code>``;
* ``PUT /api/v1/channels/telegram/token`` (admin) — the installation's bot token (sealed; empty removes it);
* ``POST /channels/telegram/webhook`` — Telegram's updates in webhook mode (the secret header is checked);
* sticker sets ↔ collections (through the account's linked bot; synchronous: a set has at most 120
  stickers; :mod:`mewdex.channels.telegram.stickers`): ``POST /api/v1/collections/import-sticker-set``
  ``{"set", "collection_id"?}`` imports a set, ``POST /api/v1/collections/{id}/sticker-set``
  ``{"title", "name"}`` exports a collection as a set.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings
from mewdex.channels.errors import ChannelError
from mewdex.channels.registry import web_kit
from mewdex.channels.telegram import inbound, setup, stickers
from mewdex.channels.telegram import shapes as dto
from mewdex.dto.errors import ErrorBody
from mewdex.dto.scopes import ScopeContext

#: The sticker-set routes document their 502 (Telegram refused or could not be reached).
PLATFORM_ERROR: dict[int | str, dict[str, Any]] = {502: {"model": ErrorBody}}


def _collection_id(value: str) -> UUID:
    """A path's collection id; anything else is 404 ``not_found``, as a missing collection."""
    try:
        return UUID(value)
    except ValueError:
        raise ChannelError("not_found", "collection not found") from None


#: The web layer's dependencies (lent once per process: channels.registry.lend).
web = web_kit()
router = APIRouter(tags=["channels"])


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


@router.post(
    "/api/v1/collections/import-sticker-set",
    status_code=201,
    response_model=dto.StickerSetImport,
    responses=PLATFORM_ERROR,
    tags=["collections"],
)
async def import_sticker_set(
    body: dto.StickerSetImportRequest,
    scope: ScopeContext = Depends(web.current_scope),
    sessions: sessionmaker[Session] = Depends(web.sessions),
):
    """Import a Telegram sticker set into a new collection (or ``collection_id``): 201 with the
    collection and the counts. 422 ``sticker_set_name_invalid`` / ``sticker_set_too_large``, 404
    ``sticker_set_not_found`` / ``not_found`` (the collection), 409 ``telegram_not_linked`` /
    ``channel_not_configured``, 502 ``channel_platform_error``."""
    cid = _collection_id(body.collection_id) if body.collection_id else None
    return await run_in_threadpool(stickers.import_set, sessions, scope, body.set, cid)


@router.post(
    "/api/v1/collections/{collection_id}/sticker-set",
    status_code=201,
    response_model=dto.StickerSetExport,
    responses=PLATFORM_ERROR,
    tags=["collections"],
)
async def export_sticker_set(
    collection_id: str,
    body: dto.StickerSetExportRequest,
    scope: ScopeContext = Depends(web.current_scope),
    sessions: sessionmaker[Session] = Depends(web.sessions),
):
    """Export the collection as a new Telegram sticker set owned by the account's Telegram user:
    201 ``{"name", "link", "added", "skipped"}``. 422 ``sticker_set_name_invalid`` /
    ``sticker_set_title_invalid`` / ``sticker_set_empty`` / ``sticker_set_refused`` (e.g. the name is
    taken), 404 ``not_found``, 409 ``telegram_not_linked``, 502 ``channel_platform_error``."""
    cid = _collection_id(collection_id)
    return await run_in_threadpool(stickers.export_set, sessions, scope, cid, title=body.title, name=body.name)
