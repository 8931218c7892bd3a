"""Outbound messages as queue work, with the delivery log.

Every send is a ``channel_deliveries`` row plus one ``channel_delivery`` task (lane ``channel``, at
most ``MEWDEX_CHANNEL_SCOPE_CONCURRENCY`` of one scope running at once, external,
:data:`MAX_ATTEMPTS` attempts with backoff). The handler checks the binding is still active (a
revoked binding's deliveries are cancelled and never sent), waits for the chat's pace slot
(:func:`reserve_slot`: the adapter's ``min_send_interval`` per chat, across all processes), sends
through the adapter (:meth:`~mewdex.channels.base.Adapter.send`: a :class:`~mewdex.channels.base.Reply`
of text, meme and buttons), and writes the outcome on the row: ``sent`` with the platform's message id, or
the platform's error code and text. A ``retry_after`` the platform asked for delays the next attempt
at least that long. When the attempts are used up the row is ``failed`` with the reason; a worker
that died mid-send leaves it ``unknown`` (never sent twice). Nothing fails silently.

A disabled owner's deliveries are cancelled (``channel_owner_disabled``) and new ones refused
(:func:`mewdex.platform.owners.owner_active`, the rule every channel path asks).

A reply mode (:class:`~mewdex.channels.base.ReplyMode`: a Discord interaction's deferred response, a
Telegram inline query's answer) is a delivery like any other (:func:`reply_in_place`): logged, paced
per target, checked, retried. Its ``handle`` (the interaction token, the inline query id) rides
sealed in the task's payload (member ``reply_token``, the hook ``sealed_task_payloads``: ``mewdex
secrets rotate`` re-seals a waiting one); past the mode's ``deadline`` (or when the token cannot be
opened any more) it fails ``channel_reply_expired`` instead of answering late.

Public API (schedules and the inbound path call these, in the caller's transaction):
:func:`send_meme`, :func:`send_text`, :func:`list_deliveries`.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from mewdex import hooks
from mewdex.channels import bindings, platform
from mewdex.channels.base import (
    UNBOUND_SCOPE,
    Button,
    DeliveryFailed,
    MemeFile,
    Reply,
    ReplyMode,
    current_delivery,
)
from mewdex.channels.errors import ChannelError
from mewdex.channels.media import meme_file, remade
from mewdex.channels.platform import PlatformError
from mewdex.channels.registry import adapter
from mewdex.config import get_settings
from mewdex.db.models import ChannelDelivery, ScopeContext, Task, utcnow
from mewdex.db.scopes import ensure_scope
from mewdex.dto.errors import DomainError
from mewdex.egress import EgressError
from mewdex.library import memes
from mewdex.platform import owners
from mewdex.providers import sealed_fields, secrets
from mewdex.queue import registry
from mewdex.queue.registry import Lane, RetryPolicy, TaskContext, TaskError, register_lane, task_type

log = logging.getLogger(__name__)
LANE = "channel"
TASK_TYPE = "channel_delivery"
MAX_ATTEMPTS = 5
MAX_CAPTION_CHARS = 1024
MAX_TEXT_CHARS = 4000
SOURCES = ("assistant", "schedule", "bind", "test", "api")
#: The key of a delivery task's payload that holds an unsaved re-captioned image's recipe.
REMAKE_KEY = "remake"
#: The keys of a delivery task's payload that hold its reply mode (:class:`ReplyMode`, without its
#: handle), the handle sealed, and the ids of the memes to choose from (an inline query's results).
REPLY_KEY, REPLY_TOKEN, CHOICES_KEY = "reply", "reply_token", "choices"
hooks.provide("sealed_task_payloads", TASK_TYPE, (REPLY_TOKEN,))  # a reply mode's handle, while the task waits
REPLY_TOKEN_AAD = sealed_fields.task_payload_aad(TASK_TYPE, REPLY_TOKEN)
# Every account's channel work shares this lane; each scope gets at most its share of the slots
# (MEWDEX_CHANNEL_SCOPE_CONCURRENCY), so one account's slow endpoint cannot hold them all.
register_lane(Lane(LANE, scope_share=lambda: get_settings().channel_scope_concurrency))


def _enqueue(
    session: Session,
    *,
    scope_id: str,
    user_id: UUID | None,
    channel: str,
    target: str,
    kind: str,
    meme_id: UUID | None = None,
    text_: str | None = None,
    source: str = "assistant",
    conversation_id: UUID | None = None,
    bound: bool = True,
    buttons: tuple[Button, ...] = (),
    remake: dict[str, Any] | None = None,
    mode: ReplyMode | None = None,
    choices: tuple[str, ...] = (),
) -> ChannelDelivery:
    row = ChannelDelivery(
        scope_id=scope_id,
        user_id=user_id,
        channel=channel,
        target=target,
        kind=kind,
        meme_id=meme_id,
        text=text_,
        source=source,
        conversation_id=conversation_id,
        bound=bound,
        status="queued",
    )
    session.add(row)
    session.flush()
    payload: dict[str, Any] = {"delivery_id": str(row.delivery_id)}
    if buttons:  # shown where the platform has buttons (Adapter.send)
        payload["buttons"] = [[b.label, b.action] for b in buttons]
    if remake is not None:  # an unsaved re-captioned image, made at the send (media.remade)
        payload[REMAKE_KEY] = remake
    if mode is not None:  # answered in place (reply_in_place): the handle sealed, never in the log
        payload[REPLY_KEY] = mode.as_payload()
        payload[REPLY_TOKEN] = secrets.seal(mode.handle, REPLY_TOKEN_AAD)
    if choices:
        payload[CHOICES_KEY] = list(choices)
    task = registry.submit(session, scope_id=scope_id, task_type=TASK_TYPE, payload=payload)
    row.task_id = task.id
    return row


def _binding_target(session: Session, scope_id: str, channel: str) -> tuple[Any, str]:
    if not owners.owner_active(session, scope_id):
        raise ChannelError("channel_owner_disabled", "the account is disabled: nothing is sent for it")
    row = bindings.active(session, scope_id, channel)
    return row, adapter(channel).target_of(bindings.view(row))


def _check_source(source: str) -> None:
    if source not in SOURCES:
        raise ChannelError("invalid_request", f"source must be one of {', '.join(SOURCES)}")


def _enqueue_to_binding(
    session: Session,
    *,
    scope_id: str,
    channel: str,
    source: str,
    conversation_id: UUID | str | None,
    **what: Any,
) -> ChannelDelivery:
    """Queue ``what`` (``kind``, ``meme_id``, ``text_``) to the scope's active binding of ``channel``:
    the one path of :func:`send_meme` and :func:`send_text` (target resolved)."""
    row, target = _binding_target(session, scope_id, channel)
    return _enqueue(
        session,
        scope_id=scope_id,
        user_id=row.user_id,
        channel=channel,
        target=target,
        source=source,
        conversation_id=UUID(str(conversation_id)) if conversation_id else None,
        **what,
    )


def send_meme(
    session: Session,
    *,
    user_id: UUID | str | None,
    channel: str,
    meme_id: UUID | str,
    caption: str | None = None,
    conversation_id: UUID | str | None = None,
    source: str = "schedule",
) -> ChannelDelivery:
    """Queue one meme to the user's active binding of ``channel`` (``user_id`` None: single-user
    mode's local scope). Returns the delivery row (``status`` queued; ``delivery_id``, ``task_id``).

    Raises ``ChannelError``: ``channel_unknown`` (404), ``channel_not_bound`` (404), ``not_found``
    (404: no such user, or no such meme in the user's library), ``invalid_request`` (422: caption
    over :data:`MAX_CAPTION_CHARS`, unknown ``source``)."""
    scope_id = bindings.scope_of_user(session, user_id)
    adapter(channel)
    _check_source(source)
    if caption is not None and len(caption) > MAX_CAPTION_CHARS:
        raise ChannelError("invalid_request", f"the caption is over {MAX_CAPTION_CHARS} characters")
    found = memes.find(session, ScopeContext(scope_id), meme_id)
    if found is None:
        raise ChannelError("not_found", "no such meme")
    mid = found.id
    return _enqueue_to_binding(
        session,
        scope_id=scope_id,
        channel=channel,
        source=source,
        conversation_id=conversation_id,
        kind="meme",
        meme_id=mid,
        text_=caption,
    )


def send_text(
    session: Session,
    *,
    user_id: UUID | str | None,
    channel: str,
    text: str,
    conversation_id: UUID | str | None = None,
    source: str = "schedule",
) -> ChannelDelivery:
    """Queue a text message to the user's active binding of ``channel``; errors as :func:`send_meme`."""
    scope_id = bindings.scope_of_user(session, user_id)
    _check_source(source)
    if not text.strip() or len(text) > MAX_TEXT_CHARS:
        raise ChannelError("invalid_request", f"the text must have 1 to {MAX_TEXT_CHARS} characters")
    return _enqueue_to_binding(
        session,
        scope_id=scope_id,
        channel=channel,
        source=source,
        conversation_id=conversation_id,
        kind="text",
        text_=text,
    )


