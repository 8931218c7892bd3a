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
   the assistant answers it (:func:`mewdex.assistant.service.post`: "another"/"换一个" pages on as on
   the web), and the reply is queued: each meme shown (the reply text as the first one's caption),
   or the text alone when it shows none; an image alone from the owner gets a Save button where
   the platform has buttons.

Saving (:mod:`mewdex.channels.saving`): 收 / 存 / save / ``/save`` (addressed to the bot even in a
group without a mention) saves the file of the message, of the one it replies to, or the person's
last in the chat; only the owner's own messages save (a guest is told why once); a binding with
``save_all`` saves every file its owner sends without a word (``/autosave on|off``).

Re-captioning (:mod:`mewdex.channels.captioning`): the owner's ``改字 新文字`` / ``/caption new text``
in reply to a meme the bot sent (or to an image) sends the re-captioned image back, unsaved;
``改字 收 新文字`` saves it too. A guest's does nothing (told once, as for 收).

A chat's pool (:mod:`mewdex.channels.pool`): a binding limited to one collection answers only from it,
and what its owner saves there is added to it (``/pool NAME|off``, ``表情池 名字|关``).

Reply modes (:class:`~mewdex.channels.base.ReplyMode`: a Discord interaction, a Telegram inline
query) come through :func:`handle` too, from their channel's own inbound task (which holds the
platform's token until it runs): the binding is owner-checked by the one rule
(:func:`mewdex.channels.bindings.in_force`, before the search and again as the answer is queued),
the assistant's retrieval finds the page asked for (:func:`search_memes`, in the chat's pool; no chat
model), the adapter makes the :class:`~mewdex.channels.base.Reply` (``Adapter.answer``) and it is queued
as a delivery answering in place (:func:`mewdex.channels.delivery.reply_in_place`: the delivery log,
the pacing, the send-time checks). Such a request is not a turn of the binding's standing
conversation: the person sees no chat (an inline query comes at every keystroke), and its paging
needs none ("Another" names its page), so nothing is recorded there.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from mewdex.assistant import service as assistant
from mewdex.channels import bindings, captioning, delivery, pool, saving
from mewdex.channels.base import DeliveryFailed, Inbound, MemeFile, ReplyMode, addressed
from mewdex.channels.errors import ChannelError
from mewdex.channels.media import meme_file
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
    """The chat's language: the one the platform told (``extra["lang"]``: a Discord locale), else
    the message's own (``zh`` for Chinese text), else ``en``."""
    if inbound.extra.get("lang") in ("en", "zh"):
        return str(inbound.extra["lang"])
    return assistant.language(inbound.text) if inbound.text.strip() else "en"


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


def search_memes(
    sessions: sessionmaker[Session],
    scope_id: str,
    query: str,
    *,
    start: int = 0,
    count: int = 1,
    data: bool = True,
    pool_id: str | None = None,
) -> list[MemeFile]:
    """The paging of every reply mode: results ``start`` to ``start + count`` of ``query`` (a chat
    message, read by the assistant's parser; at most 500 characters) in ``scope_id``'s library (only
    the collection ``pool_id``: a chat's pool), best first, as :class:`MemeFile` (``data=False``:
    without their bytes). "Another" is the next ``start``."""
    with assistant.answering_from(pool_id):
        _parsed, hits = assistant.search_ids(sessions, ScopeContext(scope_id), query[:500], n=start + count)
    found: list[MemeFile] = []
    with sessions.begin() as session:
        for hit in hits[start : start + count]:
            meme = meme_file(session, scope_id, hit.id, data=data)
            if meme is not None:
                found.append(meme)
    return found


