"""Telegram sticker sets ↔ collections (through the account's linked Telegram bot).

* :func:`import_set` — a set by its name or link (``https://t.me/addstickers/NAME``): ``getStickerSet``,
  then each sticker's file through ``getFile`` and the file URL (the adapter's
  :meth:`~mewdex.channels.telegram.adapter.TelegramAdapter.fetch_image`, under the egress rules), each
  entering through the upload path (:func:`mewdex.library.memes.add_image`: quota, duplicates,
  processing) into a new or named collection of the account. A file already in the library is added
  to the collection, not stored twice. At most :data:`MAX_STICKERS` stickers (Telegram's limit).
* :func:`export_set` — a collection as a new set ``<name>_by_<bot username>`` owned by the Telegram
  user of the account's binding: ``uploadStickerFile`` for each meme, then ``createNewStickerSet``
  (the first :data:`CREATE_AT_ONCE`) and ``addStickerToSet`` (the rest). Stills become 512-px PNG
  (WebP when a PNG is too big), a WebM of at most 3 s with a 512-px side is a video sticker, a TGS an
  animated one; what cannot be converted is skipped and named in the answer.

Errors (``ChannelError``): ``sticker_set_name_invalid`` (422), ``sticker_set_not_found`` (404),
``sticker_set_too_large`` (422), ``sticker_set_empty`` (422: nothing in the collection can be a
sticker), ``telegram_not_linked`` (409: the account has no confirmed Telegram binding),
``channel_not_configured`` (409: no bot token), ``channel_platform_error`` (502), collection errors
(``not_found``).
"""

from __future__ import annotations

import io
import logging
import re
from typing import Any
from uuid import UUID

from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings
from mewdex.channels.base import DeliveryFailed, MemeFile
from mewdex.channels.errors import ChannelError
from mewdex.channels.media import meme_file
from mewdex.channels.platform import PlatformError
from mewdex.channels.telegram import NAME, api
from mewdex.dto.errors import DomainError
from mewdex.dto.scopes import ScopeContext
from mewdex.egress import EgressError
from mewdex.library import collections, memes

log = logging.getLogger(__name__)
#: Telegram's largest set (regular stickers).
MAX_STICKERS = 120
#: How many stickers ``createNewStickerSet`` takes at once (the rest: ``addStickerToSet``).
CREATE_AT_ONCE = 50
STICKER_SIDE = 512
STATIC_MAX_BYTES = 512 * 1024
VIDEO_MAX_BYTES = 256 * 1024
VIDEO_MAX_MS = 3000
ANIMATED_MAX_BYTES = 64 * 1024
#: The emoji every exported sticker is listed under (Telegram asks for at least one).
EMOJI = "🙂"
_LINK = re.compile(r"^(?:https?://)?(?:www\.)?(?:t\.me|telegram\.me)/addstickers/([^/?#]+)/?(?:[?#].*)?$", re.I)
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_EXTENSION = {"animated": ".tgs", "video": ".webm", "static": ".webp"}


def set_name_of(ref: str) -> str:
    """The set name in ``ref`` (a name or ``https://t.me/addstickers/NAME``); 422
    ``sticker_set_name_invalid`` when it is neither."""
    ref = (ref or "").strip()
    found = _LINK.match(ref)
    name = found.group(1) if found else ref
    if not _NAME.match(name):
        raise ChannelError("sticker_set_name_invalid", "give a sticker set name or a https://t.me/addstickers/… link")
    return name


def set_link(name: str) -> str:
    return f"https://t.me/addstickers/{name}"


def _linked_owner(session: Session, scope_id: str) -> str:
    """The Telegram user id of the account's confirmed, in-force binding; 409 ``telegram_not_linked``."""
    row = bindings.get(session, scope_id, NAME)
    if row is None or not bindings.in_force(session, row):
        raise ChannelError("telegram_not_linked", "link a Telegram chat to this account first (Channels page)")
    api.token()  # channel_not_configured (409) when the installation has no bot
    return str(bindings.owner_of(row))


def _refused(exc: DeliveryFailed, what: str) -> ChannelError:
    return ChannelError("channel_platform_error", f"Telegram refused {what}: {exc.platform_error or exc.code}")


