"""Request dependencies: a database session and the caller's scope."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

from fastapi import Depends
from sqlalchemy.orm import Session

from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import ScopeContext
from mewdex.library.scopes import default_scope
from mewdex.web.errors import ApiError


def _transaction() -> Iterator[Session]:
    with get_sessionmaker().begin() as session:
        yield session


def db_session(session: Session = Depends(_transaction, scope="function")) -> Session:
    """The request's session; its transaction commits when the route returns, BEFORE the response is
    sent (FastAPI's default for ``yield`` dependencies is after it: a client that got its 2xx could
    read the old state, and a failed commit would go unreported)."""
    return session


def current_scope() -> ScopeContext:
    """The request's scope; single-user mode: the default local scope."""
    return default_scope()


def parse_id(value: str, what: str = "meme") -> UUID:
    """A path id as UUID; anything else answers 404 exactly like a missing id."""
    try:
        return UUID(value)
    except ValueError:
        raise ApiError(404, "not_found", f"{what} not found") from None
