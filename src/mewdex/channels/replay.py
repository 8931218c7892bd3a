"""The replay window of signed inbound requests (WeCom callbacks, OneBot HTTP POST events, Discord
interactions) and of Telegram webhook updates (their `update_id`, per bot).

A platform's signature proves who sent a request, not when: a captured request verifies again.
So a request whose timestamp is more than :data:`WINDOW_SECONDS` from now is refused
(:func:`check_time`), and one inside the window is taken in once only (:func:`remember`: the
``(realm, nonce)`` pair is kept in ``channel_inbound_nonces`` until the window has passed; expired
rows are pruned by the inserts that follow, so the table holds at most one window of traffic).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.channels.errors import ChannelError
from mewdex.db.models import ChannelInboundNonce, utcnow

WINDOW_SECONDS = 300
PRUNE_BATCH = 500


def check_time(timestamp: Any, now: float | None = None) -> None:
    """``channel_request_expired`` (401) unless ``timestamp`` (Unix seconds, int or digit string)
    is within :data:`WINDOW_SECONDS` of ``now``."""
    try:
        at = int(str(timestamp).strip())
    except ValueError:
        raise ChannelError("channel_request_expired", "the request carries no valid timestamp") from None
    if abs((time.time() if now is None else now) - at) > WINDOW_SECONDS:
        raise ChannelError(
            "channel_request_expired", f"the request's timestamp is more than {WINDOW_SECONDS // 60} minutes off"
        )


def remember(session: Session, realm: str, nonce: str) -> None:
    """Record ``(realm, nonce)`` for the window (in the caller's transaction);
    ``channel_request_replayed`` (409) when it is already there. Prunes up to
    :data:`PRUNE_BATCH` expired rows."""
    now = utcnow()
    session.execute(
        text(
            "DELETE FROM channel_inbound_nonces WHERE ctid IN "
            "(SELECT ctid FROM channel_inbound_nonces WHERE expires_at < :now LIMIT :n)"
        ),
        {"now": now, "n": PRUNE_BATCH},
    )
    added = session.execute(
        insert(ChannelInboundNonce)
        .values(realm=realm, nonce=nonce[:200], expires_at=now + timedelta(seconds=2 * WINDOW_SECONDS))
        .on_conflict_do_nothing()
        .returning(ChannelInboundNonce.nonce)
    ).scalar_one_or_none()
    if added is None:
        raise ChannelError("channel_request_replayed", "this request was received before")
