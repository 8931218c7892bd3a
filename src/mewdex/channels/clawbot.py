"""WeChat ClawBot: Tencent's iLink bot API (``https://ilinkai.weixin.qq.com``), protocol layer.

Reference: Tencent/openclaw-weixin (``docs/protocol.md``, ``src/api/api.ts``, ``src/cdn/upload.ts``).
Every request goes through :mod:`mewdex.egress`.

* **QR login** (no auth): :func:`get_bot_qrcode` → ``{qrcode, qrcode_img_content}`` (the content is
  what the QR code shows); :func:`get_qrcode_status` → ``status`` ``wait`` | ``scaned`` |
  ``confirmed`` | ``expired`` | ``need_verifycode`` | ``scaned_but_redirect`` (``redirect_host``) |
  ``binded_redirect``; ``confirmed`` carries ``bot_token``, ``ilink_bot_id``, ``ilink_user_id`` (the
  person who scanned) and ``baseurl`` — seed 004's ``bot_token``, ``bot_im_id``, ``user_im_id``,
  ``base_url``.
* **Headers** (:func:`headers`): ``AuthorizationType: ilink_bot_token``, ``Authorization: Bearer
  <bot_token>``, ``X-WECHAT-UIN`` = base64 of a random uint32's decimal text (new per request),
  ``iLink-App-Id: bot``, ``iLink-App-ClientVersion``. Bodies carry ``base_info``.
* **Inbound**: :func:`get_updates` long-polls ``getupdates {get_updates_buf}`` (≈35 s; a client
  timeout is an empty batch) and returns the messages and the next cursor (kept in the binding).
* **Outbound**: :func:`send_message` posts one item per request (image and caption are two sends);
  ``ret`` ≠ 0 is a failed delivery (:class:`ClawBotError`): ``-2`` means the context token is stale or
  its quota is used (``channel_window_closed``), ``-14`` that the session expired
  (``clawbot_session_expired``). :func:`upload_image` is the CDN upload: AES-128-ECB with PKCS#7, a
  random 16-byte key, ``getuploadurl`` with the raw size and MD5, then the ciphertext POSTed to the CDN,
  whose ``x-encrypted-param`` answer header is the download parameter.
* **The window**: a bot may write only after the person wrote, at most :data:`WINDOW_SENDS` messages
  per inbound message and within :data:`WINDOW_SECONDS` of it (Tencent says 24 h; observed expiry is
  shorter, so mewdex stops at 20 h). :func:`window_state` says whether a send fits.

The channel (the framework's adapter contract, :mod:`mewdex.channels.base`): :func:`start_login` /
:func:`login_status` / :func:`complete_login` bind the person who scanned (``bot_token`` and
``latest_context_token`` sealed); the ``clawbot_polling`` task (lane ``clawbot_poll``, scheduled every
``MEWDEX_CLAWBOT_POLL_SECONDS``) long-polls every active binding, queues the messages and reopens the
window (``context_token_at``, ``sends_since_ctx``) with the cursor in one transaction;
:class:`ClawBotAdapter` reserves window places before it sends and refuses with
``channel_window_closed`` past the window.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import secrets
import struct
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import quote, urlencode
from uuid import UUID

import segno
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings
from mewdex.channels.base import Binding, DeliveryFailed, Inbound, MemeFile, Sent
from mewdex.channels.errors import ChannelError
from mewdex.channels.registry import Channel, register_adapter
from mewdex.config import get_settings
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import ChannelBinding
from mewdex.dto.i18n import translate
from mewdex.egress import TIMEOUT_CODES, EgressError, fetch
from mewdex.platform import owners
from mewdex.queue.registry import Lane, RetryPolicy, TaskContext, register_lane, task_type
from mewdex.queue.scheduler import Schedule

DEFAULT_BASE_URL = "https://ilinkai.weixin.qq.com"
DEFAULT_CDN_URL = "https://novac2c.cdn.weixin.qq.com/c2c"
CHANNEL_VERSION = "1.0.2"
CLIENT_VERSION = str(0x00010002)  # iLink-App-ClientVersion: uint32 0x00MMNNPP in decimal
LONG_POLL_SECONDS = 35.0
WINDOW_SECONDS = 20 * 3600
WINDOW_SENDS = 10
ITEM_TEXT, ITEM_IMAGE = 1, 2
MESSAGE_TYPE_USER, MESSAGE_TYPE_BOT = 1, 2
MEDIA_TYPE_IMAGE = 1
QR_STATUSES = ("wait", "scaned", "confirmed", "expired", "need_verifycode", "scaned_but_redirect", "binded_redirect")


class ClawBotError(Exception):
    """A failed iLink call: ``code`` (``channel_window_closed``, ``clawbot_session_expired``,
    ``clawbot_send_failed``, ``clawbot_upload_failed``, ``clawbot_api_error`` or an ``egress_*``
    code), iLink's ``ret``/``errmsg``, ``retryable``."""

    def __init__(self, code: str, message: str, ret: int | None = None, errmsg: str = "", retryable: bool = False):
        super().__init__(message)
        self.code, self.message, self.ret, self.errmsg, self.retryable = code, message, ret, errmsg, retryable


