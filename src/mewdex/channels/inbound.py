"""Inbound messages: one path for every channel.

An adapter's route or poller turns a platform message into an :class:`~mewdex.channels.base.Inbound`
and calls :func:`submit` (in its transaction; the HTTP answer goes back at once). The
``channel_inbound`` task then runs :func:`handle`:

1. a group message not addressed to the bot (no mention, no command) is ignored;
2. a bind code (``/start <code>``) links the sender to the code's account pending the chat's
   confirmation: the chat is asked "Link this chat to mewdex account a…@example.com? Reply YES",
   and only a YES puts the binding in force;
3. an unbound sender gets the adapter's short how-to-bind reply, nothing else; a disabled
   owner's binding answers nothing;
4. a person other than the binding's owner (a stranger in a QQ group) gets a retrieval-only
   answer — no chat model, no write tool — within the chat's guest rate limit;
5. otherwise the message goes to the binding's standing conversation (``config.chat_task_id``),
   the assistant answers it (:func:`mewdex.assistant.chat.post`: "another"/"换一个" pages on as on
   the web), and the reply is queued: each meme shown (the reply text as the first one's caption),
   or the text alone when it shows none.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from mewdex.assistant import chat
from mewdex.assistant.retrieval import language
from mewdex.channels import bindings, delivery
from mewdex.channels.base import DeliveryFailed, Inbound, addressed
from mewdex.channels.errors import ChannelError
from mewdex.channels.platform import PlatformError
from mewdex.channels.registry import adapter
from mewdex.config import get_settings
from mewdex.db.models import ChannelBinding, ScopeContext, Task
from mewdex.db.scopes import ensure_scope
from mewdex.dto.errors import DomainError
from mewdex.dto.i18n import error_text, translate
from mewdex.egress import EgressError
from mewdex.platform import owners
from mewdex.queue import registry
from mewdex.queue.registry import RetryPolicy, TaskContext, task_type

log = logging.getLogger(__name__)
TASK_TYPE = "channel_inbound"
#: channel_chat_pacing rows of the guests' rate limit: ("guest:<scope>:<channel>", chat), one allowance
#: per account and chat (two accounts' bots in one group never share it).
GUEST_LIMIT_KEY = "guest:"
YES = frozenset({"yes", "y", "是", "是的", "确认"})


def binding_of(session: Session, inbound: Inbound) -> ChannelBinding | None:
    """The binding ``inbound`` belongs to: the one its transport authenticated
    (``inbound.scope_id``; only while that binding is active with ``inbound.sender`` as its
    identity), else the active binding of its sender (a platform that vouches for the sender)."""
    if inbound.scope_id is not None:
        row = bindings.get(session, inbound.scope_id, inbound.channel)
        if row is None or row.status != "active" or row.identity != inbound.sender:
            return None
        return row
    return bindings.find_by_identity(session, inbound.channel, inbound.sender)


def submit(session: Session, inbound: Inbound) -> Task | None:
    """Queue ``inbound`` for :func:`handle` in the bound account's scope (or the system scope); a
    repeated platform message id while the first is still queued is the same task. None (nothing
    queued, logged) when the binding its transport authenticated is gone or its owner is disabled."""
    row = binding_of(session, inbound)
    if row is None and inbound.scope_id is not None:
        log.warning("%s: a message for a binding that is gone (scope %s); dropped", inbound.channel, inbound.scope_id)
        return None
    if row is not None and not owners.owner_active(session, row.scope_id):
        log.info("%s: a message for the disabled account of scope %s; dropped", inbound.channel, row.scope_id)
        return None
    scope_id = row.scope_id if row is not None else delivery.UNBOUND_SCOPE
    if row is None:
        ensure_scope(session, ScopeContext(scope_id))
    dedupe = f"{inbound.channel}:{inbound.chat}:{inbound.message_id}" if inbound.message_id else None
    return registry.submit(
        session, scope_id=scope_id, task_type=TASK_TYPE, payload=inbound.as_payload(), dedupe_key=dedupe
    )


def _lang(inbound: Inbound) -> str:
    return language(inbound.text) if inbound.text.strip() else "en"


def account_label(session: Session, scope_id: str, lang: str) -> str:
    """The account a binding links to, as the chat is shown it: ``a…@example.com`` (the address's
    first character and its domain), or the local library in single-user mode."""
    user = owners.user_for_scope(session, scope_id)
    if user is None or not user.email:
        return translate(lang, "bot.account.local")
    local, _, domain = user.email.partition("@")
    return f"{local[:1]}…@{domain}"


def guest_allowed(session: Session, scope_id: str, channel: str, chat: str) -> bool:
    """The per-chat rate limit of people other than the binding's owner: at most
    ``channel_guest_messages_per_minute`` answered messages a minute per account and chat (a burst
    of that many, then one every 60/n s), shared by every process. False: over the limit (nothing is
    answered)."""
    per_minute = get_settings().channel_guest_messages_per_minute
    if per_minute <= 0:
        return False
    interval = 60.0 / per_minute
    allowed = session.execute(
        text(
            """
            INSERT INTO channel_chat_pacing AS p (channel, target, next_at)
            VALUES (:c, :t, clock_timestamp() + make_interval(secs => :i))
            ON CONFLICT (channel, target) DO UPDATE
               SET next_at = GREATEST(p.next_at, clock_timestamp()) + make_interval(secs => :i)
             WHERE p.next_at <= clock_timestamp() + make_interval(secs => :burst)
            RETURNING 1
            """
        ),
        {"c": f"{GUEST_LIMIT_KEY}{scope_id}:{channel}", "t": chat, "i": interval, "burst": 60.0 - interval},
    ).scalar_one_or_none()
    return allowed is not None


def handle(sessions: sessionmaker[Session], inbound: Inbound) -> dict[str, Any]:
    """Answer one inbound message (module doc). ``{"outcome": ignored|confirm_asked|bound|bind_refused|
    unbound|owner_disabled|rate_limited|answered|failed}``."""
    channel = adapter(inbound.channel)
    if not addressed(inbound, channel.command_prefixes):
        return {"outcome": "ignored"}
    lang = _lang(inbound)
    if inbound.bind_code:
        return _bind(sessions, inbound, lang)
    with sessions.begin() as session:
        row = binding_of(session, inbound)
        if row is None:
            delivery.reply_text(session, None, inbound.channel, inbound.chat, channel.bind_help(lang))
            return {"outcome": "unbound"}
        if not owners.owner_active(session, row.scope_id):
            return {"outcome": "owner_disabled"}
        if bindings.pending(row):
            if inbound.text.strip().lower().rstrip(".!！。") in YES:
                bindings.confirm(session, row)
                bindings.standing_conversation(session, row)
                delivery.reply_text(
                    session, row, inbound.channel, inbound.chat, translate(lang, "bot.bind.bound"), source="bind"
                )
                return {"outcome": "bound", "scope_id": row.scope_id}
            question = translate(lang, "bot.bind.confirm", account=account_label(session, row.scope_id, lang))
            delivery.reply_text(session, row, inbound.channel, inbound.chat, question, source="bind")
            return {"outcome": "confirm_asked"}
        guest = inbound.person != bindings.owner_of(row)
        if guest and not guest_allowed(session, row.scope_id, inbound.channel, inbound.chat):
            log.info(
                "%s: a guest's message in %s over the chat's rate limit; not answered", inbound.channel, row.scope_id
            )
            return {"outcome": "rate_limited"}
        conversation = bindings.standing_conversation(session, row)
        scope, conversation_id = ScopeContext(row.scope_id), conversation.conversation_id
    image = None
    if inbound.images:
        try:
            image = channel.fetch_image(inbound.images[0])
        except (EgressError, PlatformError, DeliveryFailed, DomainError) as exc:
            log.warning("%s: an inbound image could not be fetched (%s)", inbound.channel, getattr(exc, "code", exc))
    if not inbound.text.strip() and image is None:
        return {"outcome": "ignored"}
    try:
        # Only the binding's owner gets the chat model and its write tools; others a plain search.
        result = chat.post(sessions, scope, conversation_id, inbound.text, image, guest=guest)
    except DomainError as exc:
        result = {"reply": None, "error": {"code": exc.code, "message": exc.message}}
    with sessions.begin() as session:
        row = binding_of(session, inbound)
        if row is None or row.scope_id != scope.scope_id:  # revoked while the assistant answered
            return {"outcome": "unbound"}
        if not owners.owner_active(session, row.scope_id):
            return {"outcome": "owner_disabled"}
        reply = result.get("reply")
        if reply is None:
            message = error_text(lang, result.get("error")) or translate(lang, "bot.no_answer")
            failed = translate(lang, "bot.failed", message=message)
            delivery.reply_text(session, row, inbound.channel, inbound.chat, failed)
            return {"outcome": "failed", "error": result.get("error")}
        memes = reply.get("memes") or []
        for i, card in enumerate(memes):
            caption = (reply.get("content") or None) if i == 0 else None
            delivery.reply_meme(session, row, inbound.chat, card["meme_id"], caption, conversation_id)
        if not memes:
            delivery.reply_text(
                session, row, inbound.channel, inbound.chat, reply.get("content") or "…", conversation_id
            )
    return {"outcome": "answered", "memes": len(memes), "guest": guest}


def _bind(sessions: sessionmaker[Session], inbound: Inbound, lang: str) -> dict[str, Any]:
    """A bind code: the chat is linked pending its confirmation (it is asked to reply YES, naming
    the account the code belongs to), so a code someone else sent cannot link a chat unawares."""
    channel = adapter(inbound.channel)
    code = inbound.bind_code or ""
    try:
        with sessions.begin() as session:
            used = bindings.redeem_bind_code(session, inbound.channel, code)  # checked, then used
            row = bindings.bind(
                session,
                scope_id=used.scope_id,
                user_id=used.user_id,
                channel=inbound.channel,
                identity=inbound.sender,
                config={
                    **channel.binding_config(inbound),
                    "owner_id": inbound.person,
                    bindings.PENDING_KEY: True,
                },
            )
            question = translate(lang, "bot.bind.confirm", account=account_label(session, used.scope_id, lang))
            delivery.reply_text(session, row, inbound.channel, inbound.chat, question, source="bind")
        return {"outcome": "confirm_asked", "scope_id": used.scope_id}
    except ChannelError as exc:
        with sessions.begin() as session:
            text_ = translate(
                lang, "bot.bind.taken" if exc.code == "channel_identity_taken" else "bot.bind.code_invalid"
            )
            delivery.reply_text(session, None, inbound.channel, inbound.chat, text_)
        return {"outcome": "bind_refused", "code": exc.code}


@task_type(TASK_TYPE, lane=delivery.LANE, resource_per_scope=True, retry=RetryPolicy(max_attempts=1))
def inbound_task(ctx: TaskContext) -> dict[str, Any]:
    """Handle one queued inbound message (:func:`handle`); one attempt (a retry could answer twice)."""
    return handle(ctx.sessions, Inbound.from_payload(ctx.payload))
