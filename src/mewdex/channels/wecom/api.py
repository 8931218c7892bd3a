"""WeCom (企业微信) self-built app: the server API and the callback (the API client).

API (``base_url`` default ``https://qyapi.weixin.qq.com``; every call through :mod:`mewdex.egress`):

* ``GET /cgi-bin/gettoken?corpid=&corpsecret=`` → ``{errcode, access_token, expires_in}`` (7200 s).
  :func:`access_token` caches it per (base URL, corp id, secret) in the process until 5 minutes
  before it expires, and fetches a new one when WeCom answers 40014/42001/41001 (stale token).
* ``POST /cgi-bin/media/upload?access_token=&type=image|file`` (multipart field ``media``) →
  ``{media_id}`` (valid 3 days). Images: JPG/PNG ≤ :data:`IMAGE_MAX_BYTES`.
* ``POST /cgi-bin/message/send?access_token=`` ``{touser, msgtype, agentid, image|file|text}``.
* ``GET /cgi-bin/media/get?access_token=&media_id=`` → the file's bytes (an inbound message's
  ``MediaId``, valid 3 days), or a JSON ``{errcode, errmsg}`` (40007: an unknown media id):
  :func:`download_media`.

Errors: :class:`~mewdex.channels.platform.PlatformError` (``code`` ``wecom_ip_not_trusted`` for
60020 — the server's address is not in the app's 企业可信IP —, ``wecom_user_invalid`` for
81013/40031, ``wecom_credentials_invalid`` for 40001/40013/40056, ``wecom_rate_limited`` for
45009/45033, ``wecom_api_error`` for any other errcode, or an ``egress_*`` code); its
``platform_code``/``platform_error`` are WeCom's ``errcode``/``errmsg`` and are what the delivery log
shows. ``retryable`` says whether another attempt can help (-1 "system busy", a rate limit, no answer).

Callback: :func:`parse_callback` opens an encrypted ``POST`` (see :mod:`.crypto`) into an
:class:`InboundMessage`. :func:`prepare_image` turns a meme into what WeCom can show.
"""

from __future__ import annotations

import hashlib
import io
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from mewdex.channels.platform import PlatformError, call_json, multipart
from mewdex.channels.wecom.crypto import WXBizMsgCrypt

DEFAULT_BASE_URL = "https://qyapi.weixin.qq.com"
IMAGE_MAX_BYTES = 2 * 1024 * 1024  # message/send image: JPG/PNG, 2 MB (the conservative documented limit)
FILE_MAX_BYTES = 20 * 1024 * 1024
STALE_TOKEN = {40014, 42001, 41001}
#: An inbound image's reference (``Inbound.images``) when the callback gave its ``MediaId``: this
#: prefix and the id (fetched by :func:`download_media`); a bare URL is its ``PicUrl``.
MEDIA_REF = "media_id:"
_CODES = {
    60020: "wecom_ip_not_trusted",
    81013: "wecom_user_invalid",
    40031: "wecom_user_invalid",
    40001: "wecom_credentials_invalid",
    40013: "wecom_credentials_invalid",
    40056: "wecom_credentials_invalid",
}
_RETRYABLE = {-1}
_RATE_LIMITED = {45009, 45033}
_tokens: dict[tuple[str, str, str], tuple[str, float]] = {}
_tokens_lock = threading.Lock()


@dataclass(frozen=True)
class WeComApp:
    """One self-built app: ``corp_id``, ``agent_id``, ``secret`` (the app's Secret), callback
    ``token`` and ``encoding_aes_key``, and ``base_url`` of the API."""

    corp_id: str
    agent_id: int
    secret: str
    token: str
    encoding_aes_key: str
    base_url: str = DEFAULT_BASE_URL

    def crypt(self) -> WXBizMsgCrypt:
        return WXBizMsgCrypt(self.token, self.encoding_aes_key, self.corp_id)


@dataclass(frozen=True)
class InboundMessage:
    """A decrypted callback: ``from_user`` (the member's userid), ``msg_type`` (``text``,
    ``image``, ``event``, …), ``content`` (text; ``""`` otherwise), ``msg_id`` (for de-duplication;
    events get ``<FromUserName>:<CreateTime>:<Event>``), ``agent_id``, ``event`` (for ``event``), an
    image's ``pic_url`` and ``media_id`` (for :func:`download_media`)."""

    from_user: str
    msg_type: str
    content: str
    msg_id: str
    agent_id: str
    event: str = ""
    pic_url: str = ""
    media_id: str = ""


