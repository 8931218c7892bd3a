"""Inbound messages: one path for every channel.

An adapter's route or poller turns a platform message into an :class:`~mewdex.channels.base.Inbound`
and calls :func:`submit` (in its transaction; the HTTP answer goes back at once). The
``channel_inbound`` task then runs :func:`handle`:

1. a group message not addressed to the bot (no mention, no command) is ignored;
2. a bind code (``/start <code>``) binds the sender to the code's account and says so;
3. an unbound sender gets the adapter's short how-to-bind reply, nothing else;
4. otherwise the message goes to the binding's standing conversation (``config.chat_task_id``),
   the assistant answers it (:func:`mewdex.assistant.chat.post`: "another"/"换一个" pages on as on
   the web), and the reply is queued: each meme shown (the reply text as the first one's caption),
   or the text alone when it shows none.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from mewdex.assistant import chat
from mewdex.assistant.retrieval import language
from mewdex.channels import bindings, delivery
from mewdex.channels.base import Inbound, adapter, addressed
from mewdex.channels.errors import ChannelError
from mewdex.db.models import ScopeContext, Task
from mewdex.db.scopes import ensure_scope
from mewdex.dto.errors import DomainError
from mewdex.egress import EgressError
from mewdex.queue import registry
from mewdex.queue.registry import RetryPolicy, TaskContext, task_type

log = logging.getLogger(__name__)
TASK_TYPE = "channel_inbound"

_TEXTS = {
    "en": {
        "bound": "Linked. Send me a word or a feeling and I answer with a meme; say “another” for more.",
        "code_invalid": "That link has expired or was used already. Get a new one on mewdex's Channels page.",
        "taken": "This chat is already linked to another mewdex account.",
        "failed": "Sorry, that did not work: {message}",
    },
    "zh": {
        "bound": "已绑定。发一个词或一种心情，我回你一张表情；说“换一个”看更多。",
        "code_invalid": "这个链接已过期或已用过。请在 mewdex 的“渠道”页面重新获取。",
        "taken": "这个聊天已绑定到另一个 mewdex 账户。",
        "failed": "抱歉，没有成功：{message}",
    },
}


def submit(session: Session, inbound: Inbound) -> Task:
    """Queue ``inbound`` for :func:`handle` in the bound account's scope (or the system scope); a
    repeated platform message id while the first is still queued is the same task."""
    row = bindings.find_by_identity(session, inbound.channel, inbound.sender)
    scope_id = row.scope_id if row is not None else delivery.UNBOUND_SCOPE
    if row is None:
        ensure_scope(session, ScopeContext(scope_id))
    dedupe = f"{inbound.channel}:{inbound.chat}:{inbound.message_id}" if inbound.message_id else None
    return registry.submit(
        session, scope_id=scope_id, task_type=TASK_TYPE, payload=inbound.as_payload(), dedupe_key=dedupe
    )


def _lang(inbound: Inbound) -> str:
    return language(inbound.text) if inbound.text.strip() else "en"


def handle(sessions: sessionmaker[Session], inbound: Inbound) -> dict[str, Any]:
    """Answer one inbound message (module doc). ``{"outcome": ignored|bound|bind_refused|unbound|answered|failed}``."""
    channel = adapter(inbound.channel)
    if not addressed(inbound, channel.command_prefixes):
        return {"outcome": "ignored"}
    t = _TEXTS[_lang(inbound)]
    if inbound.bind_code:
        return _bind(sessions, inbound, t)
    with sessions.begin() as session:
        row = bindings.find_by_identity(session, inbound.channel, inbound.sender)
        if row is None:
            delivery.reply_text(session, None, inbound.channel, inbound.chat, channel.bind_help(_lang(inbound)))
            return {"outcome": "unbound"}
        conversation = bindings.standing_conversation(session, row)
        scope, conversation_id = ScopeContext(row.scope_id), conversation.conversation_id
    image = None
    if inbound.images:
        try:
            image = channel.fetch_image(inbound.images[0])
        except (EgressError, DomainError) as exc:
            log.warning("%s: an inbound image could not be fetched (%s)", inbound.channel, getattr(exc, "code", exc))
    if not inbound.text.strip() and image is None:
        return {"outcome": "ignored"}
    try:
        result = chat.post(sessions, scope, conversation_id, inbound.text, image)
    except DomainError as exc:
        result = {"reply": None, "error": {"code": exc.code, "message": exc.message}}
    with sessions.begin() as session:
        row = bindings.find_by_identity(session, inbound.channel, inbound.sender)
        if row is None or row.scope_id != scope.scope_id:  # revoked while the assistant answered
            return {"outcome": "unbound"}
        reply = result.get("reply")
        if reply is None:
            message = (result.get("error") or {}).get("message") or "no answer"
            delivery.reply_text(session, row, inbound.channel, inbound.chat, t["failed"].format(message=message))
            return {"outcome": "failed", "error": result.get("error")}
        memes = reply.get("memes") or []
        for i, card in enumerate(memes):
            caption = (reply.get("content") or None) if i == 0 else None
            delivery.reply_meme(session, row, inbound.chat, card["meme_id"], caption, conversation_id)
        if not memes:
            delivery.reply_text(
                session, row, inbound.channel, inbound.chat, reply.get("content") or "…", conversation_id
            )
    return {"outcome": "answered", "memes": len(memes)}


def _bind(sessions: sessionmaker[Session], inbound: Inbound, t: dict[str, str]) -> dict[str, Any]:
    channel = adapter(inbound.channel)
    code = inbound.bind_code or ""
    try:
        with sessions.begin() as session:
            used = bindings.redeem_bind_code(session, inbound.channel, code)
            row = bindings.bind(
                session,
                scope_id=used.scope_id,
                user_id=used.user_id,
                channel=inbound.channel,
                identity=inbound.sender,
                config=channel.binding_config(inbound),
            )
            bindings.standing_conversation(session, row)
            delivery.reply_text(session, row, inbound.channel, inbound.chat, t["bound"])
        return {"outcome": "bound", "scope_id": used.scope_id}
    except ChannelError as exc:
        with sessions.begin() as session:
            text = t["taken"] if exc.code == "channel_identity_taken" else t["code_invalid"]
            delivery.reply_text(session, None, inbound.channel, inbound.chat, text)
        return {"outcome": "bind_refused", "code": exc.code}


@task_type(TASK_TYPE, lane=delivery.LANE, resource_per_scope=True, retry=RetryPolicy(max_attempts=1))
def inbound_task(ctx: TaskContext) -> dict[str, Any]:
    """Handle one queued inbound message (:func:`handle`); one attempt (a retry could answer twice)."""
    return handle(ctx.sessions, Inbound.from_payload(ctx.payload))
