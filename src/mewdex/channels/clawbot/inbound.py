"""ClawBot's inbound: the ``clawbot_polling`` task (:mod:`mewdex.channels.polling`) long-polls
every active binding at once (:func:`poll_once`), queues the messages and reopens the window with
the cursor in one transaction."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.channels import bindings
from mewdex.channels.base import Binding, Inbound
from mewdex.channels.clawbot import NAME
from mewdex.channels.clawbot.api import get_updates, parse_message
from mewdex.channels.platform import PlatformError
from mewdex.db.models import ChannelBinding
from mewdex.platform import owners

MAX_POLLERS = 16
log = logging.getLogger(__name__)


def _poll_binding(sessions: sessionmaker[Session], scope_id: str, view: Binding, seconds: float) -> int:
    """One long poll for one binding; the messages are queued, the window reopened and the cursor
    kept in one transaction. Returns how many messages came."""
    from mewdex.channels import inbound

    config = view.config
    try:
        raw, cursor = get_updates(config["base_url"], config["bot_token"], config.get("get_updates_buf") or "", seconds)
    except PlatformError as exc:
        with sessions.begin() as session:
            row = bindings.get(session, scope_id, NAME, lock=True)
            if row is not None and row.status == "active":
                bindings.update_config(session, row, {"poll_error": exc.code})
        log.warning("clawbot polling: %s", exc.code)
        return 0
    count = 0
    with sessions.begin() as session:
        row = bindings.get(session, scope_id, NAME, lock=True)
        if row is None or row.status != "active" or row.identity != view.identity:
            return 0  # revoked (or re-bound) while polling: nothing of this poll is taken in
        if not owners.owner_active(session, scope_id):
            return 0  # the owner was disabled while polling
        changes: dict[str, Any] = {"get_updates_buf": cursor, "poll_error": None}
        for message in filter(None, map(parse_message, raw)):
            if message.from_user_id != view.identity:
                continue
            if message.context_token:
                changes.update(
                    latest_context_token=message.context_token,
                    context_token_at=datetime.now(UTC).isoformat(),
                    sends_since_ctx=0,
                )
            if message.text or message.images:
                inbound.submit(
                    session,
                    Inbound(channel=NAME, sender=message.from_user_id, chat=message.from_user_id, text=message.text,
                            images=message.images, message_id=message.message_id or None,
                            scope_id=scope_id),  # the binding whose bot token polled it
                )  # fmt: skip
                count += 1
        bindings.update_config(session, row, changes)
    return count


def poll_once(sessions: sessionmaker[Session], seconds: float) -> int:
    """Long-poll every active ClawBot binding at once (one thread each, at most :data:`MAX_POLLERS`)."""
    from concurrent.futures import ThreadPoolExecutor

    with sessions.begin() as session:
        rows = session.execute(
            select(ChannelBinding).where(ChannelBinding.channel == NAME, ChannelBinding.status == "active")
        ).scalars()
        # A disabled owner's bindings are not polled (their poller stops; enabling resumes it).
        views = [(row.scope_id, bindings.view(row)) for row in rows if owners.owner_active(session, row.scope_id)]
    if not views:
        return 0
    with ThreadPoolExecutor(max_workers=min(MAX_POLLERS, len(views))) as pool:
        return sum(pool.map(lambda v: _poll_binding(sessions, v[0], v[1], seconds), views))
