"""Sharing collections (issue 43): members (accounts a collection is shared with) and public links.

THE rule of who may read a collection is :func:`access`: its owner's scope, or an account that is
one of its members (``viewer`` reads; ``editor`` also adds). Every read of a shared collection, of its
items' media and of a search inside it goes through it; anyone else gets the same 404 ``not_found``
as for a collection that does not exist.

A public link (:func:`create_link`) is a random token (``secrets.token_urlsafe(32)``) of which only
the sha256 is kept (:func:`mewdex.platform.tokens.digest`, like API tokens): the URL is shown once,
a link is never listed with its token, and :func:`open_link` answers an unknown, expired or deleted
token with the one 404 ``not_found``. What a link shows is only its collection's live memes
(:func:`link_meme` is the one check of a meme behind a link). :func:`check_public_rate` limits the
requests to links per client address.

A member may choose that its assistant answers from a collection shared with it
(:func:`set_use_in_chat`); :func:`chat_pools` is what the assistant reads at every search.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple
from uuid import UUID

from sqlalchemy import and_, delete, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from mewdex.config import get_settings
from mewdex.db.models import (
    CollectionLink,
    CollectionMember,
    Meme,
    MemeCollection,
    MemeCollectionItem,
    ScopeContext,
    User,
    utcnow,
)
from mewdex.library.collections import MAX_ITEMS_PER_REQUEST, CollectionError
from mewdex.library.listing import find, live
from mewdex.library.memes import add_image
from mewdex.library.names import saved_name
from mewdex.library.scopes import storage_namespace
from mewdex.platform import sessions as platform_sessions
from mewdex.platform.owners import owner_active
from mewdex.platform.tokens import digest
from mewdex.platform.users import find_by_email

ROLES = ("viewer", "editor")
LINK_DAYS_MIN, LINK_DAYS_MAX, LINK_DAYS_DEFAULT = 1, 365, 30
MAX_LINKS_PER_COLLECTION = 50
MAX_MEMBERS_PER_COLLECTION = 200
PUBLIC_RATE_WINDOW_SECONDS = 60
NOT_FOUND = "collection not found"


@dataclass(frozen=True)
class Access:
    """A caller's access to a collection: the collection, its owner's scope (every read of its items
    runs in it), the caller's ``role`` (``owner``, ``editor`` or ``viewer``) and, for a member, whether
    it chose to have its assistant answer from the collection (``use_in_chat``)."""

    collection: MemeCollection
    owner: ScopeContext
    role: str
    use_in_chat: bool = False


def _memberships():
    """Collections with their members and the members' accounts (one row a membership): what
    :func:`access` and :func:`chat_pools` narrow."""
    return (
        select(MemeCollection, CollectionMember)
        .join(
            CollectionMember,
            and_(
                CollectionMember.scope_id == MemeCollection.scope_id,
                CollectionMember.collection_id == MemeCollection.id,
            ),
        )
        .join(User, User.user_id == CollectionMember.user_id)
    )


def access(
    session: Session, scope: ScopeContext, user_id: UUID | None, collection_id: UUID, *, need: str = "read"
) -> Access:
    """The one check of a collection read or write: the caller (``scope``, and ``user_id`` when it is an
    account) is its owner, or an enabled member with enough of a role for ``need`` (``read``: any
    member; ``edit``: an editor; ``owner``: the owner only) of an enabled owner's collection. Raises
    CollectionError 404 ``not_found`` for everyone else (exactly as for a collection that does not
    exist), a disabled member or a disabled owner's members included."""
    own = session.execute(
        select(MemeCollection).where(MemeCollection.scope_id == scope.scope_id, MemeCollection.id == collection_id)
    ).scalar_one_or_none()
    if own is not None:
        return Access(own, scope, "owner")
    if user_id is not None and need != "owner":
        found = session.execute(
            _memberships().where(
                MemeCollection.id == collection_id, CollectionMember.user_id == user_id, ~User.disabled
            )
        ).first()
        if (
            found is not None
            and (need == "read" or found[1].role == "editor")
            and owner_active(session, found[0].scope_id)  # a disabled owner shares nothing
        ):
            collection, member = found
            return Access(collection, ScopeContext(collection.scope_id), member.role, member.use_in_chat)
    raise CollectionError("not_found", NOT_FOUND)