def import_set(
    sessions: sessionmaker[Session], scope: ScopeContext, ref: str, collection_id: UUID | None = None
) -> dict[str, Any]:
    """Import the sticker set ``ref`` into ``collection_id`` (one of the scope's), else into a new
    collection named after the set's title. ``{"collection_id", "collection_name", "set", "imported",
    "already_there", "failed"}`` (counts of stickers). Errors: module doc."""
    from mewdex.channels.telegram.adapter import ADAPTER
    from mewdex.storage import blob_store

    name = set_name_of(ref)
    with sessions.begin() as session:
        _linked_owner(session, scope.scope_id)
        if collection_id is not None:
            collections.find(session, scope, collection_id)
    try:
        found = api.call("getStickerSet", {"name": name})
    except DeliveryFailed as exc:
        if exc.platform_code == "400":
            raise ChannelError("sticker_set_not_found", f"Telegram knows no sticker set {name!r}") from None
        raise _refused(exc, "getStickerSet") from None
    stickers = [s for s in (found or {}).get("stickers") or [] if isinstance(s, dict) and s.get("file_id")]
    if len(stickers) > MAX_STICKERS:
        raise ChannelError(
            "sticker_set_too_large", f"a set has at most {MAX_STICKERS} stickers; this one {len(stickers)}"
        )
    with sessions.begin() as session:
        if collection_id is None:
            collection = collections.create_unique(session, scope, str(found.get("title") or name)[:100] or name)
        else:
            collection = collections.find(session, scope, collection_id)
        target, target_name = collection.id, collection.name
    counts = {"imported": 0, "already_there": 0, "failed": 0}
    for index, sticker in enumerate(stickers, 1):
        kind = "animated" if sticker.get("is_animated") else "video" if sticker.get("is_video") else "static"
        try:
            data = ADAPTER.fetch_image(str(sticker["file_id"]))
            result = memes.add_image(
                sessions,
                blob_store(),
                scope,
                data,
                filename=f"{name}_{index}{_EXTENSION[kind]}",
                provenance={"source": "telegram_sticker_set", "set": name, "emoji": sticker.get("emoji")},
                collection_ids=[target],
            )
        except (EgressError, PlatformError, DeliveryFailed, DomainError) as exc:
            log.warning("telegram: sticker %d of a set could not be fetched (%s)", index, getattr(exc, "code", exc))
            counts["failed"] += 1
            continue
        key = {"created": "imported", "duplicate": "already_there"}.get(result.status, "failed")
        counts[key] += 1
    return {"collection_id": str(target), "collection_name": target_name, "set": name, **counts}


# ------------------------------------------------------------------ export


def sticker_of(meme: MemeFile) -> tuple[str, bytes, str] | str:
    """``(sticker_format, bytes, file name)`` of a meme as a sticker, or why it cannot be one: a TGS
    is ``animated``, a WebM of ≤ 3 s with a 512-px side ``video``, a still a 512-px PNG (WebP when
    the PNG is over 512 KiB) ``static``; other clips and animations are refused."""
    from PIL import Image

    from mewdex.library.images import ImageError, probe

    if meme.extension == ".tgs":
        if len(meme.data) > ANIMATED_MAX_BYTES:
            return "an animated sticker is at most 64 KiB"
        return "animated", meme.data, "sticker.tgs"
    if meme.extension == ".webm":
        try:
            info = probe(meme.data)
        except ImageError:
            return "the clip cannot be read"
        if info.duration_ms > VIDEO_MAX_MS or max(info.width, info.height) != STICKER_SIDE:
            return "a video sticker is a WebM of at most 3 s with a 512-px side"
        if len(meme.data) > VIDEO_MAX_BYTES:
            return "a video sticker is at most 256 KiB"
        return "video", meme.data, "sticker.webm"
    if meme.animated:
        return "an animation other than a WebM or TGS cannot be a sticker"
    try:
        opened = Image.open(io.BytesIO(meme.as_png()))
        opened.load()
    except (ImageError, OSError, ValueError):
        return "the image cannot be read"
    scale = STICKER_SIDE / max(opened.size)
    size = (
        max(1, min(STICKER_SIDE, round(opened.width * scale))),
        max(1, min(STICKER_SIDE, round(opened.height * scale))),
    )
    frame = opened.convert("RGBA").resize(size, Image.Resampling.LANCZOS)
    out = io.BytesIO()
    frame.save(out, "PNG", optimize=True)
    if out.tell() <= STATIC_MAX_BYTES:
        return "static", out.getvalue(), "sticker.png"
    out = io.BytesIO()
    frame.save(out, "WEBP", quality=85)
    if out.tell() <= STATIC_MAX_BYTES:
        return "static", out.getvalue(), "sticker.webp"
    return "the image is too big for a sticker"


