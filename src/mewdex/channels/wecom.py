"""WeCom (企业微信) self-built app: the server API and the callback (protocol layer).

API (``base_url`` default ``https://qyapi.weixin.qq.com``; every call through :mod:`mewdex.egress`):

* ``GET /cgi-bin/gettoken?corpid=&corpsecret=`` → ``{errcode, access_token, expires_in}`` (7200 s).
  :func:`access_token` caches it per (base URL, corp id, secret) in the process until 5 minutes
  before it expires, and fetches a new one when WeCom answers 40014/42001/41001 (stale token).
* ``POST /cgi-bin/media/upload?access_token=&type=image|file`` (multipart field ``media``) →
  ``{media_id}`` (valid 3 days). Images: JPG/PNG ≤ :data:`IMAGE_MAX_BYTES`.
* ``POST /cgi-bin/message/send?access_token=`` ``{touser, msgtype, agentid, image|file|text}``.

Errors: :class:`WeComError` (``code`` ``wecom_ip_not_trusted`` for 60020 — the server's address is
not in the app's 企业可信IP —, ``wecom_user_invalid`` for 81013/40031, ``wecom_credentials_invalid``
for 40001/40013/40056, ``wecom_api_error`` for any other errcode, or an ``egress_*`` code); its
``errcode``/``errmsg`` are WeCom's own and are what the delivery log shows. ``retryable`` says
whether another attempt can help (-1 "system busy", 45009 rate limit, no answer).

Callback: :func:`parse_callback` opens an encrypted ``POST`` (see :mod:`.wecom_crypto`) into an
:class:`InboundMessage`. :func:`prepare_image` turns a meme into what WeCom can show.

The channel (the framework's adapter contract, :mod:`mewdex.channels.base`): the admin's app lives
in ``platform_settings`` (:func:`configure_app`; Secret, Token and EncodingAESKey sealed with
:mod:`mewdex.providers.secrets`); a member binds their ``wecom_userid`` (the binding's identity) by
sending a one-time code from :func:`link` to the app; :func:`accept_callback` queues a message for
the assistant; :class:`WeComAdapter` sends memes as image media (``media_id`` cached 3 days in
``channel_media_cache``) with the assistant's text after them.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar
from urllib.parse import urlencode, urlsplit
from uuid import UUID

from sqlalchemy.orm import Session

from mewdex.channels import bindings, state
from mewdex.channels.base import Binding, DeliveryFailed, Inbound, MemeFile, Sent
from mewdex.channels.errors import ChannelError
from mewdex.channels.registry import Channel, register_adapter
from mewdex.channels.wecom_crypto import WeComCryptoError, WXBizMsgCrypt, decode_aes_key
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import utcnow
from mewdex.dto.i18n import translate
from mewdex.egress import EgressError, fetch
from mewdex.platform import instance
from mewdex.providers import sealed_fields, secrets

log = logging.getLogger(__name__)
DEFAULT_BASE_URL = "https://qyapi.weixin.qq.com"
IMAGE_MAX_BYTES = 2 * 1024 * 1024  # message/send image: JPG/PNG, 2 MB (the conservative documented limit)
FILE_MAX_BYTES = 20 * 1024 * 1024
STALE_TOKEN = {40014, 42001, 41001}
_CODES = {
    60020: "wecom_ip_not_trusted",
    81013: "wecom_user_invalid",
    40031: "wecom_user_invalid",
    40001: "wecom_credentials_invalid",
    40013: "wecom_credentials_invalid",
    40056: "wecom_credentials_invalid",
}
_RETRYABLE = {-1, 45009, 45033}
_tokens: dict[tuple[str, str, str], tuple[str, float]] = {}
_tokens_lock = threading.Lock()


class WeComError(Exception):
    """A failed WeCom call: ``code`` (module doc), WeCom's ``errcode``/``errmsg`` (None when there
    was no answer), ``retryable``."""

    def __init__(self, code: str, message: str, errcode: int | None = None, errmsg: str = "", retryable: bool = False):
        super().__init__(message)
        self.code, self.message, self.errcode, self.errmsg, self.retryable = code, message, errcode, errmsg, retryable


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
    events get ``<FromUserName>:<CreateTime>:<Event>``), ``agent_id``, ``event`` (for ``event``)."""

    from_user: str
    msg_type: str
    content: str
    msg_id: str
    agent_id: str
    event: str = ""
    pic_url: str = ""