def _uin() -> str:
    return base64.b64encode(str(struct.unpack(">I", os.urandom(4))[0]).encode()).decode()


def headers(bot_token: str | None = None) -> dict[str, str]:
    """The request headers (a fresh ``X-WECHAT-UIN`` each time)."""
    out = {
        "content-type": "application/json",
        "AuthorizationType": "ilink_bot_token",
        "X-WECHAT-UIN": _uin(),
        "iLink-App-Id": "bot",
        "iLink-App-ClientVersion": CLIENT_VERSION,
    }
    if bot_token:
        out["Authorization"] = f"Bearer {bot_token}"
    return out


def _base_info() -> dict[str, str]:
    return {"channel_version": CHANNEL_VERSION, "bot_agent": "mewdex"}


def _json(method: str, url: str, what: str, *, token: str | None = None, body=None, timeout: float = 15.0) -> dict:
    try:
        response = fetch(method, url, headers=headers(token), json=body, timeout=timeout)
    except EgressError as exc:
        raise ClawBotError(exc.code, f"ClawBot {what} failed: {exc.message}", retryable=exc.retryable) from None
    if response.status in (401, 403):
        raise ClawBotError("clawbot_session_expired", f"ClawBot refused the bot token ({response.status})")
    if response.status >= 400:
        raise ClawBotError(
            "clawbot_api_error", f"ClawBot {what} answered HTTP {response.status}", retryable=response.status >= 500
        )
    try:
        data = response.json()
    except ValueError:
        raise ClawBotError("clawbot_api_error", f"ClawBot {what} did not answer JSON") from None
    return data if isinstance(data, dict) else {}


def _url(base_url: str, path: str) -> str:
    return f"{base_url.rstrip('/')}/ilink/bot/{path}"


# ------------------------------------------------------------------ QR login


def get_bot_qrcode(base_url: str = DEFAULT_BASE_URL) -> dict[str, str]:
    """A new login QR: ``{"qrcode": <id to poll>, "qrcode_img_content": <what the QR code encodes>}``."""
    data = _json("POST", _url(base_url, "get_bot_qrcode?bot_type=3"), "get_bot_qrcode", body={"local_token_list": []})
    if not data.get("qrcode"):
        raise ClawBotError("clawbot_api_error", "ClawBot gave no QR code")
    return {"qrcode": str(data["qrcode"]), "qrcode_img_content": str(data.get("qrcode_img_content") or "")}


