"""The ClawBot QR login: :func:`start_login` (a QR to scan), :func:`login_status` and
:func:`complete_login` (bind the person who scanned; the binding awaits their YES in the chat)."""

from __future__ import annotations

import io
from typing import Any
from uuid import UUID

import segno
from sqlalchemy.orm import Session

from mewdex.channels import bindings
from mewdex.channels.clawbot import NAME
from mewdex.channels.clawbot.api import get_bot_qrcode, get_qrcode_status
from mewdex.channels.clawbot.settings import settings
from mewdex.db.models import ChannelBinding


def api_url() -> str:
    return settings().clawbot_api_url.rstrip("/")


def cdn_url() -> str:
    return settings().clawbot_cdn_url.rstrip("/")


def qr_svg(content: str) -> str:
    """An SVG QR code of ``content`` (what the Channels page shows to scan): always a full QR code
    (``segno.make`` picks a Micro QR for short content, which WeChat cannot scan)."""
    buffer = io.BytesIO()
    segno.make_qr(content, error="m").save(buffer, kind="svg", scale=4, border=2, xmldecl=False, svgns=True)
    return buffer.getvalue().decode()


def start_login() -> dict[str, str]:
    """A new login QR for the Channels page: ``{"qrcode", "qrcode_img_content", "qr_svg"}``.
    Raises :class:`~mewdex.channels.platform.PlatformError`."""
    qr = get_bot_qrcode(api_url())
    return {**qr, "qr_svg": qr_svg(qr["qrcode_img_content"] or qr["qrcode"])}


def login_status(qrcode: str) -> dict[str, Any]:
    """The QR's state; a ``scaned_but_redirect`` is followed to its ``redirect_host`` once."""
    status = get_qrcode_status(api_url(), qrcode)
    if status.get("status") == "scaned_but_redirect" and status.get("redirect_host"):
        status = get_qrcode_status(f"https://{status['redirect_host']}", qrcode)
    return status


def complete_login(session: Session, *, scope_id: str, user_id: UUID | None, status: dict[str, Any]) -> ChannelBinding:
    """Bind the scanning person (``status`` = a ``confirmed`` answer): seed 004's ``bot_token``*,
    ``bot_im_id``, ``user_im_id``, ``base_url``; the window starts closed (they have not written).
    The binding awaits the chat's confirmation: the person's first message is answered with "Link
    this chat to mewdex account …? Reply YES", and only YES puts it in force."""
    base = str(status.get("baseurl") or api_url()).rstrip("/")
    return bindings.bind(
        session,
        scope_id=scope_id,
        user_id=user_id,
        channel=NAME,
        identity=str(status["ilink_user_id"]),
        config={
            "bot_token": str(status["bot_token"]),
            "bot_im_id": str(status["ilink_bot_id"]),
            "user_im_id": str(status["ilink_user_id"]),
            "owner_id": str(status["ilink_user_id"]),
            "base_url": base,
            "latest_context_token": None,
            "context_token_at": None,
            "sends_since_ctx": 0,
            "get_updates_buf": "",
            "poll_error": None,
            # The scan binds nothing yet: the person confirms in the chat (a QR someone else sent
            # would otherwise link their WeChat to that account unawares).
            bindings.PENDING_KEY: True,
        },
    )
