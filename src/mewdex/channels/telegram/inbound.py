"""Telegram's inbound: updates by webhook (:func:`accept_webhook`) or long polling (:func:`run_poll`,
the ``telegram_polling`` task of :mod:`mewdex.channels.polling`; :func:`poll_once`), parsed into
the framework's :class:`Inbound` (:func:`parse_message`), and inline queries (``@bot 无语``: the
``telegram_inline`` task takes one down the shared inbound path as the reply mode ``inline``, and
the adapter answers it with ``answerInlineQuery``: :func:`answer`, :func:`send_inline`)."""

from __future__ import annotations

import hmac
import logging
import time
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings, inbound, replay, saving, state
from mewdex.channels.base import UNBOUND_SCOPE, Binding, Button, DeliveryFailed, Inbound, MemeFile, Reply, ReplyMode
from mewdex.channels.delivery import LANE
from mewdex.channels.errors import ChannelError
from mewdex.channels.media import meme_file
from mewdex.channels.telegram import NAME
from mewdex.channels.telegram.api import (
    bot_id,
    bot_username,
    call,
    configured_token,
    file_id_of,
    media_kind,
    send_file,
    webhook_secret,
)
from mewdex.channels.telegram.settings import settings
from mewdex.config import get_settings
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import ScopeContext
from mewdex.dto.i18n import translate
from mewdex.queue import registry
from mewdex.queue.registry import RetryPolicy, TaskContext, task_type

log = logging.getLogger(__name__)
WEBHOOK_PATH = "/channels/telegram/webhook"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
INLINE_MAX = 50
INLINE_UPLOADS_PER_QUERY = 10
#: How long after it came an inline query is still answered (Telegram refuses an answer to an old
#: query: "query is too old"); a delivery not sent by then fails ``channel_reply_expired``.
INLINE_LIFE = 30.0
#: The action of the unbound person's button: open the bot with ``/start link``.
LINK_ACTION = "start:link"
#: Commands the framework reads whole (mewdex.channels.saving); any other's text is what follows it.
FRAMEWORK_COMMANDS = ("save", "autosave", "caption", "pool")
ALLOWED_UPDATES = ["message", "inline_query", "callback_query"]


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
        if name in FRAMEWORK_COMMANDS:  # the framework reads these as typed (/save, /autosave on)
            text = f"/{name} {rest.strip()}".strip()
        else:
            text = rest.strip() if name != "start" else ""
        mentioned = True
    if mention:
        text = " ".join(text.replace(mention, " ").replace(mention.lower(), " ").split())
    photos = message.get("photo") or []
    images = (photos[-1]["file_id"],) if photos else ()
    replied = message.get("reply_to_message")
    return Inbound(
        channel=NAME,
        sender=str(sender),
        chat=str(chat["id"]),
        text=text,
        images=images,
        media=media_of(message),
        reply_media=media_of(replied) if isinstance(replied, dict) else (),
        reply_to=str(replied["message_id"]) if isinstance(replied, dict) and replied.get("message_id") else None,
        is_group=is_group,
        mentioned=mentioned,
        bind_code=bind_code,
        message_id=str(message.get("message_id")) if message.get("message_id") is not None else None,
    )


#: The fields of a Bot API ``Message`` that carry a file a meme can be (a document only when its
#: type is an image or a video)
MEDIA_FIELDS = ("animation", "sticker", "video", "video_note", "document")


def media_of(message: dict[str, Any]) -> tuple[str, ...]:
    """The ``file_id`` of the file a ``Message`` carries (its largest photo size, a sticker, an
    animation, a video, an image or video document), or ()."""
    photos = message.get("photo") or []
    if photos and isinstance(photos[-1], dict) and photos[-1].get("file_id"):
        return (str(photos[-1]["file_id"]),)
    for field in MEDIA_FIELDS:
        found = message.get(field)
        if not isinstance(found, dict) or not found.get("file_id"):
            continue
        if field == "document" and not str(found.get("mime_type") or "").startswith(("image/", "video/")):
            continue
        return (str(found["file_id"]),)
    return ()