def get_qrcode_status(base_url: str, qrcode: str, verify_code: str | None = None, timeout: float = 15.0) -> dict:
    """The QR's state (module doc): ``{"status", …}``; ``confirmed`` adds ``bot_token``,
    ``ilink_bot_id``, ``ilink_user_id``, ``baseurl``."""
    query = {"qrcode": qrcode, **({"verify_code": verify_code} if verify_code else {})}
    data = _json("GET", _url(base_url, "get_qrcode_status?" + urlencode(query)), "get_qrcode_status", timeout=timeout)
    status = str(data.get("status") or "")
    if status not in QR_STATUSES:
        raise ClawBotError("clawbot_api_error", f"ClawBot answered an unknown QR status {status[:40]!r}")
    if status == "confirmed" and not (data.get("bot_token") and data.get("ilink_bot_id")):
        raise ClawBotError("clawbot_api_error", "ClawBot confirmed the login without a bot token")
    return data


# ------------------------------------------------------------------ inbound


@dataclass(frozen=True)
class InboundMessage:
    """One user message from ``getupdates``: ``from_user_id`` (seed ``user_im_id``), ``text``,
    ``context_token`` (echoed on sends), ``message_id``, ``images`` (refs for :func:`download_image`)."""

    from_user_id: str
    text: str
    context_token: str
    message_id: str
    images: tuple[str, ...] = ()


def parse_message(raw: dict[str, Any]) -> InboundMessage | None:
    """A user message of a ``getupdates`` batch; None for the bot's own and empty ones."""
    if int(raw.get("message_type") or MESSAGE_TYPE_USER) != MESSAGE_TYPE_USER:
        return None
    texts, images = [], []
    for item in raw.get("item_list") or []:
        if item.get("type") == ITEM_TEXT:
            texts.append(str((item.get("text_item") or {}).get("text") or ""))
        elif item.get("type") == ITEM_IMAGE:
            media = (item.get("image_item") or {}).get("media") or {}
            if media.get("encrypt_query_param") and media.get("aes_key"):
                images.append(json.dumps({"param": media["encrypt_query_param"], "aes_key": media["aes_key"]}))
    message_id = str(raw.get("message_id") or raw.get("seq") or raw.get("client_id") or "")
    return InboundMessage(
        from_user_id=str(raw.get("from_user_id") or ""),
        text="".join(texts).strip(),
        context_token=str(raw.get("context_token") or ""),
        message_id=message_id,
        images=tuple(images),
    )


def get_updates(base_url: str, bot_token: str, cursor: str, timeout: float = LONG_POLL_SECONDS) -> tuple[list, str]:
    """One long poll: ``(raw messages, next cursor)``. A poll that times out (``egress_timeout`` /
    ``egress_deadline``) is an empty batch with the same cursor; any other egress failure raises.
    ``ret`` -14 is ``clawbot_session_expired``; other ``ret`` ≠ 0 ``clawbot_api_error``."""
    body = {"get_updates_buf": cursor or "", "base_info": _base_info()}
    try:
        data = _json(
            "POST", _url(base_url, "getupdates"), "getupdates", token=bot_token, body=body, timeout=timeout + 5
        )
    except ClawBotError as exc:
        if exc.code in TIMEOUT_CODES:  # the long poll ended without an answer: nothing new
            return [], cursor
        raise
    ret = int(data.get("ret") or data.get("errcode") or 0)
    if ret == -14:
        raise ClawBotError("clawbot_session_expired", "the ClawBot session expired: scan the QR code again", ret)
    if ret != 0:
        raise ClawBotError(
            "clawbot_api_error", f"ClawBot getupdates: ret {ret}", ret, str(data.get("errmsg") or ""), retryable=True
        )
    msgs = data.get("msgs") or []
    return (msgs if isinstance(msgs, list) else []), str(data.get("get_updates_buf") or cursor or "")


# ------------------------------------------------------------------ outbound


def text_item(text: str) -> dict[str, Any]:
    return {"type": ITEM_TEXT, "text_item": {"text": text}}