def reply_meme(
    session: Session,
    binding_row: Any,
    target: str,
    meme_id: str,
    caption: str | None,
    conversation_id,
    *,
    buttons: tuple[Button, ...] = (),
):
    """Queue a meme answering an inbound message (to ``target``: the chat it came from), with
    ``buttons`` where the platform has them."""
    return _enqueue(
        session,
        scope_id=binding_row.scope_id,
        user_id=binding_row.user_id,
        channel=binding_row.channel,
        target=target,
        kind="meme",
        meme_id=UUID(str(meme_id)),
        text_=caption,
        source="assistant",
        conversation_id=conversation_id,
        buttons=buttons,
    )


def reply_remade(session: Session, binding_row: Any, target: str, recipe: dict[str, Any]):
    """Queue an unsaved re-captioned image answering an inbound message: a ``meme`` delivery (its
    ``meme_id`` the original's, or none for a chat's file) made again from ``recipe`` when it is
    sent (:func:`mewdex.channels.media.remade`)."""
    meme_id = recipe.get("meme_id")
    return _enqueue(
        session,
        scope_id=binding_row.scope_id,
        user_id=binding_row.user_id,
        channel=binding_row.channel,
        target=target,
        kind="meme",
        meme_id=UUID(str(meme_id)) if meme_id else None,
        source="assistant",
        remake=recipe,
    )