def member_media_path(collection_id: UUID | str, meme_id: UUID | str) -> str:
    """The URL path of a shared collection's meme as a member reads it (never the owner's ``/media/{id}``):
    ``/api/v1/collections/{collection_id}/media/{meme_id}``."""
    return f"{MEMBER_MEDIA_PREFIX}{collection_id}/media/{meme_id}"


MEMBER_MEDIA_PREFIX = "/api/v1/collections/"


def member_media_collection(path: str | None) -> str | None:
    """The collection id of a :func:`member_media_path` (None for any other path, e.g. ``/media/{id}``)."""
    if not path or not path.startswith(MEMBER_MEDIA_PREFIX):
        return None
    collection_id, _, rest = path[len(MEMBER_MEDIA_PREFIX) :].partition("/media/")
    return collection_id if rest else None


def collection_meme(session: Session, granted: Access, meme_id: UUID) -> Meme:
    """The live meme ``meme_id`` when it is in the collection of ``granted``; 404 ``not_found`` otherwise."""
    meme = session.execute(
        select(Meme)
        .join(
            MemeCollectionItem,
            and_(MemeCollectionItem.scope_id == Meme.scope_id, MemeCollectionItem.meme_id == Meme.id),
        )
        .where(
            MemeCollectionItem.scope_id == granted.owner.scope_id,
            MemeCollectionItem.collection_id == granted.collection.id,
            Meme.id == meme_id,
            live(),
        )
    ).scalar_one_or_none()
    if meme is None:
        raise CollectionError("not_found", "meme not found")
    return meme


def collection_meme_ids(session: Session, granted: Access) -> set[UUID]:
    """The ids of the collection's live memes (to keep a search inside it, whatever the index says)."""
    return set(
        session.execute(
            select(MemeCollectionItem.meme_id)
            .join(Meme, and_(Meme.scope_id == MemeCollectionItem.scope_id, Meme.id == MemeCollectionItem.meme_id))
            .where(
                MemeCollectionItem.scope_id == granted.owner.scope_id,
                MemeCollectionItem.collection_id == granted.collection.id,
                live(),
            )
        ).scalars()
    )


def owner_email(session: Session, scope_id: str) -> str | None:
    """The email of the account owning ``scope_id`` (None in single-user mode)."""
    return session.execute(select(User.email).where(User.scope_id == scope_id)).scalar_one_or_none()


# ------------------------------------------------------------------ members


class SharedCollection(NamedTuple):
    """A collection shared with an account, as :func:`shared_with` lists it."""

    collection: MemeCollection
    role: str
    owner_email: str | None
    use_in_chat: bool


def shared_with(session: Session, user_id: UUID | None) -> list[SharedCollection]:
    """The collections shared with the account: collection, role, owner's email and the member's "use in
    my chat answers" choice, by name (none of a disabled owner: :func:`access` refuses them)."""
    if user_id is None:
        return []
    rows = session.execute(
        select(MemeCollection, CollectionMember.role, User.email, CollectionMember.use_in_chat)
        .join(
            CollectionMember,
            and_(
                CollectionMember.scope_id == MemeCollection.scope_id,
                CollectionMember.collection_id == MemeCollection.id,
            ),
        )
        .outerjoin(User, User.scope_id == MemeCollection.scope_id)
        .where(CollectionMember.user_id == user_id)
        .order_by(MemeCollection.name, MemeCollection.id)
    ).all()
    return [SharedCollection(*row) for row in rows if owner_active(session, row[0].scope_id)]


def set_use_in_chat(
    session: Session, scope: ScopeContext, user_id: UUID | None, collection_id: UUID, on: Any
) -> Access:
    """The member's choice that its assistant answers from the collection shared with it (``on``: true
    or false); the :class:`Access` after it. 404 ``not_found`` (no member of it: the owner's own
    collections are its library already), 422 ``invalid_request`` (``on`` not a boolean)."""
    if not isinstance(on, bool):
        raise CollectionError("invalid_request", "use_in_chat is true or false")
    granted = access(session, scope, user_id, collection_id)
    if granted.role == "owner":
        raise CollectionError("not_found", NOT_FOUND)
    session.execute(
        update(CollectionMember)
        .where(CollectionMember.collection_id == granted.collection.id, CollectionMember.user_id == user_id)
        .values(use_in_chat=on)
    )
    return Access(granted.collection, granted.owner, granted.role, on)


