"""Telegram sticker sets ↔ collections (through the account's linked Telegram bot):

* ``POST /api/v1/collections/import-sticker-set`` ``{"set", "collection_id"?}`` — import a set;
* ``POST /api/v1/collections/{id}/sticker-set`` ``{"title", "name"}`` — export a collection as a set.

Both run synchronously (a set has at most 120 stickers); see :mod:`mewdex.channels.telegram.stickers`.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from mewdex.channels.telegram import stickers
from mewdex.db.engine import get_sessionmaker
from mewdex.dto.scopes import ScopeContext
from mewdex.dto.sticker_sets import (
    StickerSetExport,
    StickerSetExportRequest,
    StickerSetImport,
    StickerSetImportRequest,
)
from mewdex.web.deps import current_scope, parse_id
from mewdex.web.errors import error_responses

router = APIRouter(prefix="/api/v1/collections", tags=["collections"])


@router.post("/import-sticker-set", status_code=201, response_model=StickerSetImport, responses=error_responses(502))
async def import_sticker_set(body: StickerSetImportRequest, scope: ScopeContext = Depends(current_scope)):
    """Import a Telegram sticker set into a new collection (or ``collection_id``): 201 with the
    collection and the counts. 422 ``sticker_set_name_invalid`` / ``sticker_set_too_large``, 404
    ``sticker_set_not_found`` / ``not_found`` (the collection), 409 ``telegram_not_linked`` /
    ``channel_not_configured``, 502 ``channel_platform_error``."""
    cid = parse_id(body.collection_id, "collection") if body.collection_id else None
    return await run_in_threadpool(stickers.import_set, get_sessionmaker(), scope, body.set, cid)


@router.post(
    "/{collection_id}/sticker-set", status_code=201, response_model=StickerSetExport, responses=error_responses(502)
)
async def export_sticker_set(
    collection_id: str, body: StickerSetExportRequest, scope: ScopeContext = Depends(current_scope)
):
    """Export the collection as a new Telegram sticker set owned by the account's Telegram user:
    201 ``{"name", "link", "added", "skipped"}``. 422 ``sticker_set_name_invalid`` /
    ``sticker_set_title_invalid`` / ``sticker_set_empty`` / ``sticker_set_refused`` (e.g. the name is
    taken), 404 ``not_found``, 409 ``telegram_not_linked``, 502 ``channel_platform_error``."""
    cid = parse_id(collection_id, "collection")
    return await run_in_threadpool(
        stickers.export_set, get_sessionmaker(), scope, cid, title=body.title, name=body.name
    )