def _error_for(data: dict[str, Any], what: str) -> WeComError:
    errcode = int(data.get("errcode", -1))
    errmsg = str(data.get("errmsg", ""))[:300]
    code = _CODES.get(errcode, "wecom_api_error")
    if errcode == 60020:
        message = f"WeCom refused {what}: this server's IP is not in the app's trusted IPs (60020)"
    else:
        message = f"WeCom refused {what}: {errcode} {errmsg}".strip()
    return WeComError(code, message, errcode, errmsg, errcode in _RETRYABLE)


def _request(method: str, url: str, what: str, **kw) -> dict[str, Any]:
    try:
        response = fetch(method, url, timeout=kw.pop("timeout", 15.0), **kw)
    except EgressError as exc:
        raise WeComError(exc.code, f"WeCom {what} failed: {exc.message}", retryable=exc.retryable) from None
    if response.status >= 500:
        raise WeComError("wecom_api_error", f"WeCom {what} answered HTTP {response.status}", retryable=True)
    try:
        data = response.json()
    except ValueError:
        raise WeComError("wecom_api_error", f"WeCom {what} did not answer JSON (HTTP {response.status})") from None
    if not isinstance(data, dict):
        raise WeComError("wecom_api_error", f"WeCom {what} answered an unexpected shape")
    return data


def _cache_key(app: WeComApp) -> tuple[str, str, str]:
    return (app.base_url.rstrip("/"), app.corp_id, hashlib.sha256(app.secret.encode()).hexdigest())


def access_token(app: WeComApp, *, refresh: bool = False) -> str:
    """The app's access token (cached; ``refresh`` forces a new one). Raises :class:`WeComError`."""
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


def _multipart(field: str, filename: str, content_type: str, data: bytes) -> tuple[bytes, str]:
    boundary = f"mewdex-{uuid.uuid4().hex}"
    safe_name = filename.replace('"', "").replace("\r", "").replace("\n", "")
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{safe_name}"; '
        f"filelength={len(data)}\r\nContent-Type: {content_type}\r\n\r\n"
    ).encode()
    return head + data + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def upload_media(app: WeComApp, data: bytes, filename: str, content_type: str, media_type: str = "image") -> str:
    """Upload one temporary media file (``media_type`` ``image`` or ``file``); returns its ``media_id``."""
    body, header = _multipart("media", filename, content_type, data)
    result = _call(
        app, "POST", "/cgi-bin/media/upload", "media/upload", {"type": media_type},
        content=body, headers={"content-type": header}, timeout=60.0,
    )  # fmt: skip
    media_id = result.get("media_id")
    if not media_id:
        raise WeComError("wecom_api_error", "WeCom media/upload answered no media_id")
    return str(media_id)


def send_message(app: WeComApp, touser: str, msgtype: str, body: dict[str, Any]) -> dict[str, Any]:
    """``message/send`` to one member; ``body`` is the ``msgtype`` object (``{"media_id"}``,
    ``{"content"}``). Returns WeCom's answer; an ``invaliduser`` answer is :class:`WeComError`
    ``wecom_user_invalid`` (WeCom says 0 but delivered nothing)."""
    payload = {"touser": touser, "msgtype": msgtype, "agentid": app.agent_id, msgtype: body}
    result = _call(app, "POST", "/cgi-bin/message/send", "message/send", json=payload)
    if result.get("invaliduser"):
        raise WeComError(
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
    raise WeComError("wecom_image_too_large", "the meme cannot be made small enough for WeCom")


def send_image(app: WeComApp, touser: str, data: bytes, stem: str = "meme") -> dict[str, Any]:
    """Upload ``data`` (after :func:`prepare_image`) and send it to ``touser``; returns WeCom's
    answer plus ``media_id``."""
    prepared = prepare_image(data, stem)
    media_id = upload_media(app, prepared.data, prepared.filename, prepared.content_type, prepared.media_type)
    result = send_message(app, touser, prepared.media_type, {"media_id": media_id})
    return {**result, "media_id": media_id, "msgtype": prepared.media_type}


def parse_callback(app: WeComApp, msg_signature: str, timestamp: str, nonce: str, body: bytes) -> InboundMessage:
    """Verify and decrypt a callback ``POST``. Raises :class:`.wecom_crypto.WeComCryptoError`."""
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
    )


# ------------------------------------------------------------------ the channel (framework adapter)

NAME = "wecom"
APP_SETTING = "channel_wecom_app"
APP_SECRET_FIELDS = ("secret", "token", "encoding_aes_key")
MEDIA_TTL = timedelta(days=3) - timedelta(hours=1)  # a temporary media_id lasts 3 days
CALLBACK_PATH = "/channels/wecom/callback"
_BIND_TEXT = re.compile(r"^\s*(?:/?bind\s+|绑定\s*)?([A-Za-z0-9_-]{32})\s*$", re.IGNORECASE)


