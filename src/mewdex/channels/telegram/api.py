"""The Telegram Bot API client: the bot token (the environment's, else the admin's sealed one),
:func:`call`, the bot's username and :func:`send_file` (a meme by a cached ``file_id`` or an upload).

Calls are ``POST <MEWDEX_TELEGRAM_API_URL>/bot<token>/<method>`` through
:func:`mewdex.channels.platform.call_json`; answers ``{"ok": true, "result"}`` or ``{"ok": false,
"error_code", "description", "parameters": {"retry_after"}}``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from mewdex import hooks
from mewdex.channels import state
from mewdex.channels.base import DeliveryFailed, MemeFile
from mewdex.channels.errors import ChannelError
from mewdex.channels.platform import PlatformError, call_json, failure, multipart
from mewdex.channels.telegram import NAME
from mewdex.channels.telegram.settings import settings
from mewdex.db.engine import get_sessionmaker
from mewdex.platform import instance
from mewdex.providers import sealed_fields, secrets

log = logging.getLogger(__name__)
PHOTO_EXTENSIONS = (".jpg", ".jpeg", ".png")
STICKER_EXTENSIONS = (".webm", ".tgs")  # video and animated stickers: sendSticker
_TYPES = {
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".png": "image/png",
    ".gif": "image/gif",
    ".mp4": "video/mp4",
    ".webm": "video/webm",
    ".tgs": "application/x-tgsticker",
}


TOKEN_SETTING = "channel_telegram_bot"
hooks.provide("sealed_settings", TOKEN_SETTING, ("token",))  # the bot token saved on the Channels page
TOKEN_SHAPE = re.compile(r"[0-9]{3,20}:[A-Za-z0-9_-]{20,100}")


def _token_aad() -> str:
    return sealed_fields.platform_setting_aad(TOKEN_SETTING, "token")


def _stored(session: Session) -> dict[str, Any] | None:
    value = instance.get_setting(session, TOKEN_SETTING, None)
    return value if isinstance(value, dict) and secrets.is_sealed(value.get("token")) else None


def configured_token() -> tuple[str | None, str | None]:
    """``(token, source)``: ``MEWDEX_TELEGRAM_BOT_TOKEN`` (source ``environment``) wins over the
    admin's sealed setting (``settings``); ``(None, None)`` when neither is set or the stored one
    cannot be opened (its key is gone; logged without the token)."""
    env = settings().telegram_bot_token
    if env:
        return env, "environment"
    with get_sessionmaker()() as session:
        stored = _stored(session)
    if stored is None:
        return None, None
    try:
        return secrets.open_sealed(stored["token"], _token_aad()), "settings"
    except secrets.SecretError:
        log.warning("telegram: the stored bot token cannot be opened (its key is missing)")
        return None, None


def token() -> str:
    """The bot token (:func:`configured_token`); ``channel_not_configured`` (409) when there is none."""
    value, _source = configured_token()
    if not value:
        raise ChannelError(
            "channel_not_configured",
            "Telegram is not set up (the admin sets the bot token on the Channels page or MEWDEX_TELEGRAM_BOT_TOKEN)",
        )
    return value


def bot_id() -> str:
    """The bot's numeric id (the part of the token before ``:``)."""
    return token().split(":", 1)[0]


def webhook_secret() -> str:
    """The secret Telegram echoes in ``X-Telegram-Bot-Api-Secret-Token``."""
    configured = settings().telegram_webhook_secret
    if configured:
        return configured
    return hmac.new(token().encode(), b"mewdex telegram webhook", hashlib.sha256).hexdigest()


def call(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    files: dict[str, tuple[str, bytes, str]] | None = None,
    timeout: float = 30.0,
) -> Any:
    """One Bot API call; its ``result``. Raises :class:`DeliveryFailed` (``channel_rate_limited``
    with ``retry_after``, ``channel_blocked``, ``channel_platform_error``, ``channel_unreachable``
    when there was no answer). Nothing raised names the token."""
    url = f"{settings().telegram_api_url.rstrip('/')}/bot{token()}/{method}"
    if files:
        body, content_type = multipart(params or {}, files)
    else:
        body, content_type = json.dumps(params or {}, ensure_ascii=False).encode(), "application/json"
    try:
        answer = call_json(
            "POST", url, platform="Telegram", what=method, error_code="channel_platform_error",
            headers={"content-type": content_type}, content=body, max_bytes=8 * 1024 * 1024, timeout=timeout,
            errors_in_body=True,  # Telegram explains a refusal in {"ok": false, "error_code", "description"}
        )  # fmt: skip
    except PlatformError as exc:
        raise failure(exc) from None
    data = answer.data
    if data.get("ok"):
        return data.get("result")
    code = int(data.get("error_code") or answer.status)
    description = str(data.get("description") or "")[:500]
    retry_after = (data.get("parameters") or {}).get("retry_after")
    if code == 429 or retry_after is not None:
        raise DeliveryFailed(
            "channel_rate_limited",
            f"Telegram asked to wait {retry_after} s",
            platform_code=code,
            platform_error=description,
            retry_after=float(retry_after or 1),
        )
    raise DeliveryFailed(
        "channel_blocked" if code == 403 else "channel_platform_error",
        f"Telegram refused {method}: {description}",
        platform_code=code,
        platform_error=description,
        retryable=code >= 500,
    )