def chat_pools(session: Session, scope_id: str) -> list[Access]:
    """The shared collections the account of ``scope_id`` chose for its assistant (``use_in_chat``), as
    :class:`Access` (role ``viewer``/``editor``), by name; none for a disabled account or of a disabled
    owner. Read at every search, so a removed membership or a changed choice counts at once."""
    rows = session.execute(
        _memberships()
        .where(User.scope_id == scope_id, ~User.disabled, CollectionMember.use_in_chat)
        .order_by(MemeCollection.name, MemeCollection.id)
    ).all()
    return [
        Access(c, ScopeContext(c.scope_id), m.role, True)
        for c, m in rows
        if c.scope_id != scope_id and owner_active(session, c.scope_id)
    ]


def sendable_meme(session: Session, scope_id: str, meme_id: UUID) -> tuple[Meme, ScopeContext] | None:
    """The live meme ``meme_id`` the account of ``scope_id`` may send (a channel delivery of what its
    assistant picked): its own, or one of a shared collection it chose for its chats now
    (:func:`chosen_meme`), with the scope whose blob namespace holds the file; None otherwise (also
    once the membership or the choice has ended)."""
    own = find(session, ScopeContext(scope_id), meme_id)
    if own is not None:
        return own, ScopeContext(scope_id)
    shared = chosen_meme(session, scope_id, meme_id)
    return (shared[0], shared[1].owner) if shared is not None else None


def chosen_meme(session: Session, scope_id: str, meme_id: UUID) -> tuple[Meme, Access] | None:
    """The live meme ``meme_id`` of a shared collection the account of ``scope_id`` chose for its chats
    now (:func:`chat_pools`), with that collection's access (its ``owner`` holds the file); None when
    no chosen collection holds it."""
    for granted in chat_pools(session, scope_id):
        try:
            return collection_meme(session, granted, meme_id), granted
        except CollectionError:
            continue
    return None


def set_member(session: Session, scope: ScopeContext, collection_id: UUID, email: str, role: Any) -> CollectionMember:
    """Share the scope's collection with the account of ``email`` as ``role`` (or change its role).
    404 ``not_found`` (collection, or no such account — never says which emails exist), 422
    ``role_invalid``, 422 ``member_is_owner`` (the owner's own account), 409 ``too_many_members``."""
    granted = access(session, scope, None, collection_id, need="owner")
    if role not in ROLES:
        raise CollectionError("role_invalid", "role is viewer or editor", {"allowed": list(ROLES)})
    user = find_by_email(session, email) if isinstance(email, str) else None
    if user is None or user.disabled:
        raise CollectionError("not_found", "no account with that email")
    if user.scope_id == scope.scope_id:
        raise CollectionError("member_is_owner", "the collection is already yours")
    count = len(list_members(session, scope, collection_id))
    if count >= MAX_MEMBERS_PER_COLLECTION:
        raise CollectionError("too_many_members", f"at most {MAX_MEMBERS_PER_COLLECTION} members per collection")
    session.execute(
        insert(CollectionMember)
        .values(scope_id=scope.scope_id, collection_id=granted.collection.id, user_id=user.user_id, role=role)
        .on_conflict_do_update(index_elements=["collection_id", "user_id"], set_={"role": role})
    )
    return session.execute(
        select(CollectionMember).where(
            CollectionMember.collection_id == granted.collection.id, CollectionMember.user_id == user.user_id
        )
    ).scalar_one()


def list_members(session: Session, scope: ScopeContext, collection_id: UUID) -> list[tuple[CollectionMember, str]]:
    """The collection's members with their emails, by email (owner only; 404 ``not_found``)."""
    granted = access(session, scope, None, collection_id, need="owner")
    rows = session.execute(
        select(CollectionMember, User.email)
        .join(User, User.user_id == CollectionMember.user_id)
        .where(CollectionMember.scope_id == scope.scope_id, CollectionMember.collection_id == granted.collection.id)
        .order_by(User.email)
    ).all()
    return [(m, email or "") for m, email in rows]


