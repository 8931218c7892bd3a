"""The collections pages: ``/collections`` (searched by name, sorted, in pages of 50) and
``/collections/{id}`` (one collection with its members in the order they were added, and the owner's
sharing section: accounts it is shared with, public links; sharing.js calls the API routes of
:mod:`mewdex.web.routers.collection_shares`). A member of a shared collection gets its read-only page
(search inside it, its owner's name, "use in my chat answers"; an editor adds memes of its own); the
collections list shows the collections shared with the caller's account.

Reads: :mod:`mewdex.library.collections`, the member cards of :mod:`mewdex.library.listing`.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session

from mewdex.dto.scopes import ScopeContext
from mewdex.dto.search import MAX_QUERY_CHARS, MAX_RESULTS
from mewdex.library import collections, listing, sharing
from mewdex.search import service as search_service
from mewdex.web.deps import current_scope, current_user_id, db_session
from mewdex.web.templating import not_found, parse_uuid, render

router = APIRouter(include_in_schema=False)
#: The expiries the sharing section offers for a new public link, in days (the API takes 1–365).
LINK_DAYS = (1, 7, 30, 90, 365)
#: An editor's page offers this many memes of its own library to add (newest first, by name).
OWN_PICK = 12


def collections_overview(
    q: str = "",
    sort: str = "name",
    page: str = "1",
    created: str = "",
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
    user_id: UUID | None = Depends(current_user_id),
) -> dict[str, Any]:
    """Search (name contains ``q``), sort (name, size, updated) and pages of 50; ``created`` (an id) is the
    collection just created: confirmed and scrolled to. ``shared``: the collections shared with the
    caller's account (``collection``, ``role``, ``owner`` email, ``count``), by name."""
    q = q.strip()[:100]
    sort = sort if sort in collections.OVERVIEW_SORTS else "name"
    total = collections.count_matching(session, scope, q or None)
    pages = max(1, -(-total // collections.OVERVIEW_PAGE))
    page_number = min(max(1, int(page) if page.isdigit() and len(page) < 7 else 1), pages)
    rows = collections.overview(
        session,
        scope,
        q=q or None,
        sort=sort,
        limit=collections.OVERVIEW_PAGE,
        offset=(page_number - 1) * collections.OVERVIEW_PAGE,
    )
    return {
        "collections": rows,
        "q": q,
        "sort": sort,
        "sorts": collections.OVERVIEW_SORTS,
        "page_number": page_number,
        "pages": pages,
        "total": total,
        "created": next((c for c in rows if c.id == created), None),
        "shared": [
            _shared_row(session, s.collection, s.role, s.owner_email) for s in sharing.shared_with(session, user_id)
        ],
    }


def _shared_row(session: Session, collection, role: str, owner: str | None) -> dict[str, Any]:
    """A collection shared with the caller as the list shows it: role, owner, count and cover (the
    first member's thumbnail through the member route)."""
    rows = collections.overview(session, ScopeContext(collection.scope_id), q=collection.name)
    row = next((r for r in rows if r.id == str(collection.id)), None)
    cover = sharing.member_media_path(collection.id, row.cover) + "/thumbnail" if row and row.cover else None
    return {"collection": collection, "role": role, "owner": owner, "count": row.count if row else 0, "cover": cover}


@router.get("/collections")
def collections_page(request: Request, overview: dict[str, Any] = Depends(collections_overview)):
    return render(request, "collections.html", {"page": "collections", **overview})


def collection_detail(
    collection_id: str,
    q: str = "",
    mine: str = "",
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
    user_id: UUID | None = Depends(current_user_id),
) -> dict[str, Any] | None:
    """The collection as the caller may see it (:func:`mewdex.library.sharing.access`); None (the 404
    page) for anyone else. The owner's: its members' cards and the sharing section. A member's
    (``role`` viewer/editor): read-only, with the owner's email, the collection's memes or those a
    search ``q`` finds inside it (their media through the member routes), the member's "use in my
    chat answers" choice and, for an editor, memes of its own library whose name contains ``mine``
    to add."""
    cid = parse_uuid(collection_id)
    if cid is None:
        return None
    try:
        granted = sharing.access(session, scope, user_id, cid)
    except collections.CollectionError:
        return None
    row = granted.collection
    if granted.role == "owner":
        return {
            "role": "owner",
            "collection": row,
            "members": listing.cards(session, scope, collections.members(session, scope, row.id)),
            "shared_with": [
                {"email": email, "role": m.role} for m, email in sharing.list_members(session, scope, row.id)
            ],
            "links": sharing.list_links(session, scope, row.id),
            "link_days": LINK_DAYS,
        }
    query = q.strip()[:MAX_QUERY_CHARS]
    memes = collections.members(session, granted.owner, row.id)
    if query:
        found = search_service.search_collection(session, granted.owner, row.id, query, MAX_RESULTS, member=True)
        by_id = {str(m.id): m for m in memes}
        memes = [by_id[hit.id] for hit in found.results if hit.id in by_id]
    detail: dict[str, Any] = {
        "role": granted.role,
        "collection": row,
        "owner_email": sharing.owner_email(session, granted.owner.scope_id),
        "use_in_chat": granted.use_in_chat,
        "items": [{"meme": m, "src": sharing.member_media_path(row.id, m.id)} for m in memes],
        "total": collections.count_items(session, granted.owner, row.id),
        "q": query,
        "mine": mine.strip()[:100],
    }
    if granted.role == "editor":
        detail["own_cards"] = listing.library_page(session, scope, name=detail["mine"], per_page=OWN_PICK).cards
    return detail


@router.get("/collections/{collection_id}")
def collection_page(request: Request, detail: dict[str, Any] | None = Depends(collection_detail)):
    if detail is None:
        return not_found(request)
    return render(request, "collection.html", {"page": "collections", **detail})
