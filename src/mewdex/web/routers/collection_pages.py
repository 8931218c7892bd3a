"""The collections pages: ``/collections`` (searched by name, sorted, in pages of 50) and
``/collections/{id}`` (one collection with its members in the order they were added, and the owner's
sharing section: accounts it is shared with, public links; sharing.js calls the API routes of
:mod:`mewdex.web.routers.collection_shares`).

Reads: :mod:`mewdex.library.collections`, the member cards of :mod:`mewdex.library.listing`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session

from mewdex.dto.scopes import ScopeContext
from mewdex.library import collections, listing, sharing
from mewdex.web.deps import current_scope, db_session
from mewdex.web.templating import not_found, parse_uuid, render

router = APIRouter(include_in_schema=False)
#: The expiries the sharing section offers for a new public link, in days (the API takes 1–365).
LINK_DAYS = (1, 7, 30, 90, 365)


def collections_overview(
    q: str = "",
    sort: str = "name",
    page: str = "1",
    created: str = "",
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
) -> dict[str, Any]:
    """Search (name contains ``q``), sort (name, size, updated) and pages of 50; ``created`` (an id) is the
    collection just created: confirmed and scrolled to."""
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
    }


@router.get("/collections")
def collections_page(request: Request, overview: dict[str, Any] = Depends(collections_overview)):
    return render(request, "collections.html", {"page": "collections", **overview})


def collection_detail(
    collection_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
) -> dict[str, Any] | None:
    """The collection and its members' cards; None when the scope has no such collection."""
    cid = parse_uuid(collection_id)
    if cid is None:
        return None
    try:
        row = collections.find(session, scope, cid)
    except collections.CollectionError:
        return None
    return {
        "collection": row,
        "members": listing.cards(session, scope, collections.members(session, scope, row.id)),
        # the owner's sharing section (this page is the owner's alone: collections.find is scoped)
        "shared_with": [{"email": email, "role": m.role} for m, email in sharing.list_members(session, scope, row.id)],
        "links": sharing.list_links(session, scope, row.id),
        "link_days": LINK_DAYS,
    }


@router.get("/collections/{collection_id}")
def collection_page(request: Request, detail: dict[str, Any] | None = Depends(collection_detail)):
    if detail is None:
        return not_found(request)
    return render(request, "collection.html", {"page": "collections", **detail})