def _error_for(data: dict[str, Any], what: str) -> PlatformError:
    errcode = int(data.get("errcode", -1))
    errmsg = str(data.get("errmsg", ""))[:300]
    if errcode in _RATE_LIMITED:
        message = f"WeCom refused {what}: rate limited ({errcode} {errmsg})".strip()
        return PlatformError("wecom_rate_limited", message, errcode, errmsg, retry_after=60)
    code = _CODES.get(errcode, "wecom_api_error")
    if errcode == 60020:
        message = f"WeCom refused {what}: this server's IP is not in the app's trusted IPs (60020)"
    else:
        message = f"WeCom refused {what}: {errcode} {errmsg}".strip()
    return PlatformError(code, message, errcode, errmsg, retryable=errcode in _RETRYABLE)


def _request(method: str, url: str, what: str, **kw) -> dict[str, Any]:
    """One call (:func:`mewdex.channels.platform.call_json`); WeCom's answer (errcode not checked)."""
    return call_json(
        method, url, platform="WeCom", what=what, error_code="wecom_api_error", errors_in_body=True, **kw
    ).data


def _cache_key(app: WeComApp) -> tuple[str, str, str]:
    return (app.base_url.rstrip("/"), app.corp_id, hashlib.sha256(app.secret.encode()).hexdigest())


def access_token(app: WeComApp, *, refresh: bool = False) -> str:
    """The app's access token (cached; ``refresh`` forces a new one). Raises :class:`PlatformError`."""
    key = _cache_key(app)
    with _tokens_lock:
        cached = _tokens.get(key)
        if cached and not refresh and cached[1] > time.time():
            return cached[0]
    query = urlencode({"corpid": app.corp_id, "corpsecret": app.secret})
    data = _request("GET", f"{key[0]}/cgi-bin/gettoken?{query}", "gettoken")
    if data.get("errcode", 0) != 0 or not data.get("access_token"):
        raise _error_for(data, "gettoken")
    token = str(data["access_token"])
    lifetime = max(60, int(data.get("expires_in", 7200)) - 300)
    with _tokens_lock:
        _tokens[key] = (token, time.time() + lifetime)
    return token


def forget_token(app: WeComApp) -> None:
    """Drop the cached token of ``app`` (after its secret changed)."""
    with _tokens_lock:
        _tokens.pop(_cache_key(app), None)


def _call(app: WeComApp, method: str, path: str, what: str, params: dict[str, str] | None = None, **kw) -> dict:
    """One API call with the access token; a stale token is refreshed once."""
    for attempt in (0, 1):
        token = access_token(app, refresh=attempt == 1)
        query = urlencode({"access_token": token, **(params or {})})
        data = _request(method, f"{app.base_url.rstrip('/')}{path}?{query}", what, **kw)
        errcode = int(data.get("errcode", 0))
        if errcode in STALE_TOKEN and attempt == 0:
            continue
        if errcode != 0:
            raise _error_for(data, what)
        return data
    raise AssertionError("unreachable")


def upload_media(app: WeComApp, data: bytes, filename: str, content_type: str, media_type: str = "image") -> str:
    """Upload one temporary media file (``media_type`` ``image`` or ``file``); returns its ``media_id``."""
    body, header = multipart(files={"media": (filename, data, content_type)}, file_length=True)
    result = _call(
        app, "POST", "/cgi-bin/media/upload", "media/upload", {"type": media_type},
        content=body, headers={"content-type": header}, timeout=60.0,
    )  # fmt: skip
    media_id = result.get("media_id")
    if not media_id:
        raise PlatformError("wecom_api_error", "WeCom media/upload answered no media_id")
    return str(media_id)


def download_media(app: WeComApp, media_id: str, max_bytes: int) -> bytes:
    """The bytes of a temporary media file (an inbound image's ``MediaId``) through ``media/get``,
    at most ``max_bytes`` (else ``egress_too_large``); a stale token is refreshed once. Raises
    :class:`PlatformError`: WeCom's errcode as in every call (module doc), ``platform_download_failed``
    for an HTTP status other than 200, an ``egress_*`` code when there was no answer."""
    from mewdex.egress import EgressError, fetch

    for attempt in (0, 1):
        query = urlencode({"access_token": access_token(app, refresh=attempt == 1), "media_id": media_id})
        try:
            response = fetch("GET", f"{app.base_url.rstrip('/')}/cgi-bin/media/get?{query}", max_bytes=max_bytes)
        except EgressError as exc:
            raise PlatformError(exc.code, f"WeCom media/get failed: {exc.message}", retryable=exc.retryable) from None
        if response.status >= 500:
            raise PlatformError("wecom_api_error", f"WeCom media/get answered HTTP {response.status}", response.status,
                                retryable=True)  # fmt: skip
        if response.status != 200:
            raise PlatformError("platform_download_failed", f"WeCom media/get answered HTTP {response.status}")
        if response.content_type not in ("application/json", "text/plain"):
            return response.content
        try:  # an error is a JSON body (WeCom's own content type for it is application/json)
            data = response.json()
        except ValueError:
            return response.content
        errcode = int(data.get("errcode", -1)) if isinstance(data, dict) else -1
        if errcode in STALE_TOKEN and attempt == 0:
            continue
        raise _error_for(data if isinstance(data, dict) else {}, "media/get")
    raise AssertionError("unreachable")