def dispatch(session: Session, update: dict[str, Any], username: str | None) -> str:
    """Queue what ``update`` asks for (an inbound message or an inline query) in the caller's
    transaction; returns what it was (``message``, ``inline_query``, ``ignored``). An inline query
    is queued in its sender's account (the system scope for an unbound sender), so lane ``channel``'s
    per-account share (``MEWDEX_CHANNEL_SCOPE_CONCURRENCY``) caps what one account's inline queries hold."""
    if isinstance(update.get("inline_query"), dict):
        query = update["inline_query"]
        row = bindings.find_by_identity(session, NAME, str((query.get("from") or {}).get("id")))
        registry.submit(
            session,
            scope_id=row.scope_id if row is not None else _ensure_system_scope(session),
            task_type="telegram_inline",
            payload={"inline_query": query, "received_at": time.time()},
            dedupe_key=f"telegram-inline:{query.get('id')}",
        )
        return "inline_query"
    if isinstance(update.get("callback_query"), dict):
        parsed = parse_callback(update["callback_query"])
        if parsed is not None:
            inbound.submit(session, parsed)
            return "callback_query"
        return "ignored"
    message = update.get("message")
    if isinstance(message, dict):
        parsed = parse_message(message, username)
        if parsed is not None:
            inbound.submit(session, parsed)
            return "message"
    return "ignored"


def parse_callback(query: dict[str, Any]) -> Inbound | None:
    """A press of a button under one of the bot's messages (an inline keyboard's ``callback_data``):
    the Save button (``save:<message id>``) as a save of that message by whoever pressed it; None
    for any other press."""
    sender = (query.get("from") or {}).get("id")
    chat = ((query.get("message") or {}).get("chat") or {}).get("id")
    data = str(query.get("data") or "")
    if sender is None or chat is None or not data.startswith(saving.SAVE_ACTION):
        return None
    return Inbound(
        channel=NAME,
        sender=str(sender),
        chat=str(chat),
        text="/save",
        mentioned=True,
        message_id=f"callback:{query.get('id')}",
        extra={"button_of": data[len(saving.SAVE_ACTION) :], "callback_query_id": str(query.get("id") or "")},
    )


def _ensure_system_scope(session: Session) -> str:
    from mewdex.db.scopes import ensure_scope

    ensure_scope(session, ScopeContext(UNBOUND_SCOPE))
    return UNBOUND_SCOPE


def accept_webhook(session: Session, secret: str | None, update: Any) -> str:
    """The webhook route's work: check the secret header (constant time), take each ``update_id``
    in once per bot (:func:`mewdex.channels.replay.remember`, realm ``telegram:<bot id>``, for the
    replay window), queue the update. Returns what it was (:func:`dispatch`), or ``replayed``: an
    update seen before is answered 200 and dropped (Telegram would resend one refused).
    Raises ``ChannelError`` ``channel_not_configured`` / ``channel_webhook_secret_invalid`` (401) /
    ``invalid_request`` (422: not an update)."""
    expected = webhook_secret()
    if not secret or not hmac.compare_digest(secret.encode(), expected.encode()):
        raise ChannelError("channel_webhook_secret_invalid", "wrong or missing X-Telegram-Bot-Api-Secret-Token")
    if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
        raise ChannelError("invalid_request", "an update is a JSON object with an update_id")
    bot = bot_id()
    try:
        replay.remember(session, f"{NAME}:{bot}", str(update["update_id"]))
    except ChannelError:
        log.info("telegram webhook: update %s was received before; dropped", update["update_id"])
        return "replayed"
    username = state.bot(session, NAME, bot).username
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
    public = get_settings().public_base() or ""
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


def run_poll(sessions: sessionmaker[Session], seconds: float) -> dict[str, Any]:
    """One ``telegram_polling`` run (:mod:`mewdex.channels.polling`): keep Telegram's inbound going
    for ``seconds``: register the webhook (public URL) or long-poll ``getUpdates``. ``{"mode",
    "updates"}``; ``{"skipped"}`` without a token."""
    if configured_token()[0] is None:  # read each run: a token saved on the page starts polling here
        return {"skipped": "no bot token (Channels page or MEWDEX_TELEGRAM_BOT_TOKEN)"}
    try:
        if ensure_mode(sessions) == "webhook":
            return {"mode": "webhook", "updates": 0}
        deadline = time.monotonic() + seconds
        count = 0
        while (left := deadline - time.monotonic()) >= 1:
            count += poll_once(sessions, timeout=int(min(left, 50)))
        return {"mode": "polling", "updates": count}
    except (DeliveryFailed, ChannelError) as exc:
        log.warning("telegram polling: %s (%s)", exc.code, getattr(exc, "platform_error", None) or exc)
        return {"mode": "error", "code": exc.code}


# ------------------------------------------------------------------ inline mode