def bot_username(sessions: sessionmaker[Session]) -> str:
    """The bot's @username (``getMe`` once, then from ``channel_bots``). Raises ``ChannelError``
    ``channel_not_configured`` / ``channel_platform_error`` (502)."""
    bid = bot_id()
    with sessions.begin() as session:
        known = state.bot(session, NAME, bid).username
    if known:
        return known
    try:
        me = call("getMe")
    except DeliveryFailed as exc:
        raise ChannelError("channel_platform_error", f"Telegram getMe failed: {exc.code}") from None
    username = str(me.get("username") or "")
    with sessions.begin() as session:
        state.bot(session, NAME, bid, lock=True).username = username
    return username


def media_kind(meme: MemeFile) -> str:
    """How a meme is sent (and its ``file_id`` cached): ``animation`` (a GIF or an MP4:
    ``sendAnimation``), ``sticker`` (a WebM video sticker or a TGS: ``sendSticker``), ``photo``
    (JPEG/PNG: ``sendPhoto``), ``photo_png`` (any other picture, AVIF and HEIC included: its first
    frame as PNG)."""
    if meme.extension in STICKER_EXTENSIONS:
        return "sticker"
    if meme.animated:
        return "animation"
    if meme.extension in PHOTO_EXTENSIONS:
        return "photo"
    return "photo_png"


def _form(meme: MemeFile) -> tuple[str, str, str, bytes, str]:
    """``(media kind, method, field, bytes, file name)`` of how a meme is sent."""
    kind = media_kind(meme)
    if kind == "sticker":
        return kind, "sendSticker", "sticker", meme.data, f"meme{meme.extension}"
    if kind == "animation":
        return kind, "sendAnimation", "animation", meme.data, f"meme{meme.extension}"
    if kind == "photo":
        return kind, "sendPhoto", "photo", meme.data, f"meme{meme.extension}"
    return kind, "sendPhoto", "photo", meme.as_png(), "meme.png"


def file_id_of(result: dict[str, Any], kind: str) -> str | None:
    """The ``file_id`` Telegram gave a sent meme of :func:`media_kind` ``kind`` (``result``: the
    sent ``Message``)."""
    if kind == "sticker":
        return (result.get("sticker") or {}).get("file_id")
    if kind == "animation":
        media = result.get("animation") or result.get("document") or {}
        return media.get("file_id")
    sizes = result.get("photo") or []
    return sizes[-1].get("file_id") if sizes else None


def send_file(chat_id: str, meme: MemeFile, params: dict[str, Any]) -> dict[str, Any]:
    """Send ``meme`` to ``chat_id`` reusing this bot's cached ``file_id`` (uploading, and caching
    the new id, when there is none or Telegram no longer knows it). A sticker takes no caption: the
    caption follows it as a text message. The sent message (the meme's)."""
    sessions, bid = get_sessionmaker(), bot_id()
    kind, method, field, data, filename = _form(meme)
    params = dict(params)
    caption = params.pop("caption", None) if kind == "sticker" else None
    result = _send_media(sessions, bid, chat_id, meme, params, (kind, method, field, data, filename))
    if caption:
        call("sendMessage", {"chat_id": chat_id, "text": str(caption)[:4096]})
    return result


def _send_media(
    sessions: sessionmaker[Session],
    bid: str,
    chat_id: str,
    meme: MemeFile,
    params: dict[str, Any],
    form: tuple[str, str, str, bytes, str],
) -> dict[str, Any]:
    kind, method, field, data, filename = form
    cached = state.cached_file_id(sessions, NAME, bid, meme.sha256, kind)
    if cached:
        try:
            return call(method, {**params, "chat_id": chat_id, field: cached})
        except DeliveryFailed as exc:
            if exc.platform_code != "400":
                raise
            state.forget_file_id(sessions, NAME, bid, meme.sha256, kind)  # a stale id: upload again
    content_type = _TYPES.get(filename[filename.rfind(".") :], "application/octet-stream")
    result = call(method, {**params, "chat_id": chat_id}, files={field: (filename, data, content_type)}, timeout=60)
    file_id = file_id_of(result, kind)
    if file_id:
        state.remember_file_id(sessions, NAME, bid, meme.sha256, kind, file_id)
    return result