def send_message(app: WeComApp, touser: str, msgtype: str, body: dict[str, Any]) -> dict[str, Any]:
    """``message/send`` to one member; ``body`` is the ``msgtype`` object (``{"media_id"}``,
    ``{"content"}``). Returns WeCom's answer; an ``invaliduser`` answer is :class:`PlatformError`
    ``wecom_user_invalid`` (WeCom says 0 but delivered nothing)."""
    payload = {"touser": touser, "msgtype": msgtype, "agentid": app.agent_id, msgtype: body}
    result = _call(app, "POST", "/cgi-bin/message/send", "message/send", json=payload)
    if result.get("invaliduser"):
        raise PlatformError(
            "wecom_user_invalid", "WeCom did not deliver: the member is not in the app's visible range", 81013,
            str(result.get("errmsg", "")),
        )  # fmt: skip
    return result


def send_text(app: WeComApp, touser: str, content: str) -> dict[str, Any]:
    return send_message(app, touser, "text", {"content": content[:2000]})


@dataclass(frozen=True)
class PreparedImage:
    """A meme as WeCom takes it: ``data``, ``filename``, ``content_type``, ``media_type`` (``image``
    for an inline picture, ``file`` for an animated GIF so it keeps moving)."""

    data: bytes
    filename: str
    content_type: str
    media_type: str


def prepare_image(data: bytes, stem: str = "meme") -> PreparedImage:
    """JPG/PNG within :data:`IMAGE_MAX_BYTES` go as they are; an animated GIF goes as a ``file``
    (WeCom's image message takes no GIF) when ≤ 20 MB; everything else (WebP, a still GIF, a too
    large picture) is converted to PNG — or JPEG when PNG is still too large — scaled down until it
    fits. Raises :class:`mewdex.library.images.ImageError` for bytes that are no image."""
    from PIL import Image

    from mewdex.library import images

    fmt = images.sniff_format(data[:16])
    if fmt in ("jpeg", "png") and len(data) <= IMAGE_MAX_BYTES:
        return PreparedImage(data, f"{stem}.{'jpg' if fmt == 'jpeg' else 'png'}", f"image/{fmt}", "image")
    if fmt == "gif" and len(data) <= FILE_MAX_BYTES and images.probe(data).animated:
        return PreparedImage(data, f"{stem}.gif", "image/gif", "file")
    frame = images.load_frames(data, indices="first")[0]
    scale = 1.0
    for _ in range(8):
        image = frame if scale == 1.0 else frame.resize(
            (max(1, int(frame.width * scale)), max(1, int(frame.height * scale))), Image.Resampling.LANCZOS
        )  # fmt: skip
        for fmt_out, kw in (("PNG", {"optimize": True}), ("JPEG", {"quality": 85})):
            buf = io.BytesIO()
            image.save(buf, fmt_out, **kw)
            if buf.tell() <= IMAGE_MAX_BYTES:
                ext = "png" if fmt_out == "PNG" else "jpg"
                return PreparedImage(buf.getvalue(), f"{stem}.{ext}", f"image/{fmt_out.lower()}", "image")
        scale *= 0.7
    raise PlatformError("wecom_image_too_large", "the meme cannot be made small enough for WeCom")


def send_image(app: WeComApp, touser: str, data: bytes, stem: str = "meme") -> dict[str, Any]:
    """Upload ``data`` (after :func:`prepare_image`) and send it to ``touser``; returns WeCom's
    answer plus ``media_id``."""
    prepared = prepare_image(data, stem)
    media_id = upload_media(app, prepared.data, prepared.filename, prepared.content_type, prepared.media_type)
    result = send_message(app, touser, prepared.media_type, {"media_id": media_id})
    return {**result, "media_id": media_id, "msgtype": prepared.media_type}


def parse_callback(app: WeComApp, msg_signature: str, timestamp: str, nonce: str, body: bytes) -> InboundMessage:
    """Verify and decrypt a callback ``POST``. Raises :class:`.crypto.WeComCryptoError`."""
    fields = app.crypt().decrypt_message(msg_signature, timestamp, nonce, body)
    msg_type = fields.get("MsgType", "")
    event = fields.get("Event", "")
    msg_id = fields.get("MsgId") or f"{fields.get('FromUserName', '')}:{fields.get('CreateTime', '')}:{event}"
    return InboundMessage(
        from_user=fields.get("FromUserName", ""),
        msg_type=msg_type,
        content=fields.get("Content", "") if msg_type == "text" else "",
        msg_id=msg_id,
        agent_id=fields.get("AgentID", ""),
        event=event,
        pic_url=fields.get("PicUrl", "") if msg_type == "image" else "",
        media_id=fields.get("MediaId", "") if msg_type == "image" else "",
    )
