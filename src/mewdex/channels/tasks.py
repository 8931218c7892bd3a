"""The channels' task types and schedules, for the runtime: importing this module registers
``channel_delivery``, ``channel_inbound``, every adapter module's own and the pollers' (``telegram_polling``)."""

from __future__ import annotations

from sqlalchemy import delete, update
from sqlalchemy.orm import Session

from mewdex.channels import delivery, inbound, polling  # noqa: F401 - registers their task types
from mewdex.channels import registry as channel_registry
from mewdex.db.models import ChannelBindCode, ChannelBinding, ChannelDelivery, User, utcnow
from mewdex.platform.users import on_account_change
from mewdex.queue.scheduler import Schedule

channel_registry.load()
polling.register()


def on_account(session: Session, user: User, event: str) -> None:
    """An account was disabled or deleted: its queued sends are cancelled and its OneBot sockets
    closed (in whichever process holds them); deleted, its bindings and bind codes go too. Enabled:
    nothing to do (every channel path asks ``owner_active``; bindings were kept)."""
    if event not in ("disabled", "deleted"):
        return
    session.execute(
        update(ChannelDelivery)
        .where(ChannelDelivery.scope_id == user.scope_id, ChannelDelivery.status.in_(("queued", "retrying")))
        .values(status="cancelled", error_code="channel_owner_disabled", updated_at=utcnow())
    )
    for adapter in channel_registry.ADAPTERS.values():  # e.g. OneBot closes the scope's sockets
        adapter.owner_gone(session, user.scope_id)
    if event == "deleted":
        session.execute(delete(ChannelBinding).where(ChannelBinding.scope_id == user.scope_id))
        session.execute(delete(ChannelBindCode).where(ChannelBindCode.scope_id == user.scope_id))


on_account_change("channels", on_account)


def schedules() -> list[Schedule]:
    """The periodic work of the channels: the polls of the channels that poll (:mod:`.polling`)."""
    return polling.schedules()
