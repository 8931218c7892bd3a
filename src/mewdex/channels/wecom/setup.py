"""Setting WeCom up: the installation's self-built app (admin: :func:`configure_app`,
:func:`app_status`; secrets sealed) and a member's one-time link code (:func:`link`)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from sqlalchemy.orm import Session

from mewdex import hooks
from mewdex.channels import bindings
from mewdex.channels.errors import ChannelError
from mewdex.channels.wecom import NAME
from mewdex.channels.wecom.api import DEFAULT_BASE_URL, WeComApp, forget_token
from mewdex.channels.wecom.crypto import WeComCryptoError, decode_aes_key
from mewdex.platform import instance
from mewdex.providers import sealed_fields, secrets

APP_SETTING = "channel_wecom_app"
APP_SECRET_FIELDS = ("secret", "token", "encoding_aes_key")
hooks.provide("sealed_settings", APP_SETTING, APP_SECRET_FIELDS)
CALLBACK_PATH = "/channels/wecom/callback"


def _aad(field: str) -> str:
    return sealed_fields.platform_setting_aad(APP_SETTING, field)


def configure_app(
    session: Session,
    *,
    corp_id: str,
    agent_id: int,
    secret: str | None,
    token: str | None,
    encoding_aes_key: str | None,
    base_url: str | None = None,
) -> dict[str, Any]:
    """Store the installation's self-built app (admin; secrets sealed with
    :mod:`mewdex.providers.secrets`). ``None`` for a secret keeps the stored one. Returns
    :func:`app_status`. ``channel_config_invalid`` (422) for a missing field or a bad EncodingAESKey."""
    current = instance.get_setting(session, APP_SETTING, {}) or {}
    values = {"secret": secret, "token": token, "encoding_aes_key": encoding_aes_key}
    for field in APP_SECRET_FIELDS:
        if values[field] is None and field not in current:
            raise ChannelError("channel_config_invalid", f"{field} is required")
    corp_id = (corp_id or "").strip()
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", corp_id):
        raise ChannelError("channel_config_invalid", "corp_id must be the corp id (ww…)")
    if not isinstance(agent_id, int) or agent_id <= 0:
        raise ChannelError("channel_config_invalid", "agent_id must be the app's AgentId (a positive number)")
    if encoding_aes_key is not None:
        try:
            decode_aes_key(encoding_aes_key.strip())
        except WeComCryptoError as exc:
            raise ChannelError("channel_config_invalid", exc.message) from None
    url = (base_url or current.get("base_url") or DEFAULT_BASE_URL).strip().rstrip("/")
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise ChannelError("channel_config_invalid", "base_url must be an http(s) URL")
    stored = {"corp_id": corp_id, "agent_id": agent_id, "base_url": url}
    for field in APP_SECRET_FIELDS:
        value = values[field]
        stored[field] = secrets.seal(value.strip(), _aad(field)) if value is not None else current[field]
    instance.set_setting(session, APP_SETTING, stored)
    old = load_app(session, stored=current) if current else None
    if old is not None:
        forget_token(old)
    return app_status(session, stored=stored)


def load_app(session: Session, *, stored: dict[str, Any] | None = None) -> WeComApp | None:
    """The configured app with its secrets opened, or None when the admin has not set it up."""
    stored = stored if stored is not None else instance.get_setting(session, APP_SETTING, None)
    if not stored:
        return None
    opened = {field: secrets.open_sealed(stored[field], _aad(field)) for field in APP_SECRET_FIELDS}
    return WeComApp(
        corp_id=stored["corp_id"], agent_id=int(stored["agent_id"]), secret=opened["secret"], token=opened["token"],
        encoding_aes_key=opened["encoding_aes_key"], base_url=stored.get("base_url") or DEFAULT_BASE_URL,
    )  # fmt: skip


def require_app(session: Session) -> WeComApp:
    """:func:`load_app`, or ``channel_not_configured`` (409)."""
    app = load_app(session)
    if app is None:
        raise ChannelError("channel_not_configured", "the admin has not set up the WeCom app yet")
    return app


def app_status(session: Session, *, stored: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the Channels page shows of the app: ``configured``, ``corp_id``, ``agent_id``,
    ``base_url``, ``secret_hint`` and ``callback_path`` — never a secret."""
    stored = stored if stored is not None else instance.get_setting(session, APP_SETTING, None)
    if not stored:
        return {"configured": False, "callback_path": CALLBACK_PATH}
    return {
        "configured": True,
        "corp_id": stored["corp_id"],
        "agent_id": int(stored["agent_id"]),
        "base_url": stored.get("base_url") or DEFAULT_BASE_URL,
        "secret_hint": secrets.hint(secrets.open_sealed(stored["secret"], _aad("secret"))),
        "callback_path": CALLBACK_PATH,
    }


def link(session: Session, *, scope_id: str, user_id: UUID | None) -> dict[str, str]:
    """A one-time code the signed-in user sends to the WeCom app to bind their ``wecom_userid``:
    ``{"code", "instructions"}``. ``channel_not_configured`` without an app."""
    require_app(session)
    code = bindings.link_code(session, scope_id=scope_id, user_id=user_id, channel=NAME)["code"]
    return {"code": code, "instructions": f"Send this code to the mewdex app in WeCom: {code}"}
