"""Scopes: the default local scope and scope rows with immutable storage namespaces (every layer
above ``db`` uses them; ``mewdex.library.scopes`` re-exports them)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.models import Scope, ScopeContext


def default_scope() -> ScopeContext:
    """The single-user scope (``MEWDEX_DEFAULT_SCOPE``, default ``local``)."""
    return ScopeContext(get_settings().default_scope)


def ensure_scope(session: Session, scope: ScopeContext) -> Scope:
    """The scope's row, created on first use with a fresh random ``storage_namespace`` that never changes."""
    session.execute(insert(Scope).values(id=scope.scope_id).on_conflict_do_nothing(index_elements=["id"]))
    return session.execute(select(Scope).where(Scope.id == scope.scope_id)).scalar_one()


def storage_namespace(session: Session, scope_id: str) -> str:
    """The scope's blob-store namespace (a UUID string) — the folder of all its blobs."""
    return str(session.execute(select(Scope.storage_namespace).where(Scope.id == scope_id)).scalar_one())
