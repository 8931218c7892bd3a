"""Collections: named, scope-local, ordered sets of memes (they own no files).

Member order is the order memes were added (``meme_collection_items.added_at``, then meme id);
a batch added in one call keeps the order it was given in. Deleting a collection, or removing a
member, never deletes a meme.

The pages' reads: :func:`overview` (rows with member count and cover, searched, sorted, paged) with
:func:`count_matching`, and :func:`of_meme` (the collections a meme is in).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast
from uuid import UUID

from sqlalchemy import CursorResult, and_, delete, exists, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mewdex.db.models import (
    Meme,
    MemeCollection,
    MemeCollectionItem,
    ScopeContext,
    utcnow,
)
from mewdex.dto.errors import DomainError
from mewdex.library.listing import escape_like, live
from mewdex.library.names import strip_format_characters

MAX_NAME_CHARS = 100
MAX_ITEMS_PER_REQUEST = 1000


class CollectionError(DomainError):
    """A refused collection operation with a stable code (``not_found``, ``collection_name_invalid``,
    ``collection_name_taken``, ``memes_not_found``, ``invalid_request``)."""

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def normalize_collection_name(value: str) -> str:
    """NFC, control and format characters removed (:func:`~mewdex.library.names.strip_format_characters`),
    whitespace trimmed, ≤ 100 characters; ValueError("collection_name_invalid") if empty."""
    name = "".join(ch for ch in strip_format_characters(value) if unicodedata.category(ch) not in ("Cc", "Cs")).strip()
    name = name[:MAX_NAME_CHARS].strip()
    if not name:
        raise ValueError("collection_name_invalid")
    return name


def meme_summary(meme: Meme) -> dict:
    """The short form of a meme in collection listings and import reports (:class:`mewdex.dto.memes.MemeBrief`)."""
    from mewdex.library.listing import meme_brief

    return meme_brief(meme).model_dump()


def _checked_name(value: Any) -> str:
    if not isinstance(value, str):
        raise CollectionError("collection_name_invalid", "the name must be a string")
    try:
        return normalize_collection_name(value)
    except ValueError:
        raise CollectionError(
            "collection_name_invalid", f"the name needs visible characters (at most {MAX_NAME_CHARS})"
        ) from None


def get_or_create(session: Session, scope: ScopeContext, name: str) -> MemeCollection:
    """The scope's collection called ``name`` (normalised), created if missing; safe under concurrency."""
    name = normalize_collection_name(name)
    query = select(MemeCollection).where(MemeCollection.scope_id == scope.scope_id, MemeCollection.name == name)
    found = session.execute(query).scalar_one_or_none()
    if found is not None:  # the common case: a folder's later files
        return found
    session.execute(
        insert(MemeCollection)
        .values(scope_id=scope.scope_id, name=name)
        .on_conflict_do_nothing(index_elements=["scope_id", "name"])
    )
    return session.execute(query).scalar_one()


def add_items(session: Session, scope: ScopeContext, collection_id: UUID, meme_ids: list[UUID]) -> int:
    """Add memes (already checked to be the scope's) to a collection, after its current members and
    in the given order; memes already in it keep their place. Returns how many were added."""
    if not meme_ids:
        return 0
    unique = list(dict.fromkeys(meme_ids))
    last = session.execute(
        select(func.max(MemeCollectionItem.added_at)).where(
            MemeCollectionItem.scope_id == scope.scope_id, MemeCollectionItem.collection_id == collection_id
        )
    ).scalar_one_or_none()
    start = utcnow()
    if last is not None and last >= start:
        start = last + timedelta(microseconds=1)
    # One microsecond apart so the order survives (timestamptz keeps microseconds).
    rows = [
        {
            "scope_id": scope.scope_id,
            "collection_id": collection_id,
            "meme_id": m,
            "added_at": start + timedelta(microseconds=i),
        }
        for i, m in enumerate(unique)
    ]
    inserted = session.execute(
        insert(MemeCollectionItem).values(rows).on_conflict_do_nothing().returning(MemeCollectionItem.meme_id)
    ).all()
    return len(inserted)


