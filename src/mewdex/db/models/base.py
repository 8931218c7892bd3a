"""Declarative base and shared column helpers; re-exports the scope context (:mod:`mewdex.dto.scopes`)
every library query needs."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import DateTime, MetaData
from sqlalchemy.orm import DeclarativeBase, mapped_column

from mewdex.dto.scopes import ScopeContext  # noqa: F401 — re-exported: the services take it from here too

# Lanes whose tasks carry no resource dimension share this reserved resource pool.
GLOBAL_LANE_RESOURCE_KEY = "__global__"

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """Current time, timezone-aware UTC."""
    return datetime.now(UTC)


def created_at():
    return mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)


def updated_at():
    return mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow, nullable=False)


class Base(DeclarativeBase):
    """Base of every mewdex table (all PostgreSQL)."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
