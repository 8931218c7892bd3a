"""OneBot's inbound: an event of a socket's bot (:func:`accept_event`) or a signed HTTP POST event
(:func:`accept_http_event`) as the framework's :class:`Inbound` of the binding the transport
authenticated (:func:`inbound_of`) — never of a binding a field of the payload names."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from mewdex.channels import bindings
from mewdex.channels.base import Inbound
from mewdex.channels.errors import ChannelError
from mewdex.channels.onebot import NAME
from mewdex.channels.onebot.protocol import parse_event, verify_signature
from mewdex.channels.onebot.setup import QQ_NUMBER, attach
from mewdex.db.models import ChannelBinding

log = logging.getLogger(__name__)


def inbound_of(event: dict[str, Any], scope_id: str | None = None) -> Inbound | None:
    """The framework's :class:`Inbound` of a message event (sender = the bot: the binding's
    identity; ``author`` = the QQ user who wrote; ``scope_id`` = the binding the transport
    authenticated)."""
    message = parse_event(event)
    if message is None or not message.self_id or message.user_id == message.self_id:
        return None
    chat = f"group:{message.group_id}" if message.group_id else f"private:{message.user_id}"
    return Inbound(
        channel=NAME,
        sender=message.self_id,
        chat=chat,
        text=message.text,
        images=message.images,
        media=message.media,
        reply_to=f"{message.self_id}:{message.reply_to}" if message.reply_to else None,
        is_group=message.group_id is not None,
        mentioned=message.mentioned,
        message_id=f"{message.self_id}:{message.message_id}" if message.message_id else None,
        extra={"user_id": message.user_id},
        scope_id=scope_id,
        author=message.user_id,
    )


def accept_event(session: Session, event: dict[str, Any], *, scope_id: str, self_id: str) -> str:
    """Queue one event's message for the assistant, as a message of the binding its connection
    authenticated (``scope_id``, whose bot proved it is QQ ``self_id``): ``queued``/``ignored``, or
    ``dropped`` (logged) for an event that names another bot — the payload never chooses the
    binding."""
    from mewdex.channels import inbound

    if str(event.get("self_id", "")) != self_id:
        log.warning(
            "onebot: an event for QQ %s arrived on the connection of QQ %s (scope %s); dropped",
            str(event.get("self_id", ""))[:20], self_id, scope_id,
        )  # fmt: skip
        return "dropped"
    found = inbound_of(event, scope_id)
    if found is None:
        return "ignored"
    return "queued" if inbound.submit(session, found) is not None else "ignored"


def _http_candidates(session: Session, self_id: str) -> list[ChannelBinding]:
    """The active http-mode bindings that hold QQ ``self_id`` or claimed it and await its proof."""
    rows = session.execute(
        select(ChannelBinding).where(
            ChannelBinding.channel == NAME,
            ChannelBinding.status == "active",
            ChannelBinding.config["mode"].astext == "http",
            (ChannelBinding.identity == self_id)
            | (ChannelBinding.identity.is_(None) & (ChannelBinding.config["claimed_self_id"].astext == self_id)),
        )
    ).scalars()
    return sorted(rows, key=lambda r: r.identity is None)  # the proven holder first


def accept_http_event(session: Session, self_id: str | None, signature: str | None, body: bytes) -> str:
    """An HTTP POST event. The binding is the one whose token signed the body (``X-Signature``)
    among those holding or claiming ``X-Self-ID``; the event's ``self_id`` must be that number.
    The first signed event of a claimed number is its proof (:func:`attach`). An event older or
    newer than :data:`replay.WINDOW_SECONDS` (its ``time``), or one seen before (its message id), is
    refused. Errors: ``channel_webhook_secret_invalid`` (401), ``channel_request_expired`` (401),
    ``channel_request_replayed`` (409), ``channel_identity_taken`` (409), ``invalid_request`` (422)."""
    from mewdex.channels import replay

    claimed = str(self_id or "").strip()
    row = None
    if QQ_NUMBER.fullmatch(claimed):
        for candidate in _http_candidates(session, claimed):
            config = bindings.open_config(candidate.scope_id, NAME, candidate.config or {})
            if verify_signature(config["access_token"], body, signature):
                row = candidate
                break
    if row is None:
        raise ChannelError("channel_webhook_secret_invalid", "the event's X-Signature does not match")
    try:
        event = json.loads(body)
    except ValueError:
        raise ChannelError("invalid_request", "the event is not JSON") from None
    if not isinstance(event, dict) or str(event.get("self_id", "")) != claimed:
        raise ChannelError("invalid_request", "the event is not a OneBot event of this bot")
    replay.check_time(event.get("time"))
    nonce = f"onebot:{event.get('message_id')}" if event.get("message_id") is not None else None
    replay.remember(session, f"onebot:{row.scope_id}", nonce or "body:" + hashlib.sha256(body).hexdigest())
    if row.identity is None:
        attach(session, row, claimed, connected=False)
    return accept_event(session, event, scope_id=row.scope_id, self_id=claimed)
