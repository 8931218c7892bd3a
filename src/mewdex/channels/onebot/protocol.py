"""OneBot v11 (NapCat, LLOneBot, Lagrange), the protocol codec: signatures, message segments, events, actions.

Transports (botuniverse/onebot-11 ``communication/``):

* **Reverse WebSocket** (primary): the OneBot implementation dials mewdex at ``/channels/onebot/ws``
  with ``X-Self-ID: <bot QQ>``, ``X-Client-Role: Universal`` and ``Authorization: Bearer <token>``
  (or ``?access_token=``). Events arrive as JSON frames; mewdex calls actions with
  ``{"action", "params", "echo"}`` and the implementation answers ``{"status", "retcode", "data",
  "echo"}`` on the same socket. :class:`.transport.ActionChannel` matches answers to calls by ``echo``;
  :data:`.transport.registry` holds this process's open connections by self id.
* **HTTP POST** (alternative): events are POSTed with ``X-Self-ID`` and ``X-Signature:
  sha1=<hex HMAC-SHA1(secret, raw body)>`` (:func:`verify_signature`); actions go to the
  implementation's HTTP API (``POST <api_url>/<action>``, :func:`.transport.call_http`, through
  :mod:`mewdex.egress`).

Messages are arrays of segments; a meme is an ``image`` segment with ``file=base64://…`` (QQ never
fetches anything from mewdex) and ``sub_type``/``subType`` 1, which NapCat, LLOneBot and Lagrange
show as a sticker (动画表情). Group messages are answered only when they @-mention the bot or start
with a command prefix (the framework's group rule, ``channels.base.addressed``).
Errors: :class:`~mewdex.channels.platform.PlatformError` (``onebot_not_connected``,
``onebot_action_failed`` with the implementation's ``retcode``/``wording`` as ``platform_code``/
``platform_error``, ``onebot_timeout``). The transports are :mod:`.transport` (the reverse WebSocket's
action side, the HTTP API) and :mod:`.relay` (a worker's send through the process holding the socket).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
from dataclasses import dataclass
from typing import Any

from mewdex.channels.platform import PlatformError

log = logging.getLogger(__name__)
#: seconds an action may take before it is ``onebot_timeout``
ACTION_TIMEOUT = 30.0


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
    ``mentioned`` (the bot was @-ed), ``message_id``, ``images`` (the URL of an attached picture),
    ``media`` (the URLs of every picture, sticker and clip: ``image``, ``mface`` and ``video``
    segments), ``reply_to`` (the message id of a ``reply`` segment: the message it answers)."""

    self_id: str
    message_type: str
    user_id: str
    group_id: str | None
    text: str
    mentioned: bool
    message_id: str
    images: tuple[str, ...] = ()
    media: tuple[str, ...] = ()
    reply_to: str | None = None


#: the segments whose ``url`` is a file a meme can be (a picture, a market sticker, a clip)
MEDIA_SEGMENTS = ("image", "mface", "video")

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
    media = tuple(
        str(s["data"]["url"])
        for s in segments
        if s.get("type") in MEDIA_SEGMENTS and str(s["data"].get("url", "")).startswith(("https://", "http://"))
    )
    replied = next((s["data"].get("id") for s in segments if s.get("type") == "reply"), None)
    reply_to = _id_of(replied, MESSAGE_ID) if replied is not None else None
    return InboundMessage(
        self_id=self_id,
        message_type=str(event["message_type"]),
        user_id=user,
        group_id=group,
        text=text,
        mentioned=mentioned,
        message_id=message_id,
        images=images[:1],
        media=media[:1],
        reply_to=reply_to,
    )


def send_action(message_type: str, target: str, segments: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The action that sends ``segments`` to a private chat (``target`` = user id) or a group."""
    if message_type == "group":
        return "send_group_msg", {"group_id": int(target), "message": segments}
    return "send_private_msg", {"user_id": int(target), "message": segments}


def check_answer(answer: dict[str, Any], action: str) -> dict[str, Any]:
    """The ``data`` of a successful action answer; raises :class:`PlatformError` for a failed one."""
    if answer.get("status") == "ok" and int(answer.get("retcode", 0)) == 0:
        data = answer.get("data")
        return data if isinstance(data, dict) else {}
    retcode = answer.get("retcode")
    wording = str(answer.get("wording") or answer.get("message") or answer.get("msg") or "")[:300]
    raise PlatformError(
        "onebot_action_failed", f"OneBot {action} failed: retcode {retcode} {wording}".strip(), retcode, wording
    )


def parse_target(target: str) -> tuple[str, str]:
    """``(kind, number)`` of a target ``private:<qq>`` / ``group:<group id>``; ``channel_config_invalid`` otherwise."""
    kind, _, number = target.partition(":")
    if kind not in ("private", "group") or not number.isdigit():
        raise PlatformError("channel_config_invalid", f"not a OneBot target: {target[:40]!r}")
    return kind, number


def message_segments(kind: str, data: bytes | None, text: str | None) -> list[dict[str, Any]]:
    """The segments of a send: the image (a sticker) first, then the text on a line of its own."""
    segments = [image_segment(data)] if data is not None else []
    if text:
        segments.append(text_segment(("\n" if segments else "") + text))
    return segments
