"""QQ through OneBot v11 (NapCat, LLOneBot, Lagrange): events, message segments, actions (protocol layer).

Transports (botuniverse/onebot-11 ``communication/``):

* **Reverse WebSocket** (primary): the OneBot implementation dials mewdex at ``/channels/onebot/ws``
  with ``X-Self-ID: <bot QQ>``, ``X-Client-Role: Universal`` and ``Authorization: Bearer <token>``
  (or ``?access_token=``). Events arrive as JSON frames; mewdex calls actions with
  ``{"action", "params", "echo"}`` and the implementation answers ``{"status", "retcode", "data",
  "echo"}`` on the same socket. :class:`ActionChannel` matches answers to calls by ``echo``;
  :data:`registry` holds this process's open connections by self id.
* **HTTP POST** (alternative): events are POSTed with ``X-Self-ID`` and ``X-Signature:
  sha1=<hex HMAC-SHA1(secret, raw body)>`` (:func:`verify_signature`); actions go to the
  implementation's HTTP API (``POST <api_url>/<action>``, :func:`call_http`, through
  :mod:`mewdex.egress`).

Messages are arrays of segments; a meme is an ``image`` segment with ``file=base64://…`` (QQ never
fetches anything from mewdex) and ``sub_type``/``subType`` 1, which NapCat, LLOneBot and Lagrange
show as a sticker (动画表情). Group messages are answered only when they @-mention the bot or start
with a command prefix (the framework's group rule, ``channels.base.addressed``).
Errors: :class:`OneBotError` (``onebot_not_connected``,
``onebot_action_failed`` with the implementation's ``retcode``/``wording``, ``onebot_timeout``).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import json
import logging
import re
import secrets as _random
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings
from mewdex.channels.base import Binding, DeliveryFailed, Inbound, MemeFile, Sent
from mewdex.channels.errors import ChannelError
from mewdex.channels.registry import Channel, register_adapter
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import ChannelBinding, Meme
from mewdex.dto.i18n import translate
from mewdex.egress import EgressError, fetch
from mewdex.platform import owners

ACTION_TIMEOUT = 30.0


class OneBotError(Exception):
    """A failed action (``code``, module doc); ``retcode``/``wording`` are the implementation's."""

    def __init__(self, code: str, message: str, retcode: int | None = None, wording: str = "", retryable=False):
        super().__init__(message)
        self.code, self.message, self.retcode, self.wording, self.retryable = code, message, retcode, wording, retryable


# ------------------------------------------------------------------ signatures (HTTP POST mode)


def sign_body(secret: str, body: bytes) -> str:
    """The ``X-Signature`` header value of ``body``: ``sha1=<hex HMAC-SHA1(secret, body)>``."""
    return "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()


def verify_signature(secret: str, body: bytes, header: str | None) -> bool:
    """Whether ``header`` is the HMAC-SHA1 signature of the raw ``body`` (constant-time, over bytes:
    a header with characters outside ASCII is simply not the signature)."""
    given = (header or "").strip().lower().encode("utf-8", "surrogateescape")
    return bool(given) and hmac.compare_digest(sign_body(secret, body).encode(), given)


def bearer_token(authorization: str | None, query_token: str | None = None) -> str:
    """The access token of a connection: ``Authorization: Bearer <t>`` (or ``Token <t>``), else the
    ``access_token`` query parameter; ``""`` when there is none."""
    if authorization:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() in ("bearer", "token") and value.strip():
            return value.strip()
    return (query_token or "").strip()


# ------------------------------------------------------------------ segments


def text_segment(text: str) -> dict[str, Any]:
    return {"type": "text", "data": {"text": text}}


def image_segment(data: bytes, summary: str = "[动画表情]") -> dict[str, Any]:
    """An image segment carrying ``data`` inline (``base64://``), shown as a sticker."""
    return {
        "type": "image",
        "data": {
            "file": "base64://" + base64.b64encode(data).decode(),
            "sub_type": 1,
            "subType": 1,
            "summary": summary,
        },
    }