def find(session: Session, scope: ScopeContext, collection_id: UUID, *, lock: bool = False) -> MemeCollection:
    """The scope's collection; CollectionError 404 ``not_found`` when missing or another scope's."""
    query = select(MemeCollection).where(MemeCollection.scope_id == scope.scope_id, MemeCollection.id == collection_id)
    if lock:
        query = query.with_for_update()
    collection = session.execute(query).scalar_one_or_none()
    if collection is None:
        raise CollectionError("not_found", "collection not found")
    return collection


def find_by_name_or_id(session: Session, scope: ScopeContext, ref: str) -> MemeCollection:
    """A collection by exact (normalised) name, else by id; CollectionError 404 when neither matches."""
    try:
        name = normalize_collection_name(ref)
    except ValueError:
        name = None
    if name is not None:
        found = session.execute(
            select(MemeCollection).where(MemeCollection.scope_id == scope.scope_id, MemeCollection.name == name)
        ).scalar_one_or_none()
        if found is not None:
            return found
    try:
        return find(session, scope, UUID(ref.strip()))
    except ValueError:
        raise CollectionError("not_found", f"no collection named {ref!r}") from None


def list_collections(session: Session, scope: ScopeContext) -> list[tuple[MemeCollection, int]]:
    """All the scope's collections by name, each with its member count."""
    counts = (
        select(MemeCollectionItem.collection_id, func.count().label("n"))
        .where(MemeCollectionItem.scope_id == scope.scope_id, _live_member())
        .group_by(MemeCollectionItem.collection_id)
        .subquery()
    )
    rows = session.execute(
        select(MemeCollection, func.coalesce(counts.c.n, 0))
        .outerjoin(counts, counts.c.collection_id == MemeCollection.id)
        .where(MemeCollection.scope_id == scope.scope_id)
        .order_by(MemeCollection.name, MemeCollection.id)
    ).all()
    return [(c, int(n)) for c, n in rows]


def count_items(session: Session, scope: ScopeContext, collection_id: UUID) -> int:
    return session.execute(
        select(func.count())
        .select_from(MemeCollectionItem)
        .where(
            MemeCollectionItem.scope_id == scope.scope_id,
            MemeCollectionItem.collection_id == collection_id,
            _live_member(),
        )
    ).scalar_one()


def create(session: Session, scope: ScopeContext, name: Any) -> MemeCollection:
    """A new empty collection; 422 ``collection_name_invalid``, 409 ``collection_name_taken``."""
    name = _checked_name(name)
    created = session.execute(
        insert(MemeCollection)
        .values(scope_id=scope.scope_id, name=name)
        .on_conflict_do_nothing(index_elements=["scope_id", "name"])
        .returning(MemeCollection.id)
    ).scalar_one_or_none()
    if created is None:
        raise CollectionError("collection_name_taken", f"a collection named {name!r} exists", {"name": name})
    return find(session, scope, created)


def create_unique(session: Session, scope: ScopeContext, name: str) -> MemeCollection:
    """A new collection called ``name``, or ``name (2)``, ``name (3)``… when that is taken."""
    base = _checked_name(name)
    for n in range(1, 10_000):
        suffix = "" if n == 1 else f" ({n})"
        candidate = base[: MAX_NAME_CHARS - len(suffix)].rstrip() + suffix
        created = session.execute(
            insert(MemeCollection)
            .values(scope_id=scope.scope_id, name=candidate)
            .on_conflict_do_nothing(index_elements=["scope_id", "name"])
            .returning(MemeCollection.id)
        ).scalar_one_or_none()
        if created is not None:
            return find(session, scope, created)
    raise CollectionError("collection_name_taken", f"no free name for {base!r}")


