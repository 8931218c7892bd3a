"""Telegram (Bot API over plain HTTPS through :mod:`mewdex.egress`; no client library at run time).

Configuration: the installation's bot token — ``MEWDEX_TELEGRAM_BOT_TOKEN`` when set, else the one the
admin saved on the Channels page (:func:`set_stored_token`, sealed in ``platform_settings``; read on
every use, so a new token works without a restart) — ``MEWDEX_TELEGRAM_API_URL``
(default ``https://api.telegram.org``), ``MEWDEX_TELEGRAM_WEBHOOK_SECRET`` (unset: derived from the
token). Calls are ``POST <api>/bot<token>/<method>``; answers ``{"ok": true, "result"}`` or
``{"ok": false, "error_code", "description", "parameters": {"retry_after"}}``.

- **Inbound**: with ``MEWDEX_PUBLIC_URL`` set the ``telegram_polling`` task registers the webhook
  ``<public url>/channels/telegram/webhook`` with the secret (``setWebhook``), and Telegram posts
  updates there with ``X-Telegram-Bot-Api-Secret-Token`` (:func:`accept_webhook`). Without a public
  URL the same periodic task long-polls ``getUpdates`` (offset kept in ``channel_bots``, advanced
  in the transaction that queues the updates; one poller at a time: its lane runs one task).
- **Binding**: ``POST /api/v1/channels/telegram/link`` gives ``https://t.me/<bot>?start=<code>``;
  the update ``/start <code>`` binds the sender (identity: the Telegram user id; replies go to the chat).
- **Groups**: answered only when the bot is @mentioned, replied to, or given a ``/command``.
- **Sending**: ``sendPhoto`` (JPEG/PNG; other stills as PNG), ``sendAnimation`` for GIFs; the
  ``file_id`` Telegram returns is cached per bot and content and reused; 429 ``retry_after`` is
  honoured; 403 (the user blocked the bot) is ``channel_blocked``.
- **Inline mode**: ``@bot 无语`` answers up to 50 memes as cached photos/GIFs (``file_id``s this bot
  already has; others are uploaded once to ``MEWDEX_TELEGRAM_STORAGE_CHAT_ID`` when set).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
import uuid
from typing import Any, ClassVar
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings, inbound, state
from mewdex.channels.base import Binding, DeliveryFailed, Inbound, MemeFile, Sent
from mewdex.channels.delivery import LANE
from mewdex.channels.errors import ChannelError
from mewdex.channels.registry import Channel, register_adapter
from mewdex.config import get_settings
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import Meme, ScopeContext
from mewdex.dto.i18n import translate
from mewdex.egress import EgressError, fetch
from mewdex.platform import instance, owners
from mewdex.providers import sealed_fields, secrets
from mewdex.queue import registry
from mewdex.queue.registry import Lane, RetryPolicy, TaskContext, register_lane, task_type
from mewdex.queue.scheduler import Schedule

log = logging.getLogger(__name__)
NAME = "telegram"
POLL_LANE = "channel_poll"
WEBHOOK_PATH = "/channels/telegram/webhook"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
INLINE_MAX = 50
INLINE_UPLOADS_PER_QUERY = 10
ALLOWED_UPDATES = ["message", "inline_query"]
PHOTO_EXTENSIONS = (".jpg", ".jpeg", ".png")
_TYPES = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png", ".gif": "image/gif"}

register_lane(Lane(POLL_LANE, concurrency=lambda: 1, listed=False))


# ------------------------------------------------------------------ the Bot API


TOKEN_SETTING = "channel_telegram_bot"
TOKEN_SHAPE = re.compile(r"[0-9]{3,20}:[A-Za-z0-9_-]{20,100}")


def _token_aad() -> str:
    return sealed_fields.platform_setting_aad(TOKEN_SETTING, "token")


def _stored(session: Session) -> dict[str, Any] | None:
    value = instance.get_setting(session, TOKEN_SETTING, None)
    return value if isinstance(value, dict) and secrets.is_sealed(value.get("token")) else None


def configured_token() -> tuple[str | None, str | None]:
    """``(token, source)``: ``MEWDEX_TELEGRAM_BOT_TOKEN`` (source ``environment``) wins over the
    admin's sealed setting (``settings``); ``(None, None)`` when neither is set or the stored one
    cannot be opened (its key is gone; logged without the token)."""
    env = get_settings().telegram_bot_token
    if env:
        return env, "environment"
    with get_sessionmaker()() as session:
        stored = _stored(session)
    if stored is None:
        return None, None
    try:
        return secrets.open_sealed(stored["token"], _token_aad()), "settings"
    except secrets.SecretError:
        log.warning("telegram: the stored bot token cannot be opened (its key is missing)")
        return None, None


def token() -> str:
    """The bot token (:func:`configured_token`); ``channel_not_configured`` (409) when there is none."""
    value, _source = configured_token()
    if not value:
        raise ChannelError(
            "channel_not_configured",
            "Telegram is not set up (the admin sets the bot token on the Channels page or MEWDEX_TELEGRAM_BOT_TOKEN)",
        )
    return value


def token_status() -> dict[str, Any]:
    """What the Channels page shows: ``{"configured", "source": "environment" | "settings" | None,
    "hint"}`` (the token's last 4 characters at most; never the token)."""
    value, source = configured_token()
    return {"configured": bool(value), "source": source, "hint": secrets.hint(value) if value else ""}


def set_stored_token(session: Session, value: str | None) -> dict[str, Any]:
    """Save (sealed) or, with ``None``/empty, remove the admin's bot token in the caller's
    transaction; :func:`token_status` afterwards. ``channel_config_invalid`` (422) for a value that
    is not a BotFather token (``<digits>:<35 characters>``). The environment variable still wins."""
    value = (value or "").strip()
    if value and not TOKEN_SHAPE.fullmatch(value):
        raise ChannelError("channel_config_invalid", "that is not a bot token (123456789:AA… from @BotFather)")
    if value:
        instance.set_setting(session, TOKEN_SETTING, {"token": secrets.seal(value, _token_aad())})
    else:
        instance.delete_setting(session, TOKEN_SETTING)
    session.flush()
    env = get_settings().telegram_bot_token
    if env:
        return {"configured": True, "source": "environment", "hint": secrets.hint(env)}
    return {"configured": bool(value), "source": "settings" if value else None, "hint": secrets.hint(value)}


def bot_id() -> str:
    """The bot's numeric id (the part of the token before ``:``)."""
    return token().split(":", 1)[0]


def webhook_secret() -> str:
    """The secret Telegram echoes in ``X-Telegram-Bot-Api-Secret-Token``."""
    configured = get_settings().telegram_webhook_secret
    if configured:
        return configured
    return hmac.new(token().encode(), b"mewdex telegram webhook", hashlib.sha256).hexdigest()


def _multipart(fields: dict[str, Any], files: dict[str, tuple[str, bytes, str]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    out = bytearray()
    for key, value in fields.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n'.encode()
        out += text.encode() + b"\r\n"
    for key, (filename, data, content_type) in files.items():
        out += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"; filename="{filename}"\r\n'
            f"Content-Type: {content_type}\r\n\r\n"
        ).encode()
        out += data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


def call(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    files: dict[str, tuple[str, bytes, str]] | None = None,
    timeout: float = 30.0,
) -> Any:
    """One Bot API call; its ``result``. Raises :class:`DeliveryFailed` (``channel_rate_limited``
    with ``retry_after``, ``channel_blocked``, ``channel_platform_error``) or ``EgressError``.
    Nothing raised names the token."""
    url = f"{get_settings().telegram_api_url.rstrip('/')}/bot{token()}/{method}"
    if files:
        body, content_type = _multipart(params or {}, files)
    else:
        body, content_type = json.dumps(params or {}, ensure_ascii=False).encode(), "application/json"
    response = fetch(
        "POST", url, headers={"content-type": content_type}, content=body, max_bytes=8 * 1024 * 1024, timeout=timeout
    )
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise DeliveryFailed(
            "channel_platform_error",
            f"Telegram answered {method} with HTTP {response.status} and no JSON",
            platform_code=response.status,
            retryable=response.status >= 500,
        )
    if answer.get("ok"):
        return answer.get("result")
    code = int(answer.get("error_code") or response.status)
    description = str(answer.get("description") or "")[:500]
    retry_after = (answer.get("parameters") or {}).get("retry_after")
    if code == 429 or retry_after is not None:
        raise DeliveryFailed(
            "channel_rate_limited",
            f"Telegram asked to wait {retry_after} s",
            platform_code=code,
            platform_error=description,
            retry_after=float(retry_after or 1),
        )
    if code == 403:
        raise DeliveryFailed(
            "channel_blocked",
            f"Telegram refused {method}: {description}",
            platform_code=code,
            platform_error=description,
        )
    raise DeliveryFailed(
        "channel_platform_error",
        f"Telegram refused {method}: {description}",
        platform_code=code,
        platform_error=description,
        retryable=code >= 500,
    )


def bot_username(sessions: sessionmaker[Session]) -> str:
    """The bot's @username (``getMe`` once, then from ``channel_bots``). Raises ``ChannelError``
    ``channel_not_configured`` / ``channel_platform_error`` (502)."""
    bid = bot_id()
    with sessions.begin() as session:
        known = state.bot(session, NAME, bid).username
    if known:
        return known
    try:
        me = call("getMe")
    except (DeliveryFailed, EgressError) as exc:
        raise ChannelError("channel_platform_error", f"Telegram getMe failed: {exc.code}") from None
    username = str(me.get("username") or "")
    with sessions.begin() as session:
        state.bot(session, NAME, bid, lock=True).username = username
    return username


# ------------------------------------------------------------------ the adapter


class TelegramAdapter:
    name: ClassVar[str] = NAME
    secret_fields: ClassVar[tuple[str, ...]] = ()
    min_send_interval: ClassVar[float] = 1.0
    command_prefixes: ClassVar[tuple[str, ...]] = ("/",)
    outbound_only: ClassVar[bool] = False

    def configured(self) -> bool:
        return configured_token()[0] is not None

    def status(self) -> dict[str, Any]:
        """The Channels page's entry: ``configured``, ``mode`` (``webhook`` with a public URL, else
        ``polling``), ``token_source`` and ``token_hint`` (never the token)."""
        token = token_status()
        return {
            "configured": token["configured"],
            "mode": "webhook" if get_settings().public_url else "polling",
            "token_source": token["source"],
            "token_hint": token["hint"],
        }

    def target_of(self, binding: Binding) -> str:
        return str(binding.config.get("chat_id") or binding.identity)

    def binding_config(self, message: Inbound) -> dict[str, Any]:
        return {"chat_id": message.sender, "bot_id": bot_id()}

    def bind_help(self, lang: str) -> str:
        return translate(lang, "bot.bind_help.telegram")

    def fetch_image(self, ref: str) -> bytes:
        info = call("getFile", {"file_id": ref})
        path = str(info.get("file_path") or "")
        url = f"{get_settings().telegram_api_url.rstrip('/')}/file/bot{token()}/{path}"
        response = fetch("GET", url, max_bytes=get_settings().max_upload_bytes)
        if response.status != 200:
            raise DeliveryFailed("channel_platform_error", f"Telegram file download answered {response.status}")
        return response.content

    def send_text(self, binding: Binding | None, target: str, text: str) -> Sent:
        result = call("sendMessage", {"chat_id": target, "text": text[:4096]})
        return Sent(str(result.get("message_id")))

    def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent:
        params: dict[str, Any] = {"chat_id": target}
        if caption:
            params["caption"] = caption[:1024]
        result = send_file(target, meme, params)
        return Sent(str(result.get("message_id")))


def _form(meme: MemeFile) -> tuple[str, str, str, bytes, str]:
    """``(media kind, method, field, bytes, file name)`` of how a meme is sent."""
    if meme.animated:
        return "animation", "sendAnimation", "animation", meme.data, "meme.gif"
    if meme.extension in PHOTO_EXTENSIONS:
        return "photo", "sendPhoto", "photo", meme.data, f"meme{meme.extension}"
    return "photo_png", "sendPhoto", "photo", meme.as_png(), "meme.png"


def _file_id(result: dict[str, Any], kind: str) -> str | None:
    if kind == "animation":
        media = result.get("animation") or result.get("document") or {}
        return media.get("file_id")
    sizes = result.get("photo") or []
    return sizes[-1].get("file_id") if sizes else None


def send_file(chat_id: str, meme: MemeFile, params: dict[str, Any]) -> dict[str, Any]:
    """Send ``meme`` to ``chat_id`` reusing this bot's cached ``file_id`` (uploading, and caching
    the new id, when there is none or Telegram no longer knows it). The sent message."""
    sessions, bid = get_sessionmaker(), bot_id()
    kind, method, field, data, filename = _form(meme)
    cached = state.cached_file_id(sessions, NAME, bid, meme.sha256, kind)
    if cached:
        try:
            return call(method, {**params, "chat_id": chat_id, field: cached})
        except DeliveryFailed as exc:
            if exc.platform_code != "400":
                raise
            state.forget_file_id(sessions, NAME, bid, meme.sha256, kind)  # a stale id: upload again
    content_type = _TYPES.get(filename[filename.rfind(".") :], "application/octet-stream")
    result = call(method, {**params, "chat_id": chat_id}, files={field: (filename, data, content_type)}, timeout=60)
    file_id = _file_id(result, kind)
    if file_id:
        state.remember_file_id(sessions, NAME, bid, meme.sha256, kind, file_id)
    return result


ADAPTER = register_adapter(TelegramAdapter())


# ------------------------------------------------------------------ updates


def parse_message(message: dict[str, Any], username: str | None) -> Inbound | None:
    """An :class:`Inbound` from a Bot API ``Message`` (None for what mewdex does not answer: no sender)."""
    sender = (message.get("from") or {}).get("id")
    chat = message.get("chat") or {}
    if sender is None or chat.get("id") is None:
        return None
    text = str(message.get("text") or message.get("caption") or "")
    is_group = chat.get("type") in ("group", "supergroup")
    mention = f"@{username}" if username else None
    mentioned = bool(mention and mention.lower() in text.lower())
    reply_to = (message.get("reply_to_message") or {}).get("from") or {}
    if reply_to.get("is_bot") and username and reply_to.get("username") == username:
        mentioned = True
    bind_code = None
    stripped = text.strip()
    if stripped.startswith("/"):
        command, _, rest = stripped.partition(" ")
        name, _, addressed_to = command[1:].partition("@")
        if addressed_to and username and addressed_to.lower() != username.lower():
            return None  # a command for another bot in the group
        if name == "start" and rest.strip():
            bind_code = rest.strip()[:64]
        text = rest.strip() if name != "start" else ""
        mentioned = True
    if mention:
        text = " ".join(text.replace(mention, " ").replace(mention.lower(), " ").split())
    photos = message.get("photo") or []
    images = (photos[-1]["file_id"],) if photos else ()
    return Inbound(
        channel=NAME,
        sender=str(sender),
        chat=str(chat["id"]),
        text=text,
        images=images,
        is_group=is_group,
        mentioned=mentioned,
        bind_code=bind_code,
        message_id=str(message.get("message_id")) if message.get("message_id") is not None else None,
    )


def dispatch(session: Session, update: dict[str, Any], username: str | None) -> str:
    """Queue what ``update`` asks for (an inbound message or an inline query) in the caller's
    transaction; returns what it was (``message``, ``inline_query``, ``ignored``)."""
    if isinstance(update.get("inline_query"), dict):
        query = update["inline_query"]
        registry.submit(
            session,
            scope_id=_ensure_system_scope(session),
            task_type="telegram_inline",
            payload={"inline_query": query},
            dedupe_key=f"telegram-inline:{query.get('id')}",
        )
        return "inline_query"
    message = update.get("message")
    if isinstance(message, dict):
        parsed = parse_message(message, username)
        if parsed is not None:
            inbound.submit(session, parsed)
            return "message"
    return "ignored"


def _ensure_system_scope(session: Session) -> str:
    from mewdex.channels.delivery import UNBOUND_SCOPE
    from mewdex.db.scopes import ensure_scope

    ensure_scope(session, ScopeContext(UNBOUND_SCOPE))
    return UNBOUND_SCOPE


def accept_webhook(session: Session, secret: str | None, update: Any) -> str:
    """The webhook route's work: check the secret header (constant time), queue the update.
    Raises ``ChannelError`` ``channel_not_configured`` / ``channel_webhook_secret_invalid`` (401)."""
    expected = webhook_secret()
    if not secret or not hmac.compare_digest(secret.encode(), expected.encode()):
        raise ChannelError("channel_webhook_secret_invalid", "wrong or missing X-Telegram-Bot-Api-Secret-Token")
    if not isinstance(update, dict):
        raise ChannelError("invalid_request", "an update is a JSON object")
    username = state.bot(session, NAME, bot_id()).username
    return dispatch(session, update, username)


def poll_once(sessions: sessionmaker[Session], timeout: int = 0) -> int:
    """One ``getUpdates`` from the stored offset (waiting up to ``timeout`` s); the updates are
    queued and the offset advanced in one transaction. Returns how many updates came."""
    username = bot_username(sessions)
    with sessions.begin() as session:
        offset = state.bot(session, NAME, bot_id()).update_offset
    updates = call(
        "getUpdates",
        {"offset": offset, "timeout": timeout, "allowed_updates": ALLOWED_UPDATES},
        timeout=timeout + 15,
    )
    if not updates:
        return 0
    with sessions.begin() as session:
        row = state.bot(session, NAME, bot_id(), lock=True)
        for update in updates:
            if int(update.get("update_id", -1)) >= row.update_offset:
                dispatch(session, update, username)
        row.update_offset = max(row.update_offset, max(int(u.get("update_id", 0)) for u in updates) + 1)
    return len(updates)


def ensure_mode(sessions: sessionmaker[Session]) -> str:
    """``webhook`` (``MEWDEX_PUBLIC_URL`` set: the webhook is registered with the secret, once per
    URL) or ``polling`` (a registered webhook is deleted first: Telegram refuses getUpdates while one is set)."""
    public = (get_settings().public_url or "").rstrip("/")
    url = f"{public}{WEBHOOK_PATH}" if public else None
    with sessions.begin() as session:
        current = state.bot(session, NAME, bot_id()).webhook_url
    if url and current != url:
        call(
            "setWebhook",
            {"url": url, "secret_token": webhook_secret(), "allowed_updates": ALLOWED_UPDATES},
        )
    elif not url and current:
        call("deleteWebhook", {"drop_pending_updates": False})
    if current != url:
        with sessions.begin() as session:
            state.bot(session, NAME, bot_id(), lock=True).webhook_url = url
    return "webhook" if url else "polling"


@task_type("telegram_polling", lane=POLL_LANE, retry=RetryPolicy(max_attempts=1))
def telegram_polling(ctx: TaskContext) -> dict[str, Any]:
    """Keep Telegram's inbound going for :attr:`telegram_poll_seconds`: register the webhook (public
    URL) or long-poll ``getUpdates``. ``{"mode", "updates"}``; ``{"skipped"}`` without a token."""
    if configured_token()[0] is None:  # read each run: a token saved on the page starts polling here
        return {"skipped": "no bot token (Channels page or MEWDEX_TELEGRAM_BOT_TOKEN)"}
    try:
        if ensure_mode(ctx.sessions) == "webhook":
            return {"mode": "webhook", "updates": 0}
        deadline = time.monotonic() + get_settings().telegram_poll_seconds
        count = 0
        while (left := deadline - time.monotonic()) >= 1:
            count += poll_once(ctx.sessions, timeout=int(min(left, 50)))
        return {"mode": "polling", "updates": count}
    except (DeliveryFailed, EgressError, ChannelError) as exc:
        log.warning("telegram polling: %s (%s)", exc.code, getattr(exc, "platform_error", None) or exc)
        return {"mode": "error", "code": exc.code}


def schedules() -> list[Schedule]:
    from mewdex.channels.delivery import UNBOUND_SCOPE

    return [
        Schedule("telegram_polling", "telegram_polling", lambda: get_settings().telegram_poll_seconds, UNBOUND_SCOPE)
    ]


# ------------------------------------------------------------------ inline mode


def _inline_result(meme_id: str, kind: str, file_id: str) -> dict[str, Any]:
    if kind == "animation":
        return {"type": "gif", "id": meme_id, "gif_file_id": file_id}
    return {"type": "photo", "id": meme_id, "photo_file_id": file_id}


def _user_lang(update: dict[str, Any]) -> str:
    """``zh`` when the sender's Telegram app is set to Chinese (``from.language_code``), else ``en``."""
    code = str((update.get("from") or {}).get("language_code") or "")
    return "zh" if code.lower().startswith("zh") else "en"


def answer_inline(sessions: sessionmaker[Session], query: dict[str, Any]) -> int:
    """Answer an inline query (``@bot 无语``) with up to :data:`INLINE_MAX` memes of the sender's
    library; an unbound sender gets no results and a button that opens the bot (in the language of
    their Telegram app). Returns how many."""
    from mewdex.assistant.retrieval import search_ids
    from mewdex.db.scopes import storage_namespace
    from mewdex.storage import blob_store

    sender = str((query.get("from") or {}).get("id"))
    with sessions.begin() as session:
        row = bindings.find_by_identity(session, NAME, sender)
        usable = row is not None and not bindings.pending(row) and owners.owner_active(session, row.scope_id)
        scope_id = row.scope_id if row is not None and usable else None
    if scope_id is None:  # unbound, not confirmed yet, or a disabled owner's: no library
        call(
            "answerInlineQuery",
            {
                "inline_query_id": query.get("id"),
                "results": [],
                "cache_time": 0,
                "is_personal": True,
                "button": {"text": translate(_user_lang(query), "bot.telegram.inline_link"), "start_parameter": "link"},
            },
        )
        return 0
    _q, hits = search_ids(sessions, ScopeContext(scope_id), str(query.get("query") or "")[:500], n=INLINE_MAX)
    ids = [UUID(h.id) for h in hits]
    with sessions.begin() as session:
        memes = {
            m.id: m for m in session.execute(select(Meme).where(Meme.id.in_(ids), Meme.scope_id == scope_id)).scalars()
        }
        namespace = storage_namespace(session, scope_id)
    storage_chat = get_settings().telegram_storage_chat_id
    results, uploads, bid = [], 0, bot_id()
    for mid in ids:
        meme = memes.get(mid)
        if meme is None:
            continue
        probe = MemeFile(str(mid), b"", meme.extension.lower(), meme.sha256, meme.display_name)
        kind = "animation" if probe.animated else ("photo" if probe.extension in PHOTO_EXTENSIONS else "photo_png")
        file_id = state.cached_file_id(sessions, NAME, bid, meme.sha256, kind)
        if file_id is None and storage_chat and uploads < INLINE_UPLOADS_PER_QUERY:
            with blob_store().open(namespace, meme.storage_key) as handle:
                full = MemeFile(str(mid), handle.read(), probe.extension, meme.sha256, meme.display_name)
            uploads += 1
            try:
                sent = send_file(storage_chat, full, {"disable_notification": True})
                file_id = _file_id(sent, kind)
            except (DeliveryFailed, EgressError) as exc:
                log.warning("telegram inline: uploading a meme to the storage chat failed (%s)", exc.code)
                break
        if file_id:
            results.append(_inline_result(str(mid), kind, file_id))
        if len(results) >= INLINE_MAX:
            break
    call(
        "answerInlineQuery",
        {"inline_query_id": query.get("id"), "results": results, "cache_time": 300, "is_personal": True},
    )
    return len(results)


@task_type("telegram_inline", lane=LANE, retry=RetryPolicy(max_attempts=1))
def telegram_inline(ctx: TaskContext) -> dict[str, Any]:
    """Answer one queued inline query (:func:`answer_inline`); ``{"results": n}``."""
    return {"results": answer_inline(ctx.sessions, ctx.payload["inline_query"])}


# ------------------------------------------------------------------ linking


def link(session: Session, sessions: sessionmaker[Session], *, scope_id: str, user_id: UUID | None) -> dict[str, str]:
    """A deep link that binds the chat which opens it: ``{"url": "https://t.me/<bot>?start=<code>", "code"}``.
    Raises ``ChannelError`` ``channel_not_configured`` (409) / ``channel_platform_error`` (502)."""
    username = bot_username(sessions)
    code = bindings.new_bind_code(session, scope_id=scope_id, user_id=user_id, channel=NAME)
    return {"url": f"https://t.me/{username}?start={code}", "code": code}


CHANNEL = Channel(name=NAME, modules=(__name__,))