def handle(sessions: sessionmaker[Session], inbound: Inbound, mode: ReplyMode | None = None) -> dict[str, Any]:
    """Answer one inbound message (module doc). ``{"outcome": ignored|confirm_asked|bound|bind_refused|
    unbound|owner_disabled|rate_limited|answered|failed}``, or a save's (:func:`.saving.save`:
    saved|already_saved|save_failed; save_refused for a guest, nothing_to_save, save_all_on|off).
    ``mode``: the request answers in place (:func:`answer_in_place`)."""
    if mode is not None:
        return answer_in_place(sessions, inbound, mode)
    channel = adapter(inbound.channel)
    try:
        channel.acknowledge(inbound)
    except (EgressError, PlatformError, DeliveryFailed) as exc:
        log.info("%s: acknowledging a message failed (%s)", inbound.channel, getattr(exc, "code", exc))
    lang = _lang(inbound)
    wants_save = saving.is_save(inbound.text)
    recaption = captioning.parse(inbound.text)
    direct = addressed(inbound, channel.command_prefixes)
    spoken_to = direct or wants_save or recaption is not None
    if not spoken_to and not inbound.files:
        return {"outcome": "ignored"}
    if inbound.bind_code:
        return _bind(sessions, inbound, lang)
    with sessions.begin() as session:
        row = binding_of(session, inbound)
        if row is None:
            if not direct:  # a 收 of someone unbound in a group is not for this bot
                return {"outcome": "ignored"}
            delivery.reply_text(session, None, inbound.channel, inbound.chat, channel.bind_help(lang))
            return {"outcome": "unbound"}
        if not owners.owner_active(session, row.scope_id):
            return {"outcome": "owner_disabled"}
        if bindings.pending(row):
            if not spoken_to:
                return {"outcome": "ignored"}
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
        if inbound.files:  # what a reply, a bare 收 or a Save button may take later (saving module doc)
            row = bindings.get(session, row.scope_id, row.channel, lock=True) or row
            saving.remember(session, row, inbound)
        save_all = not guest and bool(inbound.files) and not inbound.text.strip() and saving.saves_all(row)
        if recaption is not None:  # 改字: the owner's only, as 收
            if guest:
                saving.refuse_once(session, row, inbound, lang)
                return {"outcome": "caption_refused"}
            made = captioning.handle(session, row, inbound, lang, *recaption)
            if made["outcome"] != "caption_save":
                return made
            recipe, scope_id = made["recipe"], row.scope_id
        elif wants_save or save_all:
            if guest:
                saving.refuse_once(session, row, inbound, lang)
                return {"outcome": "save_refused"}
            refs, scope_id = saving.refs_to_save(row, inbound), row.scope_id
            if not refs:
                delivery.reply_text(session, row, inbound.channel, inbound.chat, translate(lang, "bot.save.nothing"))
                return {"outcome": "nothing_to_save"}
        elif not spoken_to:
            return {"outcome": "ignored"}
        elif (switch := saving.autosave_command(inbound.text)) is not None and not guest:
            saving.set_save_all(session, bindings.get(session, row.scope_id, row.channel, lock=True) or row, switch)
            words = translate(lang, "bot.save.all_on" if switch else "bot.save.all_off")
            delivery.reply_text(session, row, inbound.channel, inbound.chat, words)
            return {"outcome": "save_all_on" if switch else "save_all_off"}
        elif (wanted := pool.command(inbound.text)) is not None and not guest:
            return _set_pool(session, row, inbound, lang, wanted)
        if guest and not guest_allowed(session, row.scope_id, inbound.channel, inbound.chat):
            log.info(
                "%s: a guest's message in %s over the chat's rate limit; not answered", inbound.channel, row.scope_id
            )
            return {"outcome": "rate_limited"}
        if wants_save or save_all or recaption is not None:
            conversation = None
        else:
            conversation = bindings.standing_conversation(session, row)
            scope, conversation_id = ScopeContext(row.scope_id), conversation.conversation_id
            pool_id = pool.pool_of(row)
    if conversation is None and recaption is not None:
        return captioning.save_and_send(sessions, channel, scope_id, inbound, recipe, lang)
    if conversation is None:
        return saving.save(sessions, channel, scope_id, inbound, refs, lang)
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
        with assistant.answering_from(pool_id):  # a chat's pool: its searches find only that collection's memes
            result = assistant.post(sessions, scope, conversation_id, inbound.text, image, guest=guest)
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
        if pool_id is not None:  # only the pool's, whatever the reply shows
            with assistant.answering_from(pool_id):
                kept = set(assistant.in_pool(session, scope, [card["meme_id"] for card in memes]))
            memes = [card for card in memes if card["meme_id"] in kept]
        # an image alone keeps its meaning (find similar), with a Save button for its owner
        button = saving.save_button(lang, inbound) if inbound.files and not guest and channel.buttons else ()
        for i, card in enumerate(memes):
            caption = (reply.get("content") or None) if i == 0 else None
            delivery.reply_meme(
                session, row, inbound.chat, card["meme_id"], caption, conversation_id, buttons=button if i == 0 else ()
            )
        if not memes:
            delivery.reply_text(
                session,
                row,
                inbound.channel,
                inbound.chat,
                reply.get("content") or "…",
                conversation_id,
                buttons=button,
            )
    return {"outcome": "answered", "memes": len(memes), "guest": guest}


