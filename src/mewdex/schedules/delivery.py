"""Delivering a run's meme to the job's ``notify`` target: the one place every run goes through.

- ``{"type": "webhook", "definition_id"}``: a signed POST (Standard Webhooks, :mod:`mewdex.providers.webhook`)
  of event ``schedule.run`` with ``{"job", "run", "meme", "caption", "conversation_id"}`` (the body's
  ``timestamp``: the run's slot, ISO 8601 UTC); its
  ``webhook-id`` is ``msg_<run id>`` on every attempt, so a receiver drops a repeated delivery;
- ``{"type": "channel", "channel"}``: the owner's binding of that channel (``telegram``, ``webhook``,
  …): queued through :func:`mewdex.channels.delivery.send_meme` (source ``schedule``); the channel's
  delivery log then holds the sending, its retries and its outcome.

Raises :class:`DeliveryError` (``code``, ``retryable``); returns a small JSON-able detail.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy.orm import Session, sessionmaker

from mewdex.db.models import ScopeContext
from mewdex.dto.errors import DomainError
from mewdex.dto.search import SearchHit


class DeliveryError(DomainError):
    """A failed delivery: ``code`` (the provider's or channel's), ``retryable``."""

    def __init__(self, code: str, message: str, retryable: bool = True):
        super().__init__(code, message)
        self.retryable = retryable


@dataclass(frozen=True)
class Push:
    """What a run delivers."""

    job_id: UUID
    job_name: str
    run_id: UUID
    slot: str
    scope_id: str
    user_id: UUID | None
    meme: SearchHit
    caption: str
    conversation_id: UUID


def deliver(sessions: sessionmaker[Session], notify: dict[str, Any], push: Push, *, timeout: float) -> dict[str, Any]:
    """Send ``push`` to ``notify`` within ``timeout`` seconds; the delivery detail (``{"type", …}``)."""
    if notify.get("type") == "webhook":
        return _webhook(sessions, notify, push, timeout)
    if notify.get("type") == "channel":
        return _channel(sessions, notify, push)
    raise DeliveryError("schedule_invalid", f"unknown notify type {notify.get('type')!r}", retryable=False)


def _webhook(sessions: sessionmaker[Session], notify: dict[str, Any], push: Push, timeout: float) -> dict[str, Any]:
    from mewdex.providers import connectors, webhook
    from mewdex.providers.errors import ProviderError

    try:
        with sessions.begin() as session:
            connection = connectors.connection_for(
                session, ScopeContext(push.scope_id), notify["definition_id"], webhook.PROVIDER
            )
    except ProviderError as exc:
        raise DeliveryError(exc.code, exc.message, retryable=False) from None
    data = {
        "job": {"id": str(push.job_id), "name": push.job_name},
        "run": {"id": str(push.run_id), "slot": push.slot},
        "meme": {"id": push.meme.id, "display_name": push.meme.display_name, "sha256": push.meme.sha256},
        "caption": push.caption,
        "conversation_id": str(push.conversation_id),
    }
    message_id = f"msg_{push.run_id.hex}"
    try:
        status = webhook.send(
            sessions,
            connection,
            "schedule.run",
            data,
            message_id=message_id,
            occurred_at=datetime.fromisoformat(push.slot),
            timeout=max(0.5, timeout),
        )
    except ProviderError as exc:
        raise DeliveryError(exc.code, exc.message, retryable=bool(getattr(exc, "retryable", True))) from None
    return {"type": "webhook", "status": status, "webhook_id": message_id}


def _channel(sessions: sessionmaker[Session], notify: dict[str, Any], push: Push) -> dict[str, Any]:
    """Queue the meme to the owner's binding of the channel (its delivery log takes it from there:
    pacing, retries, ``retry_after``, failures with the platform's reason)."""
    from mewdex.channels import delivery as channel_delivery

    try:
        with sessions.begin() as session:
            row = channel_delivery.send_meme(
                session,
                user_id=push.user_id,
                channel=notify["channel"],
                meme_id=UUID(push.meme.id),
                caption=push.caption,
                conversation_id=push.conversation_id,
                source="schedule",
            )
            delivery_id, task_id = str(row.delivery_id), row.task_id
    except DomainError as exc:
        raise DeliveryError(exc.code, exc.message, retryable=False) from None
    return {"type": "channel", "channel": notify["channel"], "delivery_id": delivery_id, "task_id": task_id}