def _inline_result(meme_id: str, kind: str, extension: str, file_id: str) -> dict[str, Any]:
    if kind == "sticker":
        return {"type": "sticker", "id": meme_id, "sticker_file_id": file_id}
    if kind == "animation" and extension == ".mp4":
        return {"type": "mpeg4_gif", "id": meme_id, "mpeg4_file_id": file_id}
    if kind == "animation":
        return {"type": "gif", "id": meme_id, "gif_file_id": file_id}
    return {"type": "photo", "id": meme_id, "photo_file_id": file_id}


def _user_lang(update: dict[str, Any]) -> str:
    """``zh`` when the sender's Telegram app is set to Chinese (``from.language_code``), else ``en``."""
    code = str((update.get("from") or {}).get("language_code") or "")
    return "zh" if code.lower().startswith("zh") else "en"


def request_of(query: dict[str, Any], received_at: float | None = None) -> tuple[Inbound, ReplyMode]:
    """The inbound path's view of an inline query: a message of its sender (``chat``
    ``inline:<user id>``, what the answer is logged and paced under) and its reply mode ``inline``
    (up to :data:`INLINE_MAX` results, :data:`INLINE_LIFE` seconds from ``received_at``)."""
    sender = str((query.get("from") or {}).get("id"))
    text = str(query.get("query") or "")
    lang = _user_lang(query)
    message = Inbound(
        channel=NAME,
        sender=sender,
        chat=f"inline:{sender}",
        text=text,
        mentioned=True,
        message_id=f"inline:{query.get('id')}",
        extra={"lang": lang},
    )
    deadline = (received_at or time.time()) + INLINE_LIFE
    return message, ReplyMode(
        "inline", str(query.get("id") or ""), query=text, count=INLINE_MAX, lang=lang, deadline=deadline
    )


def answer(mode: ReplyMode, found: list[MemeFile] | None) -> Reply:
    """An inline query's :class:`Reply` (the adapter's ``answer``): the memes found to choose from;
    for a person whose binding is not in force (unbound, unconfirmed, a disabled owner's) no results
    and a button that opens the bot, in the language of their Telegram app."""
    if found is None:
        words = translate(mode.lang, "bot.telegram.inline_link")
        return Reply(words, buttons=(Button(words, LINK_ACTION),), mode=mode)
    return Reply(choices=tuple(found), mode=mode)


def send_inline(binding: Binding | None, reply: Reply) -> int:
    """Answer an inline query (``reply.mode.handle``: its id) with ``answerInlineQuery``: each of
    ``reply.choices`` by its cached ``file_id`` (one without is uploaded to
    ``MEWDEX_TELEGRAM_STORAGE_CHAT_ID`` first, at most :data:`INLINE_UPLOADS_PER_QUERY` a query; a
    failed upload ends the list), or no results and the reply's button (``start:<parameter>``).
    Returns how many results."""
    mode = reply.mode
    assert mode is not None
    if not reply.choices and reply.buttons:
        button = reply.buttons[0]
        call(
            "answerInlineQuery",
            {
                "inline_query_id": mode.handle,
                "results": [],
                "cache_time": 0,
                "is_personal": True,
                "button": {"text": button.label, "start_parameter": button.action.partition(":")[2]},
            },
        )
        return 0
    sessions, storage_chat = get_sessionmaker(), settings().telegram_storage_chat_id
    results, uploads, bid = [], 0, bot_id()
    for probe in reply.choices[:INLINE_MAX]:
        kind = media_kind(probe)
        file_id = state.cached_file_id(sessions, NAME, bid, probe.sha256, kind)
        if file_id is None and storage_chat and binding is not None and uploads < INLINE_UPLOADS_PER_QUERY:
            with sessions.begin() as session:
                full = meme_file(session, binding.scope_id, probe.meme_id)
            if full is None:
                continue
            uploads += 1
            try:
                file_id = file_id_of(send_file(storage_chat, full, {"disable_notification": True}), kind)
            except DeliveryFailed as exc:
                log.warning("telegram inline: uploading a meme to the storage chat failed (%s)", exc.code)
                break
        if file_id:
            results.append(_inline_result(probe.meme_id, kind, probe.extension, file_id))
    call(
        "answerInlineQuery",
        {"inline_query_id": mode.handle, "results": results, "cache_time": 300, "is_personal": True},
    )
    return len(results)


@task_type("telegram_inline", lane=LANE, resource_per_scope=True, retry=RetryPolicy(max_attempts=1))
def telegram_inline(ctx: TaskContext) -> dict[str, Any]:
    """Take one queued inline query down the shared path (:func:`mewdex.channels.inbound.handle`
    with its reply mode); the answer is a delivery."""
    message, mode = request_of(ctx.payload["inline_query"], ctx.payload.get("received_at"))
    return inbound.handle(ctx.sessions, message, mode)