def rename(session: Session, scope: ScopeContext, collection_id: UUID, name: Any) -> MemeCollection:
    """Rename; 404 ``not_found``, 422 ``collection_name_invalid``, 409 ``collection_name_taken``."""
    collection = find(session, scope, collection_id, lock=True)
    name = _checked_name(name)
    if name == collection.name:
        return collection
    taken = session.execute(
        select(MemeCollection.id).where(MemeCollection.scope_id == scope.scope_id, MemeCollection.name == name)
    ).scalar_one_or_none()
    if taken is not None:
        raise CollectionError("collection_name_taken", f"a collection named {name!r} exists", {"name": name})
    collection.name = name
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError:  # renamed concurrently to the same name
        raise CollectionError("collection_name_taken", f"a collection named {name!r} exists", {"name": name}) from None
    return collection


def remove(session: Session, scope: ScopeContext, collection_id: UUID) -> None:
    """Delete the collection and its memberships (never the memes); 404 ``not_found``."""
    collection = find(session, scope, collection_id, lock=True)
    session.delete(collection)
    session.flush()


def members(session: Session, scope: ScopeContext, collection_id: UUID) -> list[Meme]:
    """The collection's memes in member order."""
    return list(
        session.execute(
            select(Meme)
            .join(
                MemeCollectionItem,
                (MemeCollectionItem.scope_id == Meme.scope_id) & (MemeCollectionItem.meme_id == Meme.id),
            )
            .where(
                MemeCollectionItem.scope_id == scope.scope_id,
                MemeCollectionItem.collection_id == collection_id,
                live(),
            )
            .order_by(MemeCollectionItem.added_at, MemeCollectionItem.meme_id)
        ).scalars()
    )


def add_members(session: Session, scope: ScopeContext, collection_id: UUID, meme_ids: Any) -> dict:
    """Add memes by id, all or nothing.

    Args:
        meme_ids: list of 1–1000 UUID strings.
    Returns:
        ``{"added": n, "already_members": m}``.
    Raises:
        CollectionError: 404 ``not_found`` (collection); 422 ``invalid_request`` (not a list of ids,
        details ``{"invalid": [...]}``); 422 ``memes_not_found`` (ids that are missing or another
        scope's, details ``{"missing": [...]}``) — nothing is added then.
    """
    collection = find(session, scope, collection_id, lock=True)
    if not isinstance(meme_ids, list) or not 1 <= len(meme_ids) <= MAX_ITEMS_PER_REQUEST:
        raise CollectionError("invalid_request", f"meme_ids must be a list of 1–{MAX_ITEMS_PER_REQUEST} ids")
    parsed: list[UUID] = []
    invalid: list[Any] = []
    for value in meme_ids:
        try:
            if not isinstance(value, str):
                raise ValueError(value)
            parsed.append(UUID(value))
        except ValueError:
            invalid.append(value if isinstance(value, (str, int, float)) else str(value))
    if invalid:
        raise CollectionError("invalid_request", "some meme ids are not ids", {"invalid": invalid})
    wanted = list(dict.fromkeys(parsed))
    found = set(
        session.execute(select(Meme.id).where(Meme.scope_id == scope.scope_id, Meme.id.in_(wanted), live())).scalars()
    )
    missing = [str(m) for m in wanted if m not in found]
    if missing:
        raise CollectionError("memes_not_found", f"{len(missing)} meme(s) not found", {"missing": missing})
    added = add_items(session, scope, collection.id, wanted)
    collection.updated_at = utcnow()
    return {"added": added, "already_members": len(wanted) - added}


