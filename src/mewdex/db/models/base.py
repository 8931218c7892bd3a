"""Declarative base, shared column helpers and the scope context every library query needs."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import DateTime, MetaData
from sqlalchemy.orm import DeclarativeBase, mapped_column

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


@dataclass(frozen=True, slots=True)
class ScopeContext:
    """The validated scope (tenant) a service call acts in; never built from request bodies.

    Raises ValueError("scope_required") for empty ids and ValueError("scope_invalid") for ids
    longer than 128 characters, path fragments or control characters.
    """

    scope_id: str

    def __post_init__(self) -> None:
        if not isinstance(self.scope_id, str) or not self.scope_id.strip():
            raise ValueError("scope_required")
        value = self.scope_id.strip()
        if (
            len(value) > 128
            or value in {".", ".."}
            or "/" in value
            or "\\" in value
            or any(unicodedata.category(ch) == "Cc" for ch in value)
        ):
            raise ValueError("scope_invalid")
        object.__setattr__(self, "scope_id", value)
