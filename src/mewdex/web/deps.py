"""Request dependencies: a database session and the caller's scope."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

from sqlalchemy.orm import Session

from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import ScopeContext
from mewdex.library.scopes import default_scope
from mewdex.web.errors import ApiError


def db_session() -> Iterator[Session]:
    with get_sessionmaker().begin() as session:
        yield session


def current_scope() -> ScopeContext:
    """The request's scope; single-user mode: the default local scope."""
    return default_scope()


def parse_id(value: str, what: str = "meme") -> UUID:
    """A path id as UUID; anything else answers 404 exactly like a missing id."""
    try:
        return UUID(value)
    except ValueError:
        raise ApiError(404, "not_found", f"{what} not found") from None