_CQ = re.compile(r"\[CQ:([a-zA-Z0-9_.-]+)((?:,[^\]]*)?)\]")


def _cq_unescape(value: str) -> str:
    return value.replace("&#44;", ",").replace("&#91;", "[").replace("&#93;", "]").replace("&amp;", "&")


def parse_cq(message: str) -> list[dict[str, Any]]:
    """Segments of a CQ-code string (``text [CQ:at,qq=1] more``)."""
    segments: list[dict[str, Any]] = []
    pos = 0
    for match in _CQ.finditer(message):
        if match.start() > pos:
            segments.append(text_segment(_cq_unescape(message[pos : match.start()])))
        data = {}
        for pair in filter(None, match.group(2).split(",")):
            key, _, value = pair.partition("=")
            data[key] = _cq_unescape(value)
        segments.append({"type": match.group(1), "data": data})
        pos = match.end()
    if pos < len(message):
        segments.append(text_segment(_cq_unescape(message[pos:])))
    return segments


def segments_of(message: Any) -> list[dict[str, Any]]:
    """A message in either form (array of segments or CQ string) as segments."""
    if isinstance(message, str):
        return parse_cq(message)
    if isinstance(message, list):
        return [s for s in message if isinstance(s, dict) and isinstance(s.get("data", {}), dict)]
    return []


# ------------------------------------------------------------------ events


@dataclass(frozen=True)
class InboundMessage:
    """A message event: ``self_id`` (the bot), ``message_type`` (``private``/``group``), ``user_id``
    (the sender), ``group_id`` (None in private), ``text`` (the text segments joined, stripped),
    ``mentioned`` (the bot was @-ed), ``message_id``, ``images`` (the URL of an attached picture)."""

    self_id: str
    message_type: str
    user_id: str
    group_id: str | None
    text: str
    mentioned: bool
    message_id: str
    images: tuple[str, ...] = ()


#: a user or group id in an event (QQ numbers; lenient about length, never more than 20 digits)
CHAT_ID = re.compile(r"[0-9]{1,20}")
#: a OneBot message id: an int32 (some implementations send negative ones), as a number or its digits
MESSAGE_ID = re.compile(r"-?[0-9]{1,20}")