def remove_member(session: Session, scope: ScopeContext, collection_id: UUID, email: str) -> None:
    """End a share at once (the next request of that account is a 404); 404 ``not_found`` when the
    collection is not the scope's or the email is no member."""
    granted = access(session, scope, None, collection_id, need="owner")
    user = find_by_email(session, email) if isinstance(email, str) else None
    deleted = None
    if user is not None:
        deleted = session.execute(
            delete(CollectionMember)
            .where(CollectionMember.collection_id == granted.collection.id, CollectionMember.user_id == user.user_id)
            .returning(CollectionMember.user_id)
        ).first()
    if deleted is None:
        raise CollectionError("not_found", "no such member")


def editor_add(
    sessions: sessionmaker[Session],
    store,
    scope: ScopeContext,
    user_id: UUID | None,
    collection_id: UUID,
    meme_ids: Any,
) -> dict:
    """An editor adds memes of its own library to a collection shared with it: each is copied into the
    owner's library through the normal add path (:func:`mewdex.library.memes.add_image`: the owner's
    quota, duplicates reused, processing) with ``provenance.origin`` saying where it came from, and
    added to the collection. ``meme_ids``: 1–1000 ids of the caller's live memes.

    Returns ``{"added", "already_members", "items": [{"source_id", "status", "meme_id", "error"}]}``.
    Raises CollectionError 404 ``not_found`` (not an editor of it), 422 ``invalid_request`` /
    ``memes_not_found`` (nothing is copied then)."""
    with sessions.begin() as session:
        granted = access(session, scope, user_id, collection_id, need="edit")
        wanted = _meme_ids(meme_ids)
        found = {
            m.id: m
            for m in session.execute(
                select(Meme).where(Meme.scope_id == scope.scope_id, Meme.id.in_(wanted), live())
            ).scalars()
        }
        missing = [str(m) for m in wanted if m not in found]
        if missing:
            raise CollectionError("memes_not_found", f"{len(missing)} meme(s) not found", {"missing": missing})
        namespace = storage_namespace(session, scope.scope_id)
        sources = [(m, found[m].storage_key, saved_name(found[m].display_name, found[m].extension)) for m in wanted]
        before = collection_meme_ids(session, granted)
    items = []
    for source_id, key, filename in sources:
        with store.open(namespace, key) as handle:
            data = handle.read()
        origin = {
            "via": "shared_collection",
            "collection_id": str(granted.collection.id),
            "editor_user_id": str(user_id),
            "source_meme_id": str(source_id),
        }
        result = add_image(
            sessions,
            store,
            granted.owner,
            data,
            filename=filename,
            provenance={"origin": origin},
            collection_ids=[granted.collection.id],
        )
        items.append(
            {"source_id": str(source_id), "status": result.status, "meme_id": result.meme_id, "error": result.error}
        )
    landed = [UUID(i["meme_id"]) for i in items if i["meme_id"]]
    added = len({m for m in landed if m not in before})
    return {"added": added, "already_members": len(set(landed)) - added, "items": items}


def _meme_ids(values: Any) -> list[UUID]:
    if not isinstance(values, list) or not 1 <= len(values) <= MAX_ITEMS_PER_REQUEST:
        raise CollectionError("invalid_request", f"meme_ids must be a list of 1–{MAX_ITEMS_PER_REQUEST} ids")
    try:
        parsed = [UUID(v) for v in values if isinstance(v, str)]
    except ValueError:
        parsed = []
    if len(parsed) != len(values):
        raise CollectionError("invalid_request", "some meme ids are not ids")
    return list(dict.fromkeys(parsed))


# ------------------------------------------------------------------ public links


def create_link(
    session: Session, scope: ScopeContext, collection_id: UUID, expires_in_days: Any = None, show_owner: Any = False
) -> tuple[CollectionLink, str]:
    """A public link to the scope's collection: ``(row, token)``; the token is returned only here.
    ``expires_in_days`` 1–365 (default 30); ``show_owner``: the gallery names the owner (default no).
    404 ``not_found``, 422 ``expiry_invalid``, 409 ``too_many_links``."""
    granted = access(session, scope, None, collection_id, need="owner")
    days = LINK_DAYS_DEFAULT if expires_in_days is None else expires_in_days
    if isinstance(days, bool) or not isinstance(days, int) or not LINK_DAYS_MIN <= days <= LINK_DAYS_MAX:
        raise CollectionError(
            "expiry_invalid",
            f"expires_in_days is a whole number from {LINK_DAYS_MIN} to {LINK_DAYS_MAX}",
            {"min": LINK_DAYS_MIN, "max": LINK_DAYS_MAX},
        )
    if not isinstance(show_owner, bool):
        raise CollectionError("invalid_request", "show_owner is true or false")
    if len(list_links(session, scope, collection_id)) >= MAX_LINKS_PER_COLLECTION:
        raise CollectionError("too_many_links", f"at most {MAX_LINKS_PER_COLLECTION} live links per collection")
    token = secrets.token_urlsafe(32)
    row = CollectionLink(
        scope_id=scope.scope_id,
        collection_id=granted.collection.id,
        token_hash=digest(token),
        show_owner=show_owner,
        expires_at=utcnow() + timedelta(days=days),
    )
    session.add(row)
    session.flush()
    return row, token