def _sender(session: Session, binding_row) -> dict[str, Any]:
    """Whose a reply is: the binding's scope and account, or, for an unbound sender (``binding_row``
    None), the system scope made sure of (``UNBOUND_SCOPE``) and no account."""
    if binding_row is None:
        ensure_scope(session, ScopeContext(UNBOUND_SCOPE))
        return {"scope_id": UNBOUND_SCOPE, "user_id": None}
    return {"scope_id": binding_row.scope_id, "user_id": binding_row.user_id}


def reply_text(
    session: Session,
    binding_row: Any | None,
    channel: str,
    target: str,
    text: str,
    conversation_id=None,
    *,
    source: str | None = None,
    buttons: tuple[Button, ...] = (),
):
    """Queue a text answering an inbound message; ``binding_row`` None: an unbound sender (system
    scope). ``source`` ``bind``: part of linking the chat (sent while the binding awaits the chat's
    confirmation; other sends to a pending binding are not). ``buttons``: where the platform has them."""
    return _enqueue(
        session,
        **_sender(session, binding_row),
        channel=channel,
        target=target,
        kind="text",
        text_=text[:MAX_TEXT_CHARS],
        source=source or ("assistant" if binding_row is not None else "bind"),
        conversation_id=conversation_id,
        bound=binding_row is not None,
        buttons=buttons,
    )


def reply_in_place(session: Session, binding_row: Any | None, channel: str, target: str, reply: Reply):
    """Queue ``reply`` answering in its reply mode (``reply.mode``: required), e.g. the edit of a
    Discord interaction's deferred response or a Telegram inline query's answer; ``target`` is what
    it is logged and paced under (the chat it was asked in, or the person). ``binding_row`` None: an
    answer that needs no binding in force (unbound, unconfirmed, disabled owner: it carries nothing
    from the library; system scope). Logged as ``meme`` (the first of ``reply.choices`` when it has
    several) or ``text``."""
    if reply.mode is None:
        raise ValueError("reply_in_place needs a reply with its mode")
    first = reply.meme or (reply.choices[0] if reply.choices else None)
    return _enqueue(
        session,
        **_sender(session, binding_row),
        channel=channel,
        target=target,
        kind="meme" if first is not None else "text",
        meme_id=UUID(first.meme_id) if first is not None else None,
        text_=reply.text[:MAX_TEXT_CHARS] if reply.text else None,
        source="assistant",
        bound=binding_row is not None,
        buttons=reply.buttons,
        mode=reply.mode,
        choices=tuple(m.meme_id for m in reply.choices),
    )


