"""Collections: named, scope-local sets of memes (they own no files)."""

from __future__ import annotations

import unicodedata
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.db.models import MemeCollection, MemeCollectionItem, ScopeContext

MAX_NAME_CHARS = 100


def normalize_collection_name(value: str) -> str:
    """NFC, control characters removed, whitespace trimmed, ≤ 100 characters; ValueError("collection_name_invalid") if empty."""
    name = "".join(ch for ch in unicodedata.normalize("NFC", value) if unicodedata.category(ch) != "Cc").strip()
    name = name[:MAX_NAME_CHARS].strip()
    if not name:
        raise ValueError("collection_name_invalid")
    return name


def get_or_create(session: Session, scope: ScopeContext, name: str) -> MemeCollection:
    """The scope's collection called ``name`` (normalised), created if missing; safe under concurrency."""
    name = normalize_collection_name(name)
    session.execute(
        insert(MemeCollection)
        .values(scope_id=scope.scope_id, name=name)
        .on_conflict_do_nothing(index_elements=["scope_id", "name"])
    )
    return session.execute(
        select(MemeCollection).where(MemeCollection.scope_id == scope.scope_id, MemeCollection.name == name)
    ).scalar_one()


def add_items(session: Session, scope: ScopeContext, collection_id: UUID, meme_ids: list[UUID]) -> None:
    """Add memes to a collection; memes already in it are left as they are."""
    if meme_ids:
        session.execute(
            insert(MemeCollectionItem)
            .values([{"scope_id": scope.scope_id, "collection_id": collection_id, "meme_id": m} for m in meme_ids])
            .on_conflict_do_nothing()
        )