def _id_of(value: Any, pattern: re.Pattern[str]) -> str | None:
    """``value`` (an int or a string of digits) as its digits when it matches ``pattern``; None otherwise
    (an object, a float, a 2,000-character string: not an id a platform sends)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    text = str(value).strip()
    return text if pattern.fullmatch(text) else None


def parse_event(event: dict[str, Any]) -> InboundMessage | None:
    """The message in an event; None for other events (lifecycle, heartbeat, notice, request), for
    messages the bot sent itself (``message_sent``) and for events whose ids are not QQ numbers
    (``user_id``, a group's ``group_id``: up to 20 digits) or message ids (``message_id``, when present)."""
    if event.get("post_type") != "message" or event.get("message_type") not in ("private", "group"):
        return None
    user = _id_of(event.get("user_id"), CHAT_ID)
    group = _id_of(event.get("group_id"), CHAT_ID) if event["message_type"] == "group" else None
    message_id = _id_of(event["message_id"], MESSAGE_ID) if event.get("message_id") is not None else ""
    if user is None or message_id is None or (event["message_type"] == "group" and group is None):
        log.info("onebot: a message event whose ids are not QQ numbers; ignored")
        return None
    self_id = str(event.get("self_id", ""))
    segments = segments_of(event.get("message", event.get("raw_message", "")))
    text = "".join(str(s["data"].get("text", "")) for s in segments if s.get("type") == "text").strip()
    mentioned = any(
        s.get("type") == "at" and str(s["data"].get("qq", "")) in (self_id, "all") and self_id for s in segments
    )
    images = tuple(
        str(s["data"]["url"])
        for s in segments
        if s.get("type") == "image" and str(s["data"].get("url", "")).startswith(("https://", "http://"))
    )
    return InboundMessage(
        self_id=self_id,
        message_type=str(event["message_type"]),
        user_id=user,
        group_id=group,
        text=text,
        mentioned=mentioned,
        message_id=message_id,
        images=images[:1],
    )


def send_action(message_type: str, target: str, segments: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The action that sends ``segments`` to a private chat (``target`` = user id) or a group."""
    if message_type == "group":
        return "send_group_msg", {"group_id": int(target), "message": segments}
    return "send_private_msg", {"user_id": int(target), "message": segments}


def check_answer(answer: dict[str, Any], action: str) -> dict[str, Any]:
    """The ``data`` of a successful action answer; raises :class:`OneBotError` for a failed one."""
    if answer.get("status") == "ok" and int(answer.get("retcode", 0)) == 0:
        data = answer.get("data")
        return data if isinstance(data, dict) else {}
    retcode = answer.get("retcode")
    wording = str(answer.get("wording") or answer.get("message") or answer.get("msg") or "")[:300]
    raise OneBotError(
        "onebot_action_failed", f"OneBot {action} failed: retcode {retcode} {wording}".strip(), retcode, wording
    )


# ------------------------------------------------------------------ reverse WebSocket connections


class ActionChannel:
    """The action side of one reverse-WebSocket connection: :meth:`call` sends an action frame through
    ``send`` and waits for the frame with its ``echo`` (given to :meth:`resolve` by the reader)."""

    _echo = itertools.count(1)

    def __init__(
        self,
        self_id: str,
        send: Callable[[str], Awaitable[None]],
        scope_id: str | None = None,
        close: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ):
        self.self_id = self_id
        self.scope_id = scope_id  # the binding the connection's token authenticated
        self._send = send
        self._close = close
        self._pending: dict[str, asyncio.Future] = {}
        self.loop = asyncio.get_running_loop()

    async def call(self, action: str, params: dict[str, Any], timeout: float = ACTION_TIMEOUT) -> dict[str, Any]:
        echo = f"mewdex-{next(self._echo)}"
        future: asyncio.Future = self.loop.create_future()
        self._pending[echo] = future
        try:
            await self._send(json.dumps({"action": action, "params": params, "echo": echo}, ensure_ascii=False))
            answer = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise OneBotError(
                "onebot_timeout", f"OneBot did not answer {action} in {timeout:.0f} s", retryable=True
            ) from None
        finally:
            self._pending.pop(echo, None)
        return check_answer(answer, action)

    def resolve(self, frame: dict[str, Any]) -> bool:
        """True when ``frame`` answered an action of this channel (the reader then drops it)."""
        echo = frame.get("echo")
        if echo is None or "post_type" in frame:
            return False
        future = self._pending.get(str(echo))
        if future is not None and not future.done():
            future.set_result(frame)
        return True

    def hang_up(self) -> None:
        """Close the socket from any thread (the account was disabled, the binding revoked)."""
        if self._close is not None:
            asyncio.run_coroutine_threadsafe(self._close(), self.loop)

    def close(self) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(
                    OneBotError("onebot_not_connected", "the OneBot connection closed", retryable=True)
                )

    def call_sync(self, action: str, params: dict[str, Any], timeout: float = ACTION_TIMEOUT) -> dict[str, Any]:
        """:meth:`call` from a thread other than the connection's event loop (a worker thread)."""
        future = asyncio.run_coroutine_threadsafe(self.call(action, params, timeout), self.loop)
        try:
            return future.result(timeout + 5)
        except TimeoutError:
            future.cancel()
            raise OneBotError("onebot_timeout", f"OneBot did not answer {action}", retryable=True) from None


class ConnectionRegistry:
    """This process's open reverse-WebSocket connections, by the bot's QQ number (a new connection
    of the same bot replaces the old one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, ActionChannel] = {}

    def add(self, channel: ActionChannel) -> None:
        with self._lock:
            self._by_key[channel.self_id] = channel

    def remove(self, channel: ActionChannel) -> None:
        with self._lock:
            if self._by_key.get(channel.self_id) is channel:
                del self._by_key[channel.self_id]
        channel.close()

    def get(self, self_id: str) -> ActionChannel | None:
        with self._lock:
            return self._by_key.get(self_id)

    def count(self) -> int:
        with self._lock:
            return len(self._by_key)

    def of_scope(self, scope_id: str) -> list[ActionChannel]:
        """This process's connections authenticated as ``scope_id``'s binding."""
        with self._lock:
            return [c for c in self._by_key.values() if c.scope_id == scope_id]


registry = ConnectionRegistry()


def call_http(api_url: str, access_token: str, action: str, params: dict[str, Any]) -> dict[str, Any]:
    """One action through the implementation's HTTP API (``POST <api_url>/<action>``, Bearer token,
    through :mod:`mewdex.egress`). Raises :class:`OneBotError`."""
    headers = {"content-type": "application/json"}
    if access_token:
        headers["authorization"] = f"Bearer {access_token}"
    try:
        response = fetch("POST", f"{api_url.rstrip('/')}/{action}", headers=headers, json=params, timeout=30.0)
    except EgressError as exc:
        raise OneBotError(exc.code, f"OneBot {action} failed: {exc.message}", retryable=exc.retryable) from None
    if response.status in (401, 403):
        raise OneBotError(
            "onebot_action_failed", f"OneBot refused the access token ({response.status})", response.status
        )
    try:
        answer = response.json()
    except ValueError:
        raise OneBotError(
            "onebot_action_failed", f"OneBot {action} answered HTTP {response.status}", retryable=response.status >= 500
        ) from None
    return check_answer(answer if isinstance(answer, dict) else {}, action)


# ------------------------------------------------------------------ the channel (framework adapter)
#
# A binding's identity is its bot's QQ number (the ``X-Self-ID`` of the connection); everyone who
# writes to that bot (its friends, groups that @ it) is answered from the binding owner's library.
# Targets are ``private:<qq>`` and ``group:<group id>``.
#
# Sends run in ``channel_delivery`` tasks, usually in a ``mewdex worker`` process, while the reverse
# WebSocket lives in the web process that accepted it. The relay between them is PostgreSQL
# LISTEN/NOTIFY: the worker notifies :data:`RELAY_OUT` with a small request (which meme or text, to
# which target, through which bot); the process holding that bot's connection loads the meme, calls
# the action and notifies :data:`RELAY_DONE` with the outcome. No process answering within
# :data:`RELAY_TIMEOUT` is ``onebot_not_connected`` (retried).

NAME = "onebot"
WS_PATH = "/channels/onebot/ws"
EVENTS_PATH = "/channels/onebot/events"
MODES = ("ws", "http")
RELAY_OUT = "mewdex_onebot_out"
RELAY_DONE = "mewdex_onebot_done"
RELAY_TIMEOUT = ACTION_TIMEOUT + 15.0  # the holder's own action timeout, plus loading the meme
NOTIFY_MAX_BYTES = 7900
log = logging.getLogger(__name__)


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


def _target(target: str) -> tuple[str, str]:
    kind, _, number = target.partition(":")
    if kind not in ("private", "group") or not number.isdigit():
        raise DeliveryFailed("channel_config_invalid", f"not a OneBot target: {target[:40]!r}")
    return kind, number


def _segments(kind: str, data: bytes | None, text: str | None) -> list[dict[str, Any]]:
    segments = [image_segment(data)] if data is not None else []
    if text:
        segments.append(text_segment(("\n" if segments else "") + text))
    return segments


def _failure(exc: OneBotError) -> DeliveryFailed:
    code = {"onebot_not_connected": "onebot_not_connected", "onebot_timeout": "channel_unreachable"}.get(
        exc.code, "channel_platform_error"
    )
    if exc.code.startswith("egress_"):
        code = "channel_unreachable"
    return DeliveryFailed(
        code, exc.message, platform_code=exc.retcode if exc.retcode is not None else exc.code,
        platform_error=exc.wording or exc.message, retryable=exc.retryable,
        retry_after=30 if exc.code == "onebot_not_connected" else None,
    )  # fmt: skip


# --- the relay (module comment above)


def _notify(connection, channel: str, payload: dict[str, Any]) -> None:
    raw = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    connection.execute("SELECT pg_notify(%s, %s)", (channel, raw))


def _listen_connection():
    """A dedicated autocommit psycopg connection (LISTEN needs one outside the pool's transactions)."""
    import psycopg

    from mewdex.config import get_settings
    from mewdex.db.engine import database_url

    url = database_url(get_settings()).replace("postgresql+psycopg://", "postgresql://", 1)
    return psycopg.connect(url, autocommit=True, application_name="mewdex-onebot-relay")


def relay_send(self_id: str, request: dict[str, Any], timeout: float = RELAY_TIMEOUT) -> dict[str, Any]:
    """Ask the process holding ``self_id``'s connection to send ``request``; its ``data`` answer.
    Raises :class:`OneBotError`."""
    request = {**request, "req": _random.token_hex(12), "self_id": self_id}
    text = request.get("text") or ""
    while len(json.dumps(request, ensure_ascii=False).encode()) > NOTIFY_MAX_BYTES and text:
        text = text[: len(text) * 3 // 4]
        request["text"] = text + "…"
    with _listen_connection() as connection:
        connection.execute(f"LISTEN {RELAY_DONE}")
        _notify(connection, RELAY_OUT, request)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            for note in connection.notifies(timeout=left, stop_after=1):
                answer = json.loads(note.payload)
                if answer.get("req") != request["req"]:
                    continue
                if answer.get("ok"):
                    return answer.get("data") or {}
                raise OneBotError(
                    answer.get("code") or "onebot_action_failed", answer.get("message") or "OneBot failed",
                    answer.get("retcode"), answer.get("wording") or "", bool(answer.get("retryable")),
                )  # fmt: skip
    raise OneBotError("onebot_not_connected", f"the QQ bot {self_id} is not connected to mewdex", retryable=True)


def _load_meme_bytes(scope_id: str, meme_id: str) -> bytes:
    from mewdex.db.scopes import storage_namespace
    from mewdex.storage import blob_store

    with get_sessionmaker().begin() as session:
        meme = session.execute(
            select(Meme).where(Meme.id == UUID(meme_id), Meme.scope_id == scope_id)
        ).scalar_one_or_none()
        if meme is None:
            raise OneBotError("onebot_action_failed", "the meme was deleted before it was sent")
        with blob_store().open(storage_namespace(session, scope_id), meme.storage_key) as handle:
            return handle.read()


async def _serve_request(channel: ActionChannel, request: dict[str, Any]) -> dict[str, Any]:
    try:
        data = None
        if request.get("meme_id"):
            data = await asyncio.to_thread(_load_meme_bytes, request["scope_id"], request["meme_id"])
        kind, number = _target(request["target"])
        action, params = send_action(kind, number, _segments(kind, data, request.get("text")))
        answer = await channel.call(action, params)
        return {"req": request["req"], "ok": True, "data": {"message_id": answer.get("message_id")}}
    except OneBotError as exc:
        return {"req": request["req"], "ok": False, "code": exc.code, "message": exc.message,
                "retcode": exc.retcode, "wording": exc.wording, "retryable": exc.retryable}  # fmt: skip
    except DeliveryFailed as exc:
        return {"req": request["req"], "ok": False, "code": exc.code, "message": exc.message}


class RelayListener:
    """The web process's side of the relay: one thread LISTENing on :data:`RELAY_OUT`, serving the
    requests for bots connected to this process. Started with the first connection."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def ensure_started(self) -> None:
        """Start the listener unless it runs (call after :meth:`ConnectionRegistry.add`)."""
        with self._lock:
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="onebot-relay", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        """Listen while this process holds a connection (the thread ends with the last one)."""
        while True:
            with self._lock:
                if self._stop.is_set() or not registry.count():
                    self._thread = None
                    return
            try:
                with _listen_connection() as connection:
                    connection.execute(f"LISTEN {RELAY_OUT}")
                    while not self._stop.is_set() and registry.count():
                        for note in connection.notifies(timeout=1.0):
                            self._dispatch(note.payload)
            except Exception:  # noqa: BLE001 - the listener must outlive a dropped database connection
                log.warning("onebot relay: listener connection lost; reconnecting", exc_info=True)
                self._stop.wait(1.0)

    def _dispatch(self, payload: str) -> None:
        try:
            request = json.loads(payload)
        except ValueError:
            return
        if request.get("hang_up"):  # an account was disabled, a binding revoked: close its sockets here
            for held in registry.of_scope(str(request["hang_up"])):
                held.hang_up()
            return
        channel = registry.get(str(request.get("self_id", "")))
        if channel is None or channel.scope_id != request.get("scope_id"):
            return  # another process holds this bot's connection (or none does)
        future = asyncio.run_coroutine_threadsafe(_serve_request(channel, request), channel.loop)

        def done(f) -> None:
            try:
                answer = f.result()
            except Exception as exc:  # noqa: BLE001
                answer = {"req": request.get("req"), "ok": False, "code": "onebot_action_failed", "message": str(exc)}
            try:
                with _listen_connection() as reply:
                    _notify(reply, RELAY_DONE, answer)
            except Exception:  # noqa: BLE001
                log.warning("onebot relay: could not answer a send request", exc_info=True)

        future.add_done_callback(done)


relay = RelayListener()


def hang_up(session: Session, scope_id: str) -> None:
    """Close ``scope_id``'s OneBot sockets in whichever process holds them, when ``session``
    commits (a NOTIFY on :data:`RELAY_OUT`; each socket also checks :func:`still_active` on every
    frame and every few seconds)."""
    from sqlalchemy import func as sql_func

    session.execute(select(sql_func.pg_notify(RELAY_OUT, json.dumps({"hang_up": scope_id}))))


class OneBotAdapter:
    """The ``onebot`` channel (module doc; binding model in the comment above the relay)."""

    name: ClassVar[str] = NAME
    secret_fields: ClassVar[tuple[str, ...]] = ("access_token",)
    min_send_interval: ClassVar[float] = 1.0
    command_prefixes: ClassVar[tuple[str, ...]] = ("/", "#")
    outbound_only: ClassVar[bool] = False

    def target_of(self, binding: Binding) -> str:
        owner = binding.config.get("owner_qq")
        if not owner:
            raise ChannelError(
                "channel_config_invalid", "this QQ binding has no owner QQ number to send to (set owner_qq)"
            )
        return f"private:{owner}"

    def binding_config(self, inbound: Inbound) -> dict[str, Any]:
        return {}

    def bind_help(self, lang: str) -> str:
        return translate(lang, "bot.bind_help.onebot")

    def fetch_image(self, ref: str) -> bytes:
        return fetch("GET", ref, content_types=("image/",), max_bytes=20 * 1024 * 1024).content

    def owner_gone(self, session: Session, scope_id: str) -> None:
        """The owner was disabled or deleted: close their sockets (:func:`hang_up`)."""
        hang_up(session, scope_id)

    def _send(self, binding: Binding | None, target: str, meme: MemeFile | None, text: str | None) -> Sent:
        http = binding is not None and binding.config.get("mode") == "http"
        if binding is None or not binding.identity or not (http or binding.config.get("connected")):
            raise DeliveryFailed(
                "onebot_not_connected", "no QQ bot has connected and proven its number for this binding", retry_after=30
            )
        kind, number = _target(target)
        try:
            if http:
                action, params = send_action(kind, number, _segments(kind, meme.data if meme else None, text))
                data = call_http(binding.config["api_url"], binding.config["access_token"], action, params)
            else:
                request = {"scope_id": binding.scope_id, "target": target, "text": text,
                           "meme_id": meme.meme_id if meme else None}  # fmt: skip
                data = relay_send(binding.identity, request)
        except OneBotError as exc:
            raise _failure(exc) from None
        message_id = data.get("message_id")
        return Sent(str(message_id) if message_id is not None else None)

    def send_text(self, binding: Binding | None, target: str, text: str) -> Sent:
        return self._send(binding, target, None, text)

    def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent:
        return self._send(binding, target, meme, caption)


register_adapter(OneBotAdapter())


CHANNEL = Channel(name=NAME, modules=(__name__,), errors={"onebot_not_connected": 503})
