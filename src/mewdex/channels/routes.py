"""The channel framework's routes (issue 17), imported by the web layer only, which mounts
:data:`router` before every channel package's own (``CHANNEL.routes``, mounted as declared):

* ``/api/v1/channels`` — the caller's bindings and the channels offered (its shape gathers the fields
  the channels declare, :func:`list_routes`), the delivery log, a bind code, a linked chat's pool and
  auto-save, revoke;
* ``/help/channels/<name>`` — a channel's set-up guide (``channels/guide.html``, or
  ``channels/guide_missing.html``);
* ``/settings/channels`` — the Channels page (``channels/page.html``, each channel's card the one
  generic ``channels/card.html`` rendering the setup schema its package declares); its scripts
  (``/static/channels.js``, ``/static/channel_card.js``) are this package's ``static/``.

No channel is named here. Errors: 404 ``channel_unknown`` / ``channel_not_bound``, 409
``channel_not_configured`` / ``channel_identity_taken``, 422 ``channel_config_invalid``, 401
``channel_webhook_secret_invalid``, 502 ``channel_platform_error``.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from markupsafe import Markup
from pydantic import create_model
from sqlalchemy.orm import Session

from mewdex.capability import web_kit
from mewdex.channels import bindings, card, delivery, pool, registry, saving
from mewdex.channels import shapes as dto
from mewdex.channels.bindings import ChannelDelivery
from mewdex.channels.platform import loopback
from mewdex.config import get_settings
from mewdex.dto.common import Dto
from mewdex.dto.scopes import ScopeContext
from mewdex.library import collections as library_collections
from mewdex.library import listing

#: The web layer's dependencies (lent once per process: mewdex.capability.lend).
web = web_kit()
current_scope, db_session = web.current_scope, web.db_session

api = APIRouter(tags=["channels"])


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def list_routes() -> APIRouter:
    """``GET /api/v1/channels``, whose channel entries are :class:`mewdex.channels.shapes.ChannelInfo`
    with the fields each channel declares (``CHANNEL.info``; e.g. a token hint), documented as such.
    Built at this module's import (once per process), when every channel is loaded."""
    info = create_model("ChannelInfo", __base__=dto.ChannelInfo, **registry.info_fields())  # type: ignore[call-overload]
    shape = create_model(
        "ChannelList", __base__=Dto, bindings=(list[dto.ChannelBinding], ...), channels=(list[info], ...)
    )
    routes = APIRouter(tags=["channels"])

    @routes.get("/api/v1/channels", response_model=shape)
    def list_channels(session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
        """The caller's bindings (active and revoked) and the channels this installation offers."""
        return {
            "bindings": [bindings.api_view(b) for b in bindings.list_bindings(session, scope.scope_id)],
            "channels": channel_infos(),
        }

    return routes


def delivery_view(d: ChannelDelivery) -> dict[str, Any]:
    return {
        "id": str(d.delivery_id),
        "channel": d.channel,
        "target": d.target,
        "kind": d.kind,
        "meme_id": str(d.meme_id) if d.meme_id else None,
        "text": d.text,
        "source": d.source,
        "conversation_id": str(d.conversation_id) if d.conversation_id else None,
        "status": d.status,
        "attempts": d.attempts,
        "error_code": d.error_code,
        "platform_code": d.platform_code,
        "platform_error": d.platform_error,
        "retry_after_seconds": d.retry_after_seconds,
        "platform_message_id": d.platform_message_id,
        "created_at": d.created_at.isoformat(),
        "updated_at": d.updated_at.isoformat(),
        "sent_at": _iso(d.sent_at),
    }


def channel_infos() -> list[dict[str, Any]]:
    """The channels of this installation as the Channels page and ``GET /api/v1/channels`` list them:
    ``name``, ``configured`` and what the adapter's optional ``status()`` adds."""
    infos = []
    for name in (c.name for c in registry.channels()):
        adapter = registry.adapter(name)
        info: dict[str, Any] = {"name": name, "configured": adapter.configured(), "bind_code": adapter.binds_by_code}
        info.update(adapter.status())
        infos.append(info)
    return infos


@api.get("/api/v1/channels/deliveries", response_model=dto.DeliveryList)
def channel_deliveries(
    channel: str | None = Query(None, max_length=32),
    limit: int = Query(50, ge=1, le=200),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """The caller's delivery log, newest first: each outcome with the platform's error code and text."""
    rows = delivery.list_deliveries(session, scope.scope_id, channel=channel, limit=limit)
    return {"deliveries": [delivery_view(d) for d in rows]}


def public_url_loopback() -> bool:
    """Whether the URL platforms would call back is this machine only (``MEWDEX_PUBLIC_URL`` unset, or
    naming 127.0.0.1 / localhost / ::1): a channel that needs a callback cannot be reached."""
    return loopback(get_settings().public_url)


@api.post("/api/v1/channels/{channel}/code", response_model=dto.BindCode, status_code=201)
def channel_bind_code(
    channel: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
):
    """A one-time bind code (15 minutes) for a channel that binds by a code (``bind_code`` in the
    list): the chat account that sends it to the bot is bound to the caller. 404 ``channel_unknown``,
    409 ``channel_not_configured``, 422 ``channel_config_invalid`` (the channel binds another way)."""
    user_id = bindings.owner_user_id(session, scope.scope_id)
    return bindings.issue_bind_code(session, scope_id=scope.scope_id, user_id=user_id, channel=channel)


@api.put("/api/v1/channels/{channel}/save-all", response_model=dto.ChannelBinding)
def channel_save_all(
    channel: str,
    body: dto.SaveAll,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """Whether the caller's chat saves every image they send there without a word (``config.save_all``;
    the chat's ``/autosave on|off`` sets the same). 404 ``channel_not_bound``."""
    return bindings.api_view(saving.save_all(session, scope.scope_id, channel, body.save_all))


@api.put("/api/v1/channels/{channel}/pool", response_model=dto.ChannelBinding)
def channel_pool(
    channel: str,
    body: dto.Pool,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """Limit the caller's chat to one of their collections (``config.pool``): the bot answers there only
    from it, and what they save there goes into it; ``null`` answers from the whole library again (the
    chat's ``/pool NAME|off`` sets the same). 404 ``channel_not_bound``, 404 ``not_found`` (no such
    collection of the caller's)."""
    return bindings.api_view(pool.set_pool_of_channel(session, scope.scope_id, channel, body.collection_id))


@api.delete("/api/v1/channels/{channel}", response_model=dto.ChannelBinding)
def channel_revoke(channel: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    """Revoke at once: inbound from that chat is treated as unbound, queued deliveries are cancelled."""
    return bindings.api_view(bindings.revoke(session, scope.scope_id, channel))


# ------------------------------------------------------------------ the guides

GUIDE_CACHE = 16  # guides kept rendered (one per channel)


def guides_dir() -> Path:
    """The set-up guides' folder, ``mewdex/channels/guides`` (``<name>.md``): package data, so a wheel
    carries them."""
    return Path(__file__).resolve().parent / "guides"


@lru_cache(maxsize=GUIDE_CACHE)
def _guide_html(path: Path, mtime: float) -> tuple[str, str]:
    """``(title, body HTML)`` of one guide: CommonMark + tables, raw HTML in the markdown escaped
    (``html`` off), links to a sibling ``x.md`` pointed at its page (relative, so under the base path too)."""
    from markdown_it import MarkdownIt

    text = path.read_text(encoding="utf-8")
    md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
    tokens = md.parse(text)
    title = path.stem
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.tag == "h1" and i + 1 < len(tokens):
            title = tokens[i + 1].content
            break
    for tok in tokens:
        for child in tok.children or ():
            href = child.attrGet("href") if child.type == "link_open" else None
            if isinstance(href, str) and href.endswith(".md") and "/" not in href:
                child.attrSet("href", href[:-3])  # a sibling page, relative: under any base path
            elif isinstance(href, str) and href.startswith(("http://", "https://")):
                child.attrSet("target", "_blank")
                child.attrSet("rel", "noopener")
    return title, md.renderer.render(tokens, md.options, {})


pages = APIRouter(include_in_schema=False)


@pages.get("/help/channels/{name}")
def channel_guide(name: str, request: Request, _scope: ScopeContext = Depends(current_scope)):
    """A channel's set-up guide (``mewdex/channels/guides/<name>.md``) as a page in the site's layout;
    the HTML 404 page for an unknown name or a channel without a guide."""
    known = name in {c.name for c in registry.channels()}
    path = guides_dir() / f"{name}.md"
    if not known or not path.is_file():
        context = {"page": "channels", "name": name, "missing": known}
        return web.render(request, "channels/guide_missing.html", context, 404)
    title, body = _guide_html(path, path.stat().st_mtime)
    context = {"page": "channels", "name": name, "title": title, "body": Markup(body)}
    return web.render(request, "channels/guide.html", context)


# ------------------------------------------------------------------ the page

#: What the generic card (``channels/card.html``) reads a package's setup schema with.
CARD_HELPERS = {
    "card_holds": card.holds,
    "card_value": card.lookup,
    "card_key": card.key_of,
    "card_params": card.params_of,
    "card_format": card.format_value,
    "card_kind": card.kind,
    "card_data": dataclasses.asdict,
}


@pages.get("/settings/channels")
def channels_page(
    request: Request, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
):
    """The Channels settings page: the linked chats (each with the collection it answers from, its
    auto-save switch and Remove; a link awaiting the chat's YES says so), each channel's card (the
    generic card rendering the setup schema its package declares, ``CHANNEL.card``), the log."""
    rows = bindings.list_bindings(session, scope.scope_id)
    cards = {c.name: registry.card(c) for c in registry.channels()}
    log = delivery.list_deliveries(session, scope.scope_id, limit=50)
    ids = {d.meme_id for d in log if d.meme_id}
    names = {i: m.display_name for i, m in listing.memes_by_id(session, scope, list(ids)).items()}
    by_channel = {b.channel: bindings.api_view(b) for b in rows}
    collections = [{"id": str(c.id), "name": c.name} for c, _n in library_collections.list_collections(session, scope)]
    return web.render(
        request,
        "channels/page.html",
        {
            "page": "channels",
            "channels": channel_infos(),
            "cards": cards,  # each channel's setup schema (channels/card.html renders it)
            **CARD_HELPERS,
            "declared": {c.name: c for c in registry.channels()},  # shown_by, outbound_only of each
            "bindings": by_channel,
            "linked": [bindings.api_view(b) for b in rows if b.status == "active"],
            "collections": collections,  # a linked chat's pool is one of them
            "collection_ids": {c["id"] for c in collections},
            "public_url": get_settings().public_base(),
            "loopback": public_url_loopback(),
            "deliveries": [{**delivery_view(d), "meme_name": names.get(d.meme_id)} for d in log],
        },
    )


#: What the web layer mounts: the shared API, the channel list, then the guides and the page.
router = APIRouter()
router.include_router(api)
router.include_router(list_routes())
router.include_router(pages)