def list_deliveries(session: Session, scope_id: str, *, channel: str | None = None, limit: int = 50):
    """The scope's delivery log, newest first (at most 200)."""
    stmt = select(ChannelDelivery).where(ChannelDelivery.scope_id == scope_id)
    if channel:
        stmt = stmt.where(ChannelDelivery.channel == channel)
    stmt = stmt.order_by(ChannelDelivery.created_at.desc(), ChannelDelivery.delivery_id).limit(min(limit, 200))
    return list(session.execute(stmt).scalars())


# ------------------------------------------------------------------ pacing


def reserve_slot(sessions: sessionmaker[Session], channel: str, target: str, interval: float) -> float:
    """Reserve the chat's next send slot (``interval`` seconds after the previous one, all processes);
    returns the seconds to wait for it (0 when free now)."""
    if interval <= 0:
        return 0.0
    with sessions.begin() as session:
        wait = session.execute(
            text(
                """
                INSERT INTO channel_chat_pacing (channel, target, next_at)
                VALUES (:c, :t, clock_timestamp() + make_interval(secs => :i))
                ON CONFLICT (channel, target) DO UPDATE
                   SET next_at = GREATEST(channel_chat_pacing.next_at, clock_timestamp()) + make_interval(secs => :i)
                RETURNING EXTRACT(EPOCH FROM (next_at - make_interval(secs => :i) - clock_timestamp()))
                """
            ),
            {"c": channel, "t": target, "i": interval},
        ).scalar_one()
    return max(0.0, float(wait))


# ------------------------------------------------------------------ the task type


def _load_meme(session: Session, row: ChannelDelivery) -> MemeFile:
    found = meme_file(session, row.scope_id, row.meme_id)
    if found is None:
        raise TaskError("channel_meme_gone", "the meme was deleted before it was sent", retryable=False)
    return found


def _remade(sessions: sessionmaker[Session], delivery_id: UUID, scope_id: str, recipe: dict[str, Any]) -> MemeFile:
    """The re-captioned image of a delivery's recipe; a failure to make it fails the delivery (a
    fetch that may work later is retried)."""
    try:
        return remade(scope_id, recipe)
    except (EgressError, PlatformError) as exc:
        failed = platform.failure(exc)
    except DeliveryFailed as exc:
        failed = exc
    except DomainError as exc:
        failed = DeliveryFailed(exc.code, exc.message)
    _record_failure(sessions, delivery_id, failed)
    raise TaskError(failed.code, failed.message, retryable=failed.retryable)


def _record_failure(sessions: sessionmaker[Session], delivery_id: UUID, exc: DeliveryFailed) -> None:
    with sessions.begin() as session:
        row = session.get(ChannelDelivery, delivery_id, with_for_update=True)
        if row is not None:
            row.error_code = exc.code
            row.platform_code = exc.platform_code
            row.platform_error = (exc.platform_error or exc.message)[:1000]
            row.retry_after_seconds = None if exc.retry_after is None else max(0, int(round(exc.retry_after)))


def _on_failure(session: Session, task: Task, outcome: str) -> None:
    """The delivery row follows its task: ``retrying`` (and the next attempt waits at least the
    platform's ``retry_after``), ``failed``, ``cancelled``, ``unknown`` (a worker died mid-send)."""
    try:
        delivery_id = UUID(str((task.payload or {}).get("delivery_id")))
    except ValueError:
        return
    row = session.get(ChannelDelivery, delivery_id, with_for_update=True)
    if row is None or row.status in ("sent", "cancelled"):
        return
    error = task.error or {}
    row.status = {"retrying": "retrying", "failed": "failed", "cancelled": "cancelled"}.get(outcome, "unknown")
    row.error_code = row.error_code or error.get("code")
    if not row.platform_error and error.get("message"):
        row.platform_error = str(error["message"])[:1000]
    if outcome == "retrying" and row.retry_after_seconds:
        task.available_at = max(task.available_at, utcnow() + timedelta(seconds=row.retry_after_seconds))
    row.updated_at = utcnow()


