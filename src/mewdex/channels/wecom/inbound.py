"""WeCom's callback: URL verification (:func:`verify_callback_url`) and encrypted messages
(:func:`accept_callback`) turned into the framework's :class:`Inbound` (:func:`inbound_of`)."""

from __future__ import annotations

import re

from sqlalchemy.orm import Session

from mewdex.channels.base import Inbound
from mewdex.channels.errors import ChannelError
from mewdex.channels.wecom import NAME
from mewdex.channels.wecom.api import MEDIA_REF, InboundMessage, parse_callback
from mewdex.channels.wecom.setup import require_app

_BIND_TEXT = re.compile(r"^\s*(?:/?bind\s+|绑定\s*)?([A-Za-z0-9_-]{32})\s*$", re.IGNORECASE)


def inbound_of(message: InboundMessage) -> Inbound | None:
    """The framework's :class:`Inbound` for a decrypted callback; None for what mewdex does not
    answer (events other than ``enter_agent``, voice, location, …). A text that is a bind code
    (``<code>`` or ``bind <code>``) carries it as ``bind_code``; an image is its ``MediaId``
    (:data:`~.api.MEDIA_REF`), else its ``PicUrl``."""
    if not message.from_user or message.msg_type not in ("text", "image"):
        return None
    match = _BIND_TEXT.match(message.content) if message.msg_type == "text" else None
    # the file through the media API when WeCom named it (its PicUrl only without a MediaId)
    image = f"{MEDIA_REF}{message.media_id}" if message.media_id else message.pic_url
    return Inbound(
        channel=NAME,
        sender=message.from_user,
        chat=message.from_user,
        text="" if match else message.content,
        images=(image,) if image else (),
        bind_code=match.group(1) if match else None,
        message_id=message.msg_id,
    )


def accept_callback(session: Session, msg_signature: str, timestamp: str, nonce: str, body: bytes) -> str:
    """Verify, decrypt and queue one callback (the web route answers an empty 200 at once: WeCom
    retries after 5 s). Returns what happened: ``queued``, ``ignored``, or ``duplicate`` (the same
    signed request — timestamp and nonce — seen within the replay window: taken in once only).
    Raises :class:`.crypto.WeComCryptoError` (401), ``channel_request_expired`` (401: a
    timestamp more than 5 minutes off) or ``channel_not_configured`` (409)."""
    from mewdex.channels import inbound, replay

    app = require_app(session)
    message = parse_callback(app, msg_signature, timestamp, nonce, body)
    replay.check_time(timestamp)  # signed with the body: a captured callback is stale after the window
    try:
        replay.remember(session, f"wecom:{app.corp_id}", f"nonce:{timestamp}:{nonce}")
    except ChannelError:
        return "duplicate"  # WeCom resends a callback it got no answer to in 5 s: answered once
    found = inbound_of(message)
    if found is None:
        return "ignored"
    inbound.submit(session, found)
    return "queued"


def verify_callback_url(session: Session, msg_signature: str, timestamp: str, nonce: str, echostr: str) -> str:
    """The plaintext answering WeCom's callback URL check. Raises like :func:`accept_callback`."""
    return require_app(session).crypt().verify_url(msg_signature, timestamp, nonce, echostr)
