"""Binding a QQ bot (OneBot): :func:`create_binding` (a new access token, shown once), the token's
binding (:func:`binding_for_token`), the bot's proof of its number (:func:`attach`) and the
connection's life (:func:`detach`, :func:`still_active`).

A binding's identity is its bot's QQ number (the ``X-Self-ID`` of the connection); everyone who
writes to that bot (its friends, groups that @ it) is answered from the binding owner's library.
Targets are ``private:<qq>`` and ``group:<group id>``.
"""

from __future__ import annotations

import hashlib
import re
import secrets as _random
from urllib.parse import urlsplit
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings
from mewdex.channels.errors import ChannelError
from mewdex.channels.onebot import NAME
from mewdex.db.models import ChannelBinding
from mewdex.platform import owners

WS_PATH = "/channels/onebot/ws"
EVENTS_PATH = "/channels/onebot/events"
MODES = ("ws", "http")


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_binding(
    session: Session,
    *,
    scope_id: str,
    user_id: UUID | None,
    mode: str = "ws",
    owner_qq: str | None = None,
    api_url: str | None = None,
    self_id: str | None = None,
) -> tuple[ChannelBinding, str]:
    """Bind (or re-bind with a new token) the scope's OneBot bot. ``mode`` ``ws`` (reverse
    WebSocket; the bot's QQ number is learnt when it connects) or ``http`` (HTTP POST events to
    :data:`EVENTS_PATH` signed with the token, actions to ``api_url``; ``self_id`` required).
    ``owner_qq``: where proactive sends go. Returns ``(row, access_token)``; the token is shown once.
    ``channel_config_invalid`` (422) for bad fields, ``channel_identity_taken`` (409)."""
    if mode not in MODES:
        raise ChannelError("channel_config_invalid", "mode must be ws or http")
    for label, value in (("owner_qq", owner_qq), ("self_id", self_id)):
        if value is not None and not re.fullmatch(r"[1-9][0-9]{4,14}", str(value)):
            raise ChannelError("channel_config_invalid", f"{label} must be a QQ number")
    if mode == "http":
        parts = urlsplit(api_url or "")
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
            raise ChannelError("channel_config_invalid", "api_url must be the OneBot HTTP API's http(s) URL")
        if not self_id:
            raise ChannelError("channel_config_invalid", "self_id (the bot's QQ number) is required in http mode")
    token = _random.token_urlsafe(24)
    config = {
        "mode": mode,
        "access_token": token,
        "token_sha256": _token_hash(token),
        "owner_qq": str(owner_qq) if owner_qq else None,
        "owner_id": str(owner_qq) if owner_qq else None,
        "api_url": (api_url or "").rstrip("/") or None,
        "claimed_self_id": str(self_id) if self_id else None,
        "connected": False,
    }
    # The bot's number is the binding's identity only once the bot proves it (attach): a number
    # typed here claims nothing and locks nobody out.
    row = bindings.bind(session, scope_id=scope_id, user_id=user_id, channel=NAME, identity=None, config=config)
    return row, token


def binding_for_token(session: Session, token: str) -> ChannelBinding | None:
    """The active binding whose access token is ``token`` (compared by SHA-256)."""
    if not token:
        return None
    return session.execute(
        select(ChannelBinding).where(
            ChannelBinding.channel == NAME,
            ChannelBinding.status == "active",
            ChannelBinding.config["token_sha256"].astext == _token_hash(token),
        )
    ).scalar_one_or_none()


QQ_NUMBER = re.compile(r"[1-9][0-9]{4,14}")


def reclaim_hint(self_id: str) -> str:
    """How the real owner of QQ ``self_id`` gets it back from the account that holds it."""
    return (
        f"the QQ bot {self_id} is linked to another mewdex account: that account can remove it on its "
        f"Channels page, or an admin can release it with `mewdex channels release onebot {self_id}`"
    )


def attach(session: Session, row: ChannelBinding, self_id: str, *, connected: bool = True) -> None:
    """Record that ``row``'s bot proved it is QQ ``self_id`` (a ``get_login_info`` answer on the
    socket its token authenticated, or an event signed with its token): the number becomes the
    binding's identity. Called only after that proof. ``channel_identity_taken`` (409, the message
    says how to reclaim it: :func:`reclaim_hint`) when another account holds that number."""
    if not QQ_NUMBER.fullmatch(self_id):
        raise ChannelError("channel_config_invalid", "the bot's QQ number is not a QQ number")
    if row.identity != self_id:
        try:
            bindings.bind(
                session, scope_id=row.scope_id, user_id=row.user_id, channel=NAME, identity=self_id, config=row.config
            )
        except ChannelError as exc:
            if exc.code == "channel_identity_taken":
                raise ChannelError("channel_identity_taken", reclaim_hint(self_id)) from None
            raise
    if connected:
        bindings.update_config(session, row, {"connected": True})


def detach(sessions: sessionmaker[Session], scope_id: str) -> None:
    """Record that the binding's connection closed."""
    with sessions.begin() as session:
        row = bindings.get(session, scope_id, NAME, lock=True)
        if row is not None:
            bindings.update_config(session, row, {"connected": False})


def still_active(sessions: sessionmaker[Session], scope_id: str, token: str) -> bool:
    """Whether the binding a connection authenticated as is still active with the same token and
    its owner still enabled (a revoked or re-keyed binding, or a disabled account, closes its
    connection)."""
    with sessions.begin() as session:
        row = bindings.get(session, scope_id, NAME)
        return bool(
            row is not None
            and row.status == "active"
            and (row.config or {}).get("token_sha256") == _token_hash(token)
            and owners.owner_active(session, scope_id)
        )