def _attempt_started(ctx: TaskContext) -> tuple[UUID, dict[str, Any] | None]:
    """Lock the delivery, check it may still be sent, count the attempt. ``(id, None)`` when it is not to be sent."""
    delivery_id = UUID(str(ctx.payload["delivery_id"]))
    with ctx.sessions.begin() as session:
        row = session.get(ChannelDelivery, delivery_id, with_for_update=True)
        if row is None:
            return delivery_id, None
        if row.status in ("sent", "cancelled"):
            return delivery_id, None
        binding = None
        if row.bound:
            found = bindings.get(session, row.scope_id, row.channel)
            if found is None or found.status != "active" or (bindings.pending(found) and row.source != "bind"):
                row.status, row.error_code = "cancelled", "channel_binding_revoked"
                return delivery_id, None
            if not owners.owner_active(session, row.scope_id):
                row.status, row.error_code = "cancelled", "channel_owner_disabled"
                return delivery_id, None
            binding = bindings.view(found)
        row.attempts += 1
        row.retry_after_seconds = None
        row.error_code = row.platform_code = row.platform_error = None
        remake = ctx.payload.get(REMAKE_KEY)
        choices = [str(c) for c in ctx.payload.get(CHOICES_KEY) or ()]
        meme = _load_meme(session, row) if row.kind == "meme" and remake is None and not choices else None
        chosen = [meme_file(session, row.scope_id, c, data=False) for c in choices]
        return delivery_id, {
            "scope_id": row.scope_id,
            "remake": remake,
            "channel": row.channel,
            "target": row.target,
            "kind": row.kind,
            "text": row.text,
            "binding": binding,
            "meme": meme,
            "buttons": tuple(Button(str(label), str(action)) for label, action in ctx.payload.get("buttons") or ()),
            "choices": tuple(f for f in chosen if f is not None),
        }


def _mode_of(payload: dict[str, Any]) -> ReplyMode | None:
    """The delivery's reply mode with its handle opened (None: a message in a chat). Raises
    :class:`DeliveryFailed` ``channel_reply_expired`` when the handle cannot be opened any more (its
    key dropped by a rotation)."""
    if payload.get(REPLY_KEY) is None:
        return None
    try:
        handle = secrets.open_sealed(payload[REPLY_TOKEN], REPLY_TOKEN_AAD)
    except secrets.SecretError:
        raise DeliveryFailed("channel_reply_expired", "the reply's token cannot be opened any more") from None
    return ReplyMode.from_payload(payload[REPLY_KEY], handle)


@task_type(
    TASK_TYPE,
    lane=LANE,
    resource_per_scope=True,
    external=True,
    retry=RetryPolicy(max_attempts=MAX_ATTEMPTS),  # backoff: MEWDEX_RETRY_BASE_SECONDS / _MAX_SECONDS (2 s / 300 s)
    on_failure=_on_failure,
)
def deliver(ctx: TaskContext) -> dict[str, Any]:
    """Send one ``channel_deliveries`` row (module doc). ``{"status", "platform_message_id"}``."""
    delivery_id, job = _attempt_started(ctx)
    if job is None:
        return {"status": "skipped"}
    channel = adapter(job["channel"])
    if job["remake"] is not None:
        job["meme"] = _remade(ctx.sessions, delivery_id, job["scope_id"], job["remake"])
    try:
        mode = _mode_of(ctx.payload)
    except DeliveryFailed as exc:
        _record_failure(ctx.sessions, delivery_id, exc)
        raise TaskError(exc.code, exc.message, retryable=False) from None
    wait = reserve_slot(ctx.sessions, job["channel"], job["target"], channel.min_send_interval)
    if mode is not None and mode.deadline is not None and time.time() + wait > mode.deadline:
        expired = DeliveryFailed("channel_reply_expired", "the platform takes no answer to this request any more")
        _record_failure(ctx.sessions, delivery_id, expired)
        raise TaskError(expired.code, expired.message, retryable=False)
    if wait > 0:
        time.sleep(wait)
    ctx.external_started()
    token = current_delivery.set(str(delivery_id))
    try:
        reply = Reply(job["text"], job["meme"], job["buttons"], job["choices"], mode)
        sent = channel.send(job["binding"], job["target"], reply)
    except (EgressError, PlatformError) as exc:  # not mapped by the adapter: the shared rule (channels.platform)
        failed = platform.failure(exc)
        _record_failure(ctx.sessions, delivery_id, failed)
        raise TaskError(failed.code, failed.message, retryable=failed.retryable) from None
    except DeliveryFailed as exc:
        _record_failure(ctx.sessions, delivery_id, exc)
        raise TaskError(exc.code, exc.message, retryable=exc.retryable) from None
    finally:
        current_delivery.reset(token)
    with ctx.sessions.begin() as session:
        row = session.get(ChannelDelivery, delivery_id, with_for_update=True)
        if row is not None:
            row.status, row.sent_at = "sent", utcnow()
            row.platform_message_id = sent.platform_message_id
            row.error_code = None
    return {"status": "sent", "platform_message_id": sent.platform_message_id}
