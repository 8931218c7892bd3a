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
import re
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_PREFIXES = ("/", "#", "!")
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
    """Whether ``header`` is the HMAC-SHA1 signature of the raw ``body`` (constant-time)."""
    return bool(header) and hmac.compare_digest(sign_body(secret, body), (header or "").strip().lower())


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
    ``mentioned`` (the bot was @-ed), ``message_id``."""

    self_id: str
    message_type: str
    user_id: str
    group_id: str | None
    text: str
    mentioned: bool
    message_id: str


def parse_event(event: dict[str, Any]) -> InboundMessage | None:
    """The message in an event; None for other events (lifecycle, heartbeat, notice, request) and for
    messages the bot sent itself (``message_sent``)."""
    if event.get("post_type") != "message" or event.get("message_type") not in ("private", "group"):
        return None
    self_id = str(event.get("self_id", ""))
    segments = segments_of(event.get("message", event.get("raw_message", "")))
    text = "".join(str(s["data"].get("text", "")) for s in segments if s.get("type") == "text").strip()
    mentioned = any(
        s.get("type") == "at" and str(s["data"].get("qq", "")) in (self_id, "all") and self_id for s in segments
    )
    group = event.get("group_id")
    return InboundMessage(
        self_id=self_id,
        message_type=str(event["message_type"]),
        user_id=str(event.get("user_id", "")),
        group_id=str(group) if group is not None and event["message_type"] == "group" else None,
        text=text,
        mentioned=mentioned,
        message_id=str(event.get("message_id", "")),
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

    def __init__(self, self_id: str, binding_key: str, send: Callable[[str], Awaitable[None]]):
        self.self_id, self.binding_key = self_id, binding_key
        self._send = send
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
    """This process's open reverse-WebSocket connections, by binding key (one per binding; a new
    connection of the same binding replaces the old one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, ActionChannel] = {}

    def add(self, channel: ActionChannel) -> None:
        with self._lock:
            self._by_key[channel.binding_key] = channel

    def remove(self, channel: ActionChannel) -> None:
        with self._lock:
            if self._by_key.get(channel.binding_key) is channel:
                del self._by_key[channel.binding_key]
        channel.close()

    def get(self, binding_key: str) -> ActionChannel | None:
        with self._lock:
            return self._by_key.get(binding_key)


registry = ConnectionRegistry()


def call_http(api_url: str, access_token: str, action: str, params: dict[str, Any]) -> dict[str, Any]:
    """One action through the implementation's HTTP API (``POST <api_url>/<action>``, Bearer token,
    through :mod:`mewdex.egress`). Raises :class:`OneBotError`."""
    from mewdex.egress import EgressError, fetch

    headers = {"content-type": "application/json"}
    if access_token:
        headers["authorization"] = f"Bearer {access_token}"
    try:
        response = fetch("POST", f"{api_url.rstrip('/')}/{action}", headers=headers, json=params, timeout=30.0)
    except EgressError as exc:
        raise OneBotError(
            exc.code, f"OneBot {action} failed: {exc.message}", retryable=exc.code == "egress_failed"
        ) from None
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