def remove_member(session: Session, scope: ScopeContext, collection_id: UUID, meme_id: UUID) -> None:
    """Take a meme out of the collection (the meme stays); 404 ``not_found`` when it is not a member."""
    collection = find(session, scope, collection_id, lock=True)
    result = cast(
        CursorResult[Any],
        session.execute(
            delete(MemeCollectionItem).where(
                MemeCollectionItem.scope_id == scope.scope_id,
                MemeCollectionItem.collection_id == collection.id,
                MemeCollectionItem.meme_id == meme_id,
            )
        ),
    )
    if result.rowcount == 0:
        raise CollectionError("not_found", "the meme is not in this collection")
    collection.updated_at = utcnow()


# ------------------------------------------------------------------ the pages' reads


@dataclass
class CollectionRow:
    """A collection as the pages list it: its member count and its first member (``cover``, an id)."""

    id: str
    name: str
    count: int
    cover: str | None
    updated_at: Any


OVERVIEW_SORTS = ("name", "size", "updated")
OVERVIEW_PAGE = 50


def overview(
    session: Session,
    scope: ScopeContext,
    *,
    q: str | None = None,
    sort: str = "name",
    limit: int | None = None,
    offset: int = 0,
) -> list[CollectionRow]:
    """The scope's collections with member counts and the first member as cover: all of them by name
    (menus), or those whose name contains ``q`` (case-insensitive), sorted by ``sort`` (one of
    :data:`OVERVIEW_SORTS`: name A–Z, size largest first, updated newest first), ``limit`` from ``offset``."""
    count = (
        select(func.count())
        .where(
            MemeCollectionItem.scope_id == scope.scope_id,
            MemeCollectionItem.collection_id == MemeCollection.id,
            _live_member(),
        )
        .scalar_subquery()
    )
    cover = (
        select(MemeCollectionItem.meme_id)
        .where(
            MemeCollectionItem.scope_id == scope.scope_id,
            MemeCollectionItem.collection_id == MemeCollection.id,
            _live_member(),
        )
        .order_by(MemeCollectionItem.added_at, MemeCollectionItem.meme_id)
        .limit(1)
        .scalar_subquery()
    )
    order = {"size": (count.desc(),), "updated": (MemeCollection.updated_at.desc(),)}.get(sort, ())
    query = (
        select(MemeCollection, count, cover)
        .where(_name_filter(scope, q))
        .order_by(*order, func.lower(MemeCollection.name), MemeCollection.id)
        .offset(offset)
    )
    if limit is not None:
        query = query.limit(limit)
    rows = session.execute(query).all()
    return [CollectionRow(str(c.id), c.name, n, str(cv) if cv else None, c.updated_at) for c, n, cv in rows]


def count_matching(session: Session, scope: ScopeContext, q: str | None = None) -> int:
    """How many collections :func:`overview` finds for ``q``."""
    return session.execute(select(func.count()).select_from(MemeCollection).where(_name_filter(scope, q))).scalar_one()


def _live_member():
    """A membership whose meme is live (:func:`mewdex.library.listing.live`): the trash's memes keep
    their memberships (a restore brings them back) but are never counted, shown or a cover."""
    return exists().where(Meme.scope_id == MemeCollectionItem.scope_id, Meme.id == MemeCollectionItem.meme_id, live())


def _name_filter(scope: ScopeContext, q: str | None):
    condition = MemeCollection.scope_id == scope.scope_id
    if q:
        condition = and_(condition, MemeCollection.name.ilike(f"%{escape_like(q)}%", escape="\\"))
    return condition


def of_meme(session: Session, scope: ScopeContext, meme_id: UUID) -> list[MemeCollection]:
    """The collections the meme is in, by name (case-insensitive)."""
    return list(
        session.execute(
            select(MemeCollection)
            .join(
                MemeCollectionItem,
                and_(
                    MemeCollectionItem.scope_id == MemeCollection.scope_id,
                    MemeCollectionItem.collection_id == MemeCollection.id,
                ),
            )
            .where(MemeCollection.scope_id == scope.scope_id, MemeCollectionItem.meme_id == meme_id)
            .order_by(func.lower(MemeCollection.name))
        ).scalars()
    )