def _aad(field: str) -> str:
    return sealed_fields.platform_setting_aad(APP_SETTING, field)


def configure_app(
    session: Session,
    *,
    corp_id: str,
    agent_id: int,
    secret: str | None,
    token: str | None,
    encoding_aes_key: str | None,
    base_url: str | None = None,
) -> dict[str, Any]:
    """Store the installation's self-built app (admin; secrets sealed with
    :mod:`mewdex.providers.secrets`). ``None`` for a secret keeps the stored one. Returns
    :func:`app_status`. ``channel_config_invalid`` (422) for a missing field or a bad EncodingAESKey."""
    current = instance.get_setting(session, APP_SETTING, {}) or {}
    values = {"secret": secret, "token": token, "encoding_aes_key": encoding_aes_key}
    for field in APP_SECRET_FIELDS:
        if values[field] is None and field not in current:
            raise ChannelError("channel_config_invalid", f"{field} is required")
    corp_id = (corp_id or "").strip()
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", corp_id):
        raise ChannelError("channel_config_invalid", "corp_id must be the corp id (ww…)")
    if not isinstance(agent_id, int) or agent_id <= 0:
        raise ChannelError("channel_config_invalid", "agent_id must be the app's AgentId (a positive number)")
    if encoding_aes_key is not None:
        try:
            decode_aes_key(encoding_aes_key.strip())
        except WeComCryptoError as exc:
            raise ChannelError("channel_config_invalid", exc.message) from None
    url = (base_url or current.get("base_url") or DEFAULT_BASE_URL).strip().rstrip("/")
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise ChannelError("channel_config_invalid", "base_url must be an http(s) URL")
    stored = {"corp_id": corp_id, "agent_id": agent_id, "base_url": url}
    for field in APP_SECRET_FIELDS:
        value = values[field]
        stored[field] = secrets.seal(value.strip(), _aad(field)) if value is not None else current[field]
    instance.set_setting(session, APP_SETTING, stored)
    old = load_app(session, stored=current) if current else None
    if old is not None:
        forget_token(old)
    return app_status(session, stored=stored)


def load_app(session: Session, *, stored: dict[str, Any] | None = None) -> WeComApp | None:
    """The configured app with its secrets opened, or None when the admin has not set it up."""
    stored = stored if stored is not None else instance.get_setting(session, APP_SETTING, None)
    if not stored:
        return None
    opened = {field: secrets.open_sealed(stored[field], _aad(field)) for field in APP_SECRET_FIELDS}
    return WeComApp(
        corp_id=stored["corp_id"], agent_id=int(stored["agent_id"]), secret=opened["secret"], token=opened["token"],
        encoding_aes_key=opened["encoding_aes_key"], base_url=stored.get("base_url") or DEFAULT_BASE_URL,
    )  # fmt: skip


def require_app(session: Session) -> WeComApp:
    """:func:`load_app`, or ``channel_not_configured`` (409)."""
    app = load_app(session)
    if app is None:
        raise ChannelError("channel_not_configured", "the admin has not set up the WeCom app yet")
    return app


