"""WeChat ClawBot: Tencent's iLink bot API (``https://ilinkai.weixin.qq.com``), the API client.

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
  ``ret`` ≠ 0 is a failed delivery (:class:`~mewdex.channels.platform.PlatformError`, ``platform_code``
  the ``ret``): ``-2`` means the context token is stale or
  its quota is used (``channel_window_closed``), ``-14`` that the session expired
  (``clawbot_session_expired``). :func:`upload_image` is the CDN upload: AES-128-ECB with PKCS#7, a
  random 16-byte key, ``getuploadurl`` with the raw size and MD5, then the ciphertext POSTed to the CDN,
  whose ``x-encrypted-param`` answer header is the download parameter.
* **The window**: a bot may write only after the person wrote, at most :data:`WINDOW_SENDS` messages
  per inbound message and within :data:`WINDOW_SECONDS` of it (Tencent says 24 h; observed expiry is
  shorter, so mewdex stops at 20 h). :func:`window_state` says whether a send fits.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import struct
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from mewdex.channels.platform import PlatformError, call_json, fetch_image
from mewdex.egress import TIMEOUT_CODES, EgressError, fetch

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
    """One iLink call (:func:`mewdex.channels.platform.call_json`): 401/403 is ``clawbot_session_expired``."""
    return call_json(
        method, url, platform="ClawBot", what=what, error_code="clawbot_api_error", headers=headers(token),
        json=body, timeout=timeout, refused={401: "clawbot_session_expired", 403: "clawbot_session_expired"},
    ).data  # fmt: skip


def _url(base_url: str, path: str) -> str:
    return f"{base_url.rstrip('/')}/ilink/bot/{path}"


# ------------------------------------------------------------------ QR login


def get_bot_qrcode(base_url: str = DEFAULT_BASE_URL) -> dict[str, str]:
    """A new login QR: ``{"qrcode": <id to poll>, "qrcode_img_content": <what the QR code encodes>}``."""
    data = _json("POST", _url(base_url, "get_bot_qrcode?bot_type=3"), "get_bot_qrcode", body={"local_token_list": []})
    if not data.get("qrcode"):
        raise PlatformError("clawbot_api_error", "ClawBot gave no QR code")
    return {"qrcode": str(data["qrcode"]), "qrcode_img_content": str(data.get("qrcode_img_content") or "")}


def get_qrcode_status(base_url: str, qrcode: str, verify_code: str | None = None, timeout: float = 15.0) -> dict:
    """The QR's state (module doc): ``{"status", …}``; ``confirmed`` adds ``bot_token``,
    ``ilink_bot_id``, ``ilink_user_id``, ``baseurl``."""
    query = {"qrcode": qrcode, **({"verify_code": verify_code} if verify_code else {})}
    data = _json("GET", _url(base_url, "get_qrcode_status?" + urlencode(query)), "get_qrcode_status", timeout=timeout)
    status = str(data.get("status") or "")
    if status not in QR_STATUSES:
        raise PlatformError("clawbot_api_error", f"ClawBot answered an unknown QR status {status[:40]!r}")
    if status == "confirmed" and not (data.get("bot_token") and data.get("ilink_bot_id")):
        raise PlatformError("clawbot_api_error", "ClawBot confirmed the login without a bot token")
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
    except PlatformError as exc:
        if exc.code in TIMEOUT_CODES:  # the long poll ended without an answer: nothing new
            return [], cursor
        raise
    ret = int(data.get("ret") or data.get("errcode") or 0)
    if ret == -14:
        raise PlatformError("clawbot_session_expired", "the ClawBot session expired: scan the QR code again", ret)
    if ret != 0:
        raise PlatformError(
            "clawbot_api_error", f"ClawBot getupdates: ret {ret}", ret, str(data.get("errmsg") or ""), retryable=True
        )
    msgs = data.get("msgs") or []
    return (msgs if isinstance(msgs, list) else []), str(data.get("get_updates_buf") or cursor or "")


# ------------------------------------------------------------------ outbound


def text_item(text: str) -> dict[str, Any]:
    return {"type": ITEM_TEXT, "text_item": {"text": text}}


def send_message(base_url: str, bot_token: str, to_user_id: str, context_token: str, item: dict) -> str:
    """``sendmessage`` with one item; returns the ``client_id`` it was sent with. ``ret`` ≠ 0 raises
    :class:`PlatformError` (module doc)."""
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
        raise PlatformError(
            "channel_window_closed",
            f"WeChat did not deliver (ret -2 {errmsg}): the chat's context has expired; the person must write first",
            ret,
            errmsg,
        )
    if ret == -14:
        raise PlatformError(
            "clawbot_session_expired", "the ClawBot session expired: scan the QR code again", ret, errmsg
        )
    raise PlatformError("clawbot_send_failed", f"WeChat did not deliver: ret {ret} {errmsg}".strip(), ret, errmsg)


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
    raise PlatformError("clawbot_api_error", "an aes_key of unexpected length")


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
        raise PlatformError(
            "clawbot_upload_failed", f"ClawBot getuploadurl: ret {answer.get('ret')}", answer.get("ret")
        )
    upload_url = answer.get("upload_full_url")
    if not upload_url:
        param = answer.get("upload_param")
        if not param:
            raise PlatformError("clawbot_upload_failed", "ClawBot gave no upload URL")
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
            raise PlatformError(exc.code, f"ClawBot CDN upload failed: {exc.message}", retryable=True) from None
        if response.status >= 500:
            continue
        if response.status >= 400:
            reason = response.headers.get("x-error-message", "")[:200]
            raise PlatformError(
                "clawbot_upload_failed", f"the ClawBot CDN refused the upload ({response.status} {reason})"
            )
        download_param = response.headers.get("x-encrypted-param")
        break
    if not download_param:
        raise PlatformError("clawbot_upload_failed", "the ClawBot CDN gave no download parameter", retryable=True)
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
    """The bytes of an inbound image (a ref from :func:`parse_message`): downloaded from the CDN
    (:func:`mewdex.channels.platform.fetch_image`; the CDN serves ciphertext) and decrypted."""
    parts = json.loads(ref)
    url = f"{cdn_url.rstrip('/')}/download?encrypted_query_param={quote(parts['param'], safe='')}"
    return aes_ecb_decrypt(fetch_image(url, max_bytes=max_bytes, content_types=None), aes_key_of(parts["aes_key"]))


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