def answer_in_place(sessions: sessionmaker[Session], inbound: Inbound, mode: ReplyMode) -> dict[str, Any]:
    """A reply mode's request (module doc): ``inbound.text`` is ``mode.query``, ``inbound.chat`` the
    target it is logged and paced under. ``{"outcome": "unavailable"}`` when the binding is not in
    force (the adapter's answer for that, nothing from the library), else ``{"outcome": "answered",
    "memes": n}``."""
    channel = adapter(inbound.channel)
    with sessions.begin() as session:
        row = binding_of(session, inbound)
        if not bindings.in_force(session, row) or row is None:  # the owner check of a reply mode
            delivery.reply_in_place(session, None, inbound.channel, inbound.chat, channel.answer(mode, None))
            return {"outcome": "unavailable"}
        scope_id, pool_id = row.scope_id, pool.pool_of(row)
    found = search_memes(sessions, scope_id, mode.query, start=mode.page, count=mode.count, data=False, pool_id=pool_id)
    with sessions.begin() as session:
        row = binding_of(session, inbound)
        if row is None or row.scope_id != scope_id or not bindings.in_force(session, row):  # changed meanwhile
            delivery.reply_in_place(session, None, inbound.channel, inbound.chat, channel.answer(mode, None))
            return {"outcome": "unavailable"}
        delivery.reply_in_place(session, row, inbound.channel, inbound.chat, channel.answer(mode, found))
    return {"outcome": "answered", "memes": len(found)}


def _set_pool(session: Session, row: ChannelBinding, inbound: Inbound, lang: str, wanted: str) -> dict[str, Any]:
    """The owner's ``/pool NAME|off`` (``表情池 名字|关``): limit the chat to a collection, or not; a
    bare ``/pool`` says which. The chat is told."""
    locked = bindings.get(session, row.scope_id, row.channel, lock=True) or row
    if not wanted:
        name = pool.collection_name(session, locked)
        words = translate(lang, "bot.pool.current", name=name) if name else translate(lang, "bot.pool.none")
        outcome = "pool_shown"
    elif wanted.lower() in pool.OFF_WORDS:
        pool.set_pool(session, locked, None)
        words, outcome = translate(lang, "bot.pool.off"), "pool_off"
    elif (found := pool.by_name(session, locked, wanted)) is None:
        words, outcome = translate(lang, "bot.pool.unknown", name=wanted), "pool_unknown"
    else:
        pool.set_pool(session, locked, found)
        words, outcome = (
            translate(lang, "bot.pool.set", name=pool.collection_name(session, locked) or wanted),
            "pool_set",
        )
    delivery.reply_text(session, row, inbound.channel, inbound.chat, words)
    return {"outcome": outcome}


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
