"""Per-bot state (``channel_bots``) and reusable upload ids (``channel_media_cache``), for adapters.

Each function takes ``sessions`` and owns one short transaction (adapters run inside tasks, with no
transaction of their own).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from mewdex.db.models import ChannelBot, ChannelMediaCache, utcnow


def bot(session: Session, channel: str, bot_id: str, *, lock: bool = False) -> ChannelBot:
    """The bot's state row (made on first use)."""
    session.execute(
        insert(ChannelBot).values(channel=channel, bot_id=bot_id, updated_at=utcnow()).on_conflict_do_nothing()
    )
    stmt = select(ChannelBot).where(ChannelBot.channel == channel, ChannelBot.bot_id == bot_id)
    if lock:
        stmt = stmt.with_for_update()
    return session.execute(stmt).scalar_one()


def cached_file_id(sessions: sessionmaker[Session], channel: str, bot_id: str, sha256: str, kind: str) -> str | None:
    """The platform's id of this content uploaded by this bot in form ``kind``, if still valid."""
    with sessions.begin() as session:
        row = session.get(ChannelMediaCache, (channel, bot_id, sha256, kind))
        if row is None or (row.expires_at is not None and row.expires_at <= utcnow()):
            return None
        return row.file_id


def remember_file_id(
    sessions: sessionmaker[Session],
    channel: str,
    bot_id: str,
    sha256: str,
    kind: str,
    file_id: str,
    expires_at: datetime | None = None,
) -> None:
    with sessions.begin() as session:
        stmt = insert(ChannelMediaCache).values(
            channel=channel,
            bot_id=bot_id,
            content_sha256=sha256,
            media_kind=kind,
            file_id=file_id,
            created_at=utcnow(),
            expires_at=expires_at,
        )
        session.execute(
            stmt.on_conflict_do_update(
                index_elements=["channel", "bot_id", "content_sha256", "media_kind"],
                set_={"file_id": file_id, "created_at": utcnow(), "expires_at": expires_at},
            )
        )


def forget_file_id(sessions: sessionmaker[Session], channel: str, bot_id: str, sha256: str, kind: str) -> None:
    with sessions.begin() as session:
        session.execute(
            delete(ChannelMediaCache).where(
                ChannelMediaCache.channel == channel,
                ChannelMediaCache.bot_id == bot_id,
                ChannelMediaCache.content_sha256 == sha256,
                ChannelMediaCache.media_kind == kind,
            )
        )