def send_message(base_url: str, bot_token: str, to_user_id: str, context_token: str, item: dict) -> str:
    """``sendmessage`` with one item; returns the ``client_id`` it was sent with. ``ret`` ≠ 0 raises
    :class:`ClawBotError` (module doc)."""
    client_id = f"mewdex-{secrets.token_hex(8)}"
    body = {
        "msg": {
            "from_user_id": "",
            "to_user_id": to_user_id,
            "client_id": client_id,
            "message_type": MESSAGE_TYPE_BOT,
            "message_state": 2,
            "context_token": context_token,
            "item_list": [item],
        },
        "base_info": _base_info(),
    }
    data = _json("POST", _url(base_url, "sendmessage"), "sendmessage", token=bot_token, body=body)
    ret = int(data.get("ret") or data.get("errcode") or 0)
    if ret == 0:
        return client_id
    errmsg = str(data.get("errmsg") or "")[:300]
    if ret == -2:
        raise ClawBotError(
            "channel_window_closed",
            f"WeChat did not deliver (ret -2 {errmsg}): the chat's context has expired; the person must write first",
            ret,
            errmsg,
        )
    if ret == -14:
        raise ClawBotError(
            "clawbot_session_expired", "the ClawBot session expired: scan the QR code again", ret, errmsg
        )
    raise ClawBotError("clawbot_send_failed", f"WeChat did not deliver: ret {ret} {errmsg}".strip(), ret, errmsg)


def aes_ecb_encrypt(data: bytes, key: bytes) -> bytes:
    """AES-128-ECB with PKCS#7 padding (the CDN's encryption)."""
    padder = padding.PKCS7(128).padder()
    encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()  # noqa: S305 - the protocol's cipher
    return encryptor.update(padder.update(data) + padder.finalize()) + encryptor.finalize()


def aes_ecb_decrypt(data: bytes, key: bytes) -> bytes:
    decryptor = Cipher(algorithms.AES(key), modes.ECB()).decryptor()  # noqa: S305 - the protocol's cipher
    unpadder = padding.PKCS7(128).unpadder()
    return unpadder.update(decryptor.update(data) + decryptor.finalize()) + unpadder.finalize()


