"""``search_marks``: "this is the meme I wanted" marks a user puts on a search (issue 15, point 7).
Grouped by query they form the scope's query set for the eval gate (:mod:`mewdex.search.marks`)."""

from __future__ import annotations

import uuid
from datetime import datetime
from uuid import UUID

from sqlalchemy import (
    CheckConstraint,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from mewdex.db.models.base import Base, utcnow


class SearchMark(Base):
    """One mark: in ``scope_id``, the search ``query`` should find ``meme_id`` (``query_key``: the
    query folded for comparison — NFKC, case-folded, spaces collapsed)."""

    __tablename__ = "search_marks"
    mark_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    scope_id: Mapped[str] = mapped_column(String(128), ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False)
    meme_id: Mapped[UUID] = mapped_column(Uuid, nullable=False)
    query: Mapped[str] = mapped_column(Text, nullable=False)
    query_key: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, nullable=False, server_default=text("now()")
    )

    __table_args__ = (
        ForeignKeyConstraint(
            ["scope_id", "meme_id"], ["memes.scope_id", "memes.id"], ondelete="CASCADE", name="fk_search_marks_meme"
        ),
        UniqueConstraint("scope_id", "query_key", "meme_id", name="uq_search_marks_query_meme"),
        CheckConstraint("length(query) BETWEEN 1 AND 500", name="ck_search_marks_query"),
        Index("ix_search_marks_scope_created", "scope_id", "created_at"),
    )