def app_status(session: Session, *, stored: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the Channels page shows of the app: ``configured``, ``corp_id``, ``agent_id``,
    ``base_url``, ``secret_hint`` and ``callback_path`` — never a secret."""
    stored = stored if stored is not None else instance.get_setting(session, APP_SETTING, None)
    if not stored:
        return {"configured": False, "callback_path": CALLBACK_PATH}
    return {
        "configured": True,
        "corp_id": stored["corp_id"],
        "agent_id": int(stored["agent_id"]),
        "base_url": stored.get("base_url") or DEFAULT_BASE_URL,
        "secret_hint": secrets.hint(secrets.open_sealed(stored["secret"], _aad("secret"))),
        "callback_path": CALLBACK_PATH,
    }


def inbound_of(message: InboundMessage) -> Inbound | None:
    """The framework's :class:`Inbound` for a decrypted callback; None for what mewdex does not
    answer (events other than ``enter_agent``, voice, location, …). A text that is a bind code
    (``<code>`` or ``bind <code>``) carries it as ``bind_code``."""
    if not message.from_user or message.msg_type not in ("text", "image"):
        return None
    match = _BIND_TEXT.match(message.content) if message.msg_type == "text" else None
    return Inbound(
        channel=NAME,
        sender=message.from_user,
        chat=message.from_user,
        text="" if match else message.content,
        images=(message.pic_url,) if message.pic_url else (),
        bind_code=match.group(1) if match else None,
        message_id=message.msg_id,
    )


def accept_callback(session: Session, msg_signature: str, timestamp: str, nonce: str, body: bytes) -> str:
    """Verify, decrypt and queue one callback (the web route answers an empty 200 at once: WeCom
    retries after 5 s). Returns what happened: ``queued``, ``ignored``, or ``duplicate`` (the same
    signed request — timestamp and nonce — seen within the replay window: taken in once only).
    Raises :class:`.wecom_crypto.WeComCryptoError` (401), ``channel_request_expired`` (401: a
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


def link(session: Session, *, scope_id: str, user_id: UUID | None) -> dict[str, str]:
    """A one-time code the signed-in user sends to the WeCom app to bind their ``wecom_userid``:
    ``{"code", "instructions"}``. ``channel_not_configured`` without an app."""
    require_app(session)
    code = bindings.new_bind_code(session, scope_id=scope_id, user_id=user_id, channel=NAME)
    return {"code": code, "instructions": f"Send this code to the mewdex app in WeCom: {code}"}


def _failure(exc: WeComError) -> DeliveryFailed:
    code = {"wecom_ip_not_trusted": "wecom_ip_not_trusted", "wecom_user_invalid": "channel_blocked"}.get(
        exc.code, "channel_platform_error"
    )
    if exc.errcode in (45009, 45033):
        return DeliveryFailed("channel_rate_limited", exc.message, platform_code=exc.errcode,
                              platform_error=exc.errmsg or exc.message, retry_after=60)  # fmt: skip
    if exc.errcode is None and exc.code.startswith("egress_"):
        code = "channel_unreachable"
    return DeliveryFailed(
        code, exc.message, platform_code=exc.errcode if exc.errcode is not None else exc.code,
        platform_error=exc.errmsg or exc.message, retryable=exc.retryable,
    )  # fmt: skip


class WeComAdapter:
    """The ``wecom`` channel: a self-built app pushes to a member (``wecom_userid``) at any time;
    inbound messages arrive on the callback URL (see :func:`accept_callback`)."""

    name: ClassVar[str] = NAME
    secret_fields: ClassVar[tuple[str, ...]] = ()
    min_send_interval: ClassVar[float] = 0.5
    command_prefixes: ClassVar[tuple[str, ...]] = ("/",)
    outbound_only: ClassVar[bool] = False

    def _app(self) -> WeComApp:
        with get_sessionmaker().begin() as session:
            app = load_app(session)
        if app is None:
            raise DeliveryFailed("channel_not_configured", "the admin has not set up the WeCom app")
        return app

    def configured(self) -> bool:
        """Whether the admin has set up the app (the Channels page offers binding only then)."""
        with get_sessionmaker().begin() as session:
            return bool(instance.get_setting(session, APP_SETTING, None))

    def target_of(self, binding: Binding) -> str:
        return str(binding.config.get("wecom_userid") or binding.identity or "")

    def binding_config(self, inbound: Inbound) -> dict[str, Any]:
        return {"wecom_userid": inbound.sender}

    def bind_help(self, lang: str) -> str:
        return translate(lang, "bot.bind_help.wecom")

    def fetch_image(self, ref: str) -> bytes:
        return fetch("GET", ref, content_types=("image/",), max_bytes=20 * 1024 * 1024).content

    def send_text(self, binding: Binding | None, target: str, text: str) -> Sent:
        try:
            result = send_text(self._app(), target, text)
        except WeComError as exc:
            raise _failure(exc) from None
        return Sent(str(result.get("msgid") or "") or None)

    def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent:
        app = self._app()
        sessions = get_sessionmaker()
        bot_id = f"{app.corp_id}:{app.agent_id}"
        try:
            prepared = prepare_image(meme.data, stem=meme.meme_id[:8])
            media_id = state.cached_file_id(sessions, NAME, bot_id, meme.sha256, prepared.media_type)
            if media_id is None:
                media_id = upload_media(
                    app, prepared.data, prepared.filename, prepared.content_type, prepared.media_type
                )
                state.remember_file_id(sessions, NAME, bot_id, meme.sha256, prepared.media_type, media_id,
                                       expires_at=utcnow() + MEDIA_TTL)  # fmt: skip
            result = send_message(app, target, prepared.media_type, {"media_id": media_id})
        except WeComError as exc:
            raise _failure(exc) from None
        if caption:
            try:
                send_text(app, target, caption)
            except WeComError as exc:  # the meme arrived; its caption did not
                log.warning("wecom: the caption after a meme was not delivered (%s)", exc.code)
        return Sent(str(result.get("msgid") or "") or None)


register_adapter(WeComAdapter())


CHANNEL = Channel(name=NAME, modules=(__name__,), errors={"wecom_ip_not_trusted": 502})