def list_links(session: Session, scope: ScopeContext, collection_id: UUID) -> list[CollectionLink]:
    """The collection's unexpired links, newest first (no tokens: only their hashes are kept)."""
    granted = access(session, scope, None, collection_id, need="owner")
    return list(
        session.execute(
            select(CollectionLink)
            .where(
                CollectionLink.scope_id == scope.scope_id,
                CollectionLink.collection_id == granted.collection.id,
                CollectionLink.expires_at > utcnow(),
            )
            .order_by(CollectionLink.created_at.desc(), CollectionLink.id)
        ).scalars()
    )


def delete_link(session: Session, scope: ScopeContext, collection_id: UUID, link_id: UUID) -> None:
    """Delete a link: its URL answers 404 from the next request on; 404 ``not_found``."""
    granted = access(session, scope, None, collection_id, need="owner")
    deleted = session.execute(
        delete(CollectionLink)
        .where(
            CollectionLink.scope_id == scope.scope_id,
            CollectionLink.collection_id == granted.collection.id,
            CollectionLink.id == link_id,
        )
        .returning(CollectionLink.id)
    ).first()
    if deleted is None:
        raise CollectionError("not_found", "link not found")


@dataclass(frozen=True)
class PublicView:
    """What a public link opens: the collection (as :class:`Access` with role ``link``), whether and how
    the owner is named (``owner_name``: None unless the owner chose to show it) and when it ends."""

    granted: Access
    owner_name: str | None
    expires_at: datetime


def open_link(session: Session, token: str) -> PublicView:
    """The collection behind a link token; CollectionError 404 ``not_found`` for a token that is
    unknown, expired or deleted, or whose owner is disabled (the same answer for each)."""
    if not 20 <= len(token) <= 100:
        raise CollectionError("not_found", "link not found")
    found = session.execute(
        select(CollectionLink, MemeCollection)
        .join(
            MemeCollection,
            and_(MemeCollection.scope_id == CollectionLink.scope_id, MemeCollection.id == CollectionLink.collection_id),
        )
        .where(CollectionLink.token_hash == digest(token), CollectionLink.expires_at > utcnow())
    ).first()
    if found is None or not owner_active(session, found[0].scope_id):  # a disabled owner shares nothing
        raise CollectionError("not_found", "link not found")
    link, collection = found
    name = None
    if link.show_owner:
        owner = session.execute(select(User).where(User.scope_id == link.scope_id)).scalar_one_or_none()
        if owner is not None:
            name = owner.name or owner.user_name or (owner.email or "").split("@")[0] or None
    return PublicView(Access(collection, ScopeContext(collection.scope_id), "link"), name, link.expires_at)


def check_public_rate(client_ip: str) -> None:
    """Count one request to a public link from ``client_ip`` (per
    :func:`mewdex.platform.sessions.ip_bucket`, in the count every API process shares:
    :func:`mewdex.platform.sessions.count_attempt`); 429 ``rate_limited`` past
    ``MEWDEX_SHARE_MAX_PER_MINUTE`` a minute (unknown tokens count too: no guessing)."""
    key = f"share:{platform_sessions.ip_bucket(client_ip)}"
    wait = platform_sessions.count_attempt(key, get_settings().share_max_per_minute, PUBLIC_RATE_WINDOW_SECONDS)
    if wait:
        raise CollectionError(
            "rate_limited",
            "too many requests to shared links from this address; try again in a minute",
            {"retry_after_seconds": int(wait)},
            headers={"Retry-After": str(int(wait))},
        )