_TYPES = {".png": "image/png", ".webp": "image/webp", ".webm": "video/webm", ".tgs": "application/x-tgsticker"}


def export_set(
    sessions: sessionmaker[Session], scope: ScopeContext, collection_id: UUID, *, title: str, name: str
) -> dict[str, Any]:
    """Create the Telegram sticker set ``<name>_by_<bot username>`` (titled ``title``) from the
    collection's memes, owned by the Telegram user of the account's binding. ``{"name", "link",
    "added", "skipped": [{"meme_id", "name", "reason"}]}``. Errors: module doc."""
    with sessions.begin() as session:  # another account's collection is 404 before anything else is said
        collections.find(session, scope, collection_id)
    title = (title or "").strip()
    if not 1 <= len(title) <= 64:
        raise ChannelError("sticker_set_title_invalid", "a sticker set's title has 1 to 64 characters")
    with sessions.begin() as session:
        owner = _linked_owner(session, scope.scope_id)
        ids = [m.id for m in collections.members(session, scope, collection_id)]
    if len(ids) > MAX_STICKERS:
        raise ChannelError(
            "sticker_set_too_large", f"a set has at most {MAX_STICKERS} stickers; this collection {len(ids)}"
        )
    username = api.bot_username(sessions)
    suffix = f"_by_{username}"
    base = (name or "").strip()
    full = base if base.lower().endswith(suffix.lower()) else f"{base}{suffix}"
    if not base or not _NAME.match(full) or "__" in full:
        raise ChannelError(
            "sticker_set_name_invalid", f"a set name has letters, digits and _ and ends with {suffix} (64 at most)"
        )
    uploaded: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for meme_id in ids:
        with sessions.begin() as session:
            meme = meme_file(session, scope.scope_id, meme_id)
        if meme is None:
            continue
        form = sticker_of(meme)
        if isinstance(form, str):
            skipped.append({"meme_id": meme.meme_id, "name": meme.display_name, "reason": form})
            continue
        fmt, data, filename = form
        content_type = _TYPES[filename[filename.rfind(".") :]]
        try:
            result = api.call(
                "uploadStickerFile",
                {"user_id": owner, "sticker_format": fmt},
                files={"sticker": (filename, data, content_type)},
                timeout=60,
            )
        except DeliveryFailed as exc:
            if exc.platform_code != "400":
                raise _refused(exc, "uploadStickerFile") from None
            skipped.append({"meme_id": meme.meme_id, "name": meme.display_name, "reason": exc.platform_error or ""})
            continue
        uploaded.append({"sticker": result["file_id"], "format": fmt, "emoji_list": [EMOJI]})
    if not uploaded:
        raise ChannelError("sticker_set_empty", "nothing in this collection can be a sticker", {"skipped": skipped})
    try:
        api.call(
            "createNewStickerSet",
            {"user_id": owner, "name": full, "title": title, "stickers": uploaded[:CREATE_AT_ONCE]},
        )
        for sticker in uploaded[CREATE_AT_ONCE:]:
            api.call("addStickerToSet", {"user_id": owner, "name": full, "sticker": sticker})
    except DeliveryFailed as exc:
        if exc.platform_code == "400":
            raise ChannelError(
                "sticker_set_refused", f"Telegram refused the set: {exc.platform_error or exc.code}"
            ) from None
        raise _refused(exc, "createNewStickerSet") from None
    return {"name": full, "link": set_link(full), "added": len(uploaded), "skipped": skipped}
