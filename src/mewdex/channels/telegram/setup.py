"""Setting Telegram up: the admin's bot token (:func:`set_stored_token`, :func:`token_status`) and a
person's link (:func:`link`: a deep link whose ``/start <code>`` binds the chat that opens it)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings
from mewdex.channels.errors import ChannelError
from mewdex.channels.telegram import NAME
from mewdex.channels.telegram.api import TOKEN_SETTING, TOKEN_SHAPE, _token_aad, bot_username, configured_token
from mewdex.channels.telegram.settings import settings
from mewdex.platform import instance
from mewdex.providers import secrets


def token_status() -> dict[str, Any]:
    """What the Channels page shows: ``{"configured", "source": "environment" | "settings" | None,
    "hint"}`` (the token's last 4 characters at most; never the token)."""
    value, source = configured_token()
    return {"configured": bool(value), "source": source, "hint": secrets.hint(value) if value else ""}


def set_stored_token(session: Session, value: str | None) -> dict[str, Any]:
    """Save (sealed) or, with ``None``/empty, remove the admin's bot token in the caller's
    transaction; :func:`token_status` afterwards. ``channel_config_invalid`` (422) for a value that
    is not a BotFather token (``<digits>:<35 characters>``). The environment variable still wins."""
    value = (value or "").strip()
    if value and not TOKEN_SHAPE.fullmatch(value):
        raise ChannelError("channel_config_invalid", "that is not a bot token (123456789:AA… from @BotFather)")
    if value:
        instance.set_setting(session, TOKEN_SETTING, {"token": secrets.seal(value, _token_aad())})
    else:
        instance.delete_setting(session, TOKEN_SETTING)
    session.flush()
    env = settings().telegram_bot_token
    if env:
        return {"configured": True, "source": "environment", "hint": secrets.hint(env)}
    return {"configured": bool(value), "source": "settings" if value else None, "hint": secrets.hint(value)}


def link(session: Session, sessions: sessionmaker[Session], *, scope_id: str, user_id: UUID | None) -> dict[str, str]:
    """A deep link that binds the chat which opens it: ``{"url": "https://t.me/<bot>?start=<code>", "code"}``.
    Raises ``ChannelError`` ``channel_not_configured`` (409) / ``channel_platform_error`` (502)."""
    username = bot_username(sessions)
    code = bindings.link_code(session, scope_id=scope_id, user_id=user_id, channel=NAME)["code"]
    return {"url": f"https://t.me/{username}?start={code}", "code": code}