def padded_size(size: int) -> int:
    """Ciphertext size of ``size`` bytes after AES-128-ECB with PKCS#7."""
    return (size // 16 + 1) * 16


def aes_key_of(value: str) -> bytes:
    """The 16-byte key of an ``aes_key`` field: base64 of the hex text (what the official client
    sends) or base64 of the raw bytes (accepted on receive)."""
    raw = base64.b64decode(value)
    if len(raw) == 32:
        return bytes.fromhex(raw.decode())
    if len(raw) == 16:
        return raw
    raise ClawBotError("clawbot_api_error", "an aes_key of unexpected length")


def upload_image(base_url: str, bot_token: str, to_user_id: str, data: bytes, cdn_url: str = DEFAULT_CDN_URL) -> dict:
    """The CDN upload (module doc); returns the ``image_item`` to send."""
    key = os.urandom(16)
    filekey = secrets.token_hex(16)
    ciphertext = aes_ecb_encrypt(data, key)
    body = {
        "filekey": filekey,
        "media_type": MEDIA_TYPE_IMAGE,
        "to_user_id": to_user_id,
        "rawsize": len(data),
        "rawfilemd5": hashlib.md5(data).hexdigest(),  # noqa: S324 - the protocol's checksum
        "filesize": len(ciphertext),
        "no_need_thumb": True,
        "aeskey": key.hex(),
        "base_info": _base_info(),
    }
    answer = _json("POST", _url(base_url, "getuploadurl"), "getuploadurl", token=bot_token, body=body)
    if int(answer.get("ret") or 0) != 0:
        raise ClawBotError("clawbot_upload_failed", f"ClawBot getuploadurl: ret {answer.get('ret')}", answer.get("ret"))
    upload_url = answer.get("upload_full_url")
    if not upload_url:
        param = answer.get("upload_param")
        if not param:
            raise ClawBotError("clawbot_upload_failed", "ClawBot gave no upload URL")
        upload_url = f"{cdn_url.rstrip('/')}/upload?encrypted_query_param={quote(param, safe='')}&filekey={filekey}"
    download_param = None
    for _attempt in range(3):
        try:
            response = fetch(
                "POST",
                upload_url,
                headers={"content-type": "application/octet-stream"},
                content=ciphertext,
                timeout=60.0,
            )
        except EgressError as exc:
            raise ClawBotError(exc.code, f"ClawBot CDN upload failed: {exc.message}", retryable=True) from None
        if response.status >= 500:
            continue
        if response.status >= 400:
            reason = response.headers.get("x-error-message", "")[:200]
            raise ClawBotError(
                "clawbot_upload_failed", f"the ClawBot CDN refused the upload ({response.status} {reason})"
            )
        download_param = response.headers.get("x-encrypted-param")
        break
    if not download_param:
        raise ClawBotError("clawbot_upload_failed", "the ClawBot CDN gave no download parameter", retryable=True)
    return {
        "type": ITEM_IMAGE,
        "image_item": {
            "media": {
                "encrypt_query_param": download_param,
                "aes_key": base64.b64encode(key.hex().encode()).decode(),
                "encrypt_type": 1,
            },
            "mid_size": len(ciphertext),
        },
    }


def download_image(ref: str, cdn_url: str = DEFAULT_CDN_URL, max_bytes: int = 20 * 1024 * 1024) -> bytes:
    """The bytes of an inbound image (a ref from :func:`parse_message`): downloaded from the CDN and
    decrypted."""
    parts = json.loads(ref)
    url = f"{cdn_url.rstrip('/')}/download?encrypted_query_param={quote(parts['param'], safe='')}"
    try:
        response = fetch("GET", url, max_bytes=max_bytes, timeout=60.0)
    except EgressError as exc:
        raise ClawBotError(exc.code, f"ClawBot CDN download failed: {exc.message}") from None
    if response.status != 200:
        raise ClawBotError("clawbot_api_error", f"ClawBot CDN download answered HTTP {response.status}")
    return aes_ecb_decrypt(response.content, aes_key_of(parts["aes_key"]))


# ------------------------------------------------------------------ the window


def window_state(context_token_at: str | datetime | None, sends_since_ctx: int, now: datetime | None = None) -> str:
    """``"open"``, or why a send would not be delivered: ``"no_context"`` (the person never wrote),
    ``"expired"`` (more than :data:`WINDOW_SECONDS` since they last wrote) or ``"quota"``
    (:data:`WINDOW_SENDS` messages sent since)."""
    if not context_token_at:
        return "no_context"
    at = datetime.fromisoformat(context_token_at) if isinstance(context_token_at, str) else context_token_at
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    now = now or datetime.now(UTC)
    if (now - at).total_seconds() > WINDOW_SECONDS:
        return "expired"
    if sends_since_ctx >= WINDOW_SENDS:
        return "quota"
    return "open"


# ------------------------------------------------------------------ the channel (framework adapter)

NAME = "clawbot"
POLL_TASK = "clawbot_polling"
POLL_LANE = "clawbot_poll"
MAX_POLLERS = 16
log = logging.getLogger(__name__)

register_lane(Lane(POLL_LANE, concurrency=lambda: 1, listed=False))


def api_url() -> str:
    return get_settings().clawbot_api_url.rstrip("/")


def cdn_url() -> str:
    return get_settings().clawbot_cdn_url.rstrip("/")


def qr_svg(content: str) -> str:
    """An SVG QR code of ``content`` (what the Channels page shows to scan): always a full QR code
    (``segno.make`` picks a Micro QR for short content, which WeChat cannot scan)."""
    buffer = io.BytesIO()
    segno.make_qr(content, error="m").save(buffer, kind="svg", scale=4, border=2, xmldecl=False, svgns=True)
    return buffer.getvalue().decode()


def start_login() -> dict[str, str]:
    """A new login QR for the Channels page: ``{"qrcode", "qrcode_img_content", "qr_svg"}``.
    Raises :class:`ClawBotError`."""
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


def _poll_binding(sessions: sessionmaker[Session], scope_id: str, view: Binding, seconds: float) -> int:
    """One long poll for one binding; the messages are queued, the window reopened and the cursor
    kept in one transaction. Returns how many messages came."""
    from mewdex.channels import inbound

    config = view.config
    try:
        raw, cursor = get_updates(config["base_url"], config["bot_token"], config.get("get_updates_buf") or "", seconds)
    except ClawBotError as exc:
        with sessions.begin() as session:
            row = bindings.get(session, scope_id, NAME, lock=True)
            if row is not None and row.status == "active":
                bindings.update_config(session, row, {"poll_error": exc.code})
        log.warning("clawbot polling: %s", exc.code)
        return 0
    count = 0
    with sessions.begin() as session:
        row = bindings.get(session, scope_id, NAME, lock=True)
        if row is None or row.status != "active" or row.identity != view.identity:
            return 0  # revoked (or re-bound) while polling: nothing of this poll is taken in
        if not owners.owner_active(session, scope_id):
            return 0  # the owner was disabled while polling
        changes: dict[str, Any] = {"get_updates_buf": cursor, "poll_error": None}
        for message in filter(None, map(parse_message, raw)):
            if message.from_user_id != view.identity:
                continue
            if message.context_token:
                changes.update(
                    latest_context_token=message.context_token,
                    context_token_at=datetime.now(UTC).isoformat(),
                    sends_since_ctx=0,
                )
            if message.text or message.images:
                inbound.submit(
                    session,
                    Inbound(channel=NAME, sender=message.from_user_id, chat=message.from_user_id, text=message.text,
                            images=message.images, message_id=message.message_id or None,
                            scope_id=scope_id),  # the binding whose bot token polled it
                )  # fmt: skip
                count += 1
        bindings.update_config(session, row, changes)
    return count


def poll_once(sessions: sessionmaker[Session], seconds: float) -> int:
    """Long-poll every active ClawBot binding at once (one thread each, at most :data:`MAX_POLLERS`)."""
    from concurrent.futures import ThreadPoolExecutor

    with sessions.begin() as session:
        rows = session.execute(
            select(ChannelBinding).where(ChannelBinding.channel == NAME, ChannelBinding.status == "active")
        ).scalars()
        # A disabled owner's bindings are not polled (their poller stops; enabling resumes it).
        views = [(row.scope_id, bindings.view(row)) for row in rows if owners.owner_active(session, row.scope_id)]
    if not views:
        return 0
    with ThreadPoolExecutor(max_workers=min(MAX_POLLERS, len(views))) as pool:
        return sum(pool.map(lambda v: _poll_binding(sessions, v[0], v[1], seconds), views))


@task_type(POLL_TASK, lane=POLL_LANE, retry=RetryPolicy(max_attempts=1))
def clawbot_polling(ctx: TaskContext) -> dict[str, Any]:
    """Keep ClawBot's inbound going for :attr:`clawbot_poll_seconds`. ``{"messages"}``."""
    return {"messages": poll_once(ctx.sessions, get_settings().clawbot_poll_seconds)}


def schedules() -> list[Schedule]:
    from mewdex.channels.delivery import UNBOUND_SCOPE

    return [Schedule(POLL_TASK, POLL_TASK, lambda: get_settings().clawbot_poll_seconds, UNBOUND_SCOPE)]


def _failure(exc: ClawBotError) -> DeliveryFailed:
    code = exc.code
    if code.startswith("egress_"):
        code = "channel_unreachable"
    elif code in ("clawbot_send_failed", "clawbot_api_error", "clawbot_upload_failed"):
        code = "channel_platform_error"
    return DeliveryFailed(
        code, exc.message, platform_code=exc.ret if exc.ret is not None else exc.code,
        platform_error=exc.errmsg or exc.message, retryable=exc.retryable,
    )  # fmt: skip


def window_text(state: str, lang: str = "en") -> str:
    """Why a send does not fit the window (:func:`window_state`'s ``state``) in ``lang`` (``en``/``zh``;
    the delivery's failure, in the language its account set, else English)."""
    return translate(lang, f"bot.clawbot.window.{state}", hours=WINDOW_SECONDS // 3600, sends=WINDOW_SENDS)


class ClawBotAdapter:
    """The ``clawbot`` channel (module doc): one bot per person, bound by scanning a QR code."""

    name: ClassVar[str] = NAME
    secret_fields: ClassVar[tuple[str, ...]] = ("bot_token", "latest_context_token")
    min_send_interval: ClassVar[float] = 1.0
    command_prefixes: ClassVar[tuple[str, ...]] = ("/",)
    outbound_only: ClassVar[bool] = False

    def target_of(self, binding: Binding) -> str:
        return str(binding.config.get("user_im_id") or binding.identity or "")

    def binding_config(self, inbound: Inbound) -> dict[str, Any]:
        raise ChannelError(
            "channel_config_invalid", "WeChat ClawBot binds by scanning the QR code on the Channels page"
        )

    def bind_help(self, lang: str) -> str:
        return translate(lang, "bot.bind_help.clawbot")

    def fetch_image(self, ref: str) -> bytes:
        return download_image(ref, cdn_url())

    def _use_window(self, binding: Binding, sends: int) -> dict[str, Any]:
        """Reserve ``sends`` messages of the window (row-locked, counted before sending: a send
        that fails still used its place); raises ``channel_window_closed`` when they do not fit."""
        with get_sessionmaker().begin() as session:
            row = bindings.get(session, binding.scope_id, NAME, lock=True)
            if row is None or row.status != "active":
                raise DeliveryFailed("channel_binding_revoked", "the WeChat binding was revoked")
            config = bindings.open_config(row.scope_id, NAME, row.config or {})
            used = int(config.get("sends_since_ctx") or 0)
            state = window_state(config.get("context_token_at"), used + sends - 1)
            if state != "open":
                owner = owners.user_for_scope(session, row.scope_id)  # its words in the account's language
                text = window_text(state, (owner.language if owner is not None else None) or "en")
                raise DeliveryFailed("channel_window_closed", text, platform_code=state)
            bindings.update_config(session, row, {"sends_since_ctx": used + sends})
            return config

    def _send_items(self, binding: Binding | None, target: str, items: list) -> Sent:
        if binding is None:
            raise DeliveryFailed("channel_not_bound", "WeChat ClawBot sends only to a bound person")
        config = self._use_window(binding, len(items))
        client_id = None
        try:
            for make in items:
                sent = send_message(
                    config["base_url"],
                    config["bot_token"],
                    target,
                    config.get("latest_context_token") or "",
                    make(config),
                )
                client_id = client_id or sent
        except ClawBotError as exc:
            raise _failure(exc) from None
        return Sent(client_id)

    def send_text(self, binding: Binding | None, target: str, text: str) -> Sent:
        return self._send_items(binding, target, [lambda _c: text_item(text)])

    def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent:
        def image(config: dict[str, Any]) -> dict[str, Any]:
            return upload_image(config["base_url"], config["bot_token"], target, meme.data, cdn_url())

        items = [image] + ([lambda _c: text_item(caption)] if caption else [])
        return self._send_items(binding, target, items)


register_adapter(ClawBotAdapter())


CHANNEL = Channel(name=NAME, modules=(__name__,), errors={"clawbot_session_expired": 502})
