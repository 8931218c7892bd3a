"""Feedback of a scope's searches (issue 33): what each person picked, sent or skipped for a query.

* ``search_feedback_events``: one row per signal — in ``scope_id``, for the query ``query`` (as typed;
  ``query_key``: folded for comparison, as :func:`mewdex.search.marks.query_key`), the meme ``meme_id``
  was marked, copied, downloaded, shared, sent, kept or rejected (``kind``), from ``source``.
* ``search_feedback_queries``: the embedding of each distinct ``query_key`` of a scope, one row per
  model (the active text models when it was written); a per-(model, dimensions) partial HNSW index
  over half-precision copies finds a new query's nearest past queries
  (:func:`mewdex.search.vector_index.ensure_index`, table ``search_feedback_queries``).
* ``search_feedback_settings``: per scope (an account's personal scope), whether learning is on.

Never shared across scopes: every row carries its ``scope_id`` and goes with the scope.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from uuid import UUID

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    String,
    Text,
    Uuid,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from mewdex.db.models.base import Base, utcnow

FEEDBACK_KINDS = ("mark", "copy", "download", "share", "send", "kept", "rejected")
FEEDBACK_SOURCES = ("search", "meme", "assistant", "channel", "api", "cli")


def _in(values: tuple[str, ...]) -> str:
    return "(" + ",".join(f"'{v}'" for v in values) + ")"


class SearchFeedbackEvent(Base):
    """One feedback signal (module doc)."""

    __tablename__ = "search_feedback_events"
    event_id: Mapped[UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    scope_id: Mapped[str] = mapped_column(String(128), ForeignKey("scopes.id", ondelete="CASCADE"), nullable=False)
    meme_id: Mapped[UUID] = mapped_column(Uuid, nullable=False)
    query: Mapped[str] = mapped_column(Text, nullable=False)
    query_key: Mapped[str] = mapped_column(Text, nullable=False)
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    source: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, nullable=False, server_default=text("now()")
    )

    __table_args__ = (
        ForeignKeyConstraint(
            ["scope_id", "meme_id"],
            ["memes.scope_id", "memes.id"],
            ondelete="CASCADE",
            name="fk_search_feedback_events_meme",
        ),
        CheckConstraint("length(query) BETWEEN 1 AND 500", name="ck_search_feedback_events_query"),
        CheckConstraint(f"kind IN {_in(FEEDBACK_KINDS)}", name="ck_search_feedback_events_kind"),
        CheckConstraint(f"source IN {_in(FEEDBACK_SOURCES)}", name="ck_search_feedback_events_source"),
        Index("ix_search_feedback_events_scope_query", "scope_id", "query_key", "created_at"),
        Index("ix_search_feedback_events_scope_created", "scope_id", "created_at"),
        Index("ix_search_feedback_events_scope_meme", "scope_id", "meme_id"),
    )


class SearchFeedbackQuery(Base):
    """The embedding of one past query of a scope by one model (module doc)."""

    __tablename__ = "search_feedback_queries"
    scope_id: Mapped[str] = mapped_column(String(128), ForeignKey("scopes.id", ondelete="CASCADE"), primary_key=True)
    model: Mapped[str] = mapped_column(Text, primary_key=True)
    query_key: Mapped[str] = mapped_column(Text, primary_key=True)
    dimensions: Mapped[int] = mapped_column(Integer, nullable=False)
    embedding = mapped_column(Vector(), nullable=False)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, nullable=False, server_default=text("now()")
    )

    __table_args__ = (
        CheckConstraint(
            "dimensions > 0 AND vector_dims(embedding) = dimensions", name="ck_search_feedback_queries_dimensions"
        ),
    )


class SearchFeedbackSetting(Base):
    """Whether a scope learns from its feedback (no row: on)."""

    __tablename__ = "search_feedback_settings"
    scope_id: Mapped[str] = mapped_column(String(128), ForeignKey("scopes.id", ondelete="CASCADE"), primary_key=True)
    learning_enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True, server_default=text("true"))
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, nullable=False, server_default=text("now()")
    )
