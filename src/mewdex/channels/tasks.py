"""The channels' task types and schedules, for the runtime: importing this module registers
``channel_delivery``, ``channel_inbound`` and every adapter module's own (e.g. ``telegram_polling``)."""

from __future__ import annotations

import importlib

from sqlalchemy import delete, update
from sqlalchemy.orm import Session

from mewdex.channels import delivery, inbound  # noqa: F401 - registers their task types
from mewdex.channels.base import ADAPTER_MODULES, load_adapters
from mewdex.db.models import ChannelBindCode, ChannelBinding, ChannelDelivery, User, utcnow
from mewdex.platform.users import on_account_change
from mewdex.queue.scheduler import Schedule

load_adapters()


def on_account(session: Session, user: User, event: str) -> None:
    """An account was disabled or deleted: its queued sends are cancelled and its OneBot sockets
    closed (in whichever process holds them); deleted, its bindings and bind codes go too. Enabled:
    nothing to do (every channel path asks ``owner_active``; bindings were kept)."""
    from mewdex.channels import onebot

    if event not in ("disabled", "deleted"):
        return
    session.execute(
        update(ChannelDelivery)
        .where(ChannelDelivery.scope_id == user.scope_id, ChannelDelivery.status.in_(("queued", "retrying")))
        .values(status="cancelled", error_code="channel_owner_disabled", updated_at=utcnow())
    )
    onebot.hang_up(session, user.scope_id)
    if event == "deleted":
        session.execute(delete(ChannelBinding).where(ChannelBinding.scope_id == user.scope_id))
        session.execute(delete(ChannelBindCode).where(ChannelBindCode.scope_id == user.scope_id))


on_account_change("channels", on_account)


def schedules() -> list[Schedule]:
    """The periodic work of the loaded adapter modules (a module's ``schedules()``, if it has one)."""
    found: list[Schedule] = []
    for name in ADAPTER_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        if hasattr(module, "schedules"):
            found += module.schedules()
    return found
