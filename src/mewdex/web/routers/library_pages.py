"""The library page (``/library``: every meme as a grid or a list, filtered, sorted, paged, variants
collapsed on request) with its items fragment (``/ui/library``), the trash (``/trash``: restore, delete
for good, empty it; read with the API's :func:`mewdex.web.routers.trash.trash_page`) and the upload
page (``/upload``).

Reads: :func:`mewdex.library.listing.library_page` (template groups from
:func:`mewdex.search.variants.template_groups`), the menus from :mod:`mewdex.library.collections`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.dto.scopes import ScopeContext
from mewdex.library import collections, listing
from mewdex.search import variants
from mewdex.web.deps import current_scope, db_session
from mewdex.web.templating import parse_uuid, render

router = APIRouter(include_in_schema=False)


def library_items(
    name: str = "",
    state: str = "",
    collection: str = "",
    animated: bool = False,
    sort: str = "newest",
    view: str = "grid",
    page: int = 1,
    collapse: bool = False,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
) -> dict[str, Any]:
    """The page's and the fragment's items: ``lib`` (:class:`mewdex.library.listing.LibraryPage`),
    ``view`` (``grid`` | ``list``) and the ``filters`` as understood (an unknown collection filters nothing)."""
    result = listing.library_page(
        session,
        scope,
        name=name,
        state=state,
        collection_id=parse_uuid(collection),
        animated=animated,
        sort=sort,
        page=page,
        groups=variants.template_groups(session, scope.scope_id) if collapse else None,
    )
    return {
        "lib": result,
        "view": "list" if view == "list" else "grid",
        "filters": {
            "name": name,
            "state": state,
            "collection": collection,
            "animated": animated,
            "sort": sort if sort in listing.PAGE_SORTS else "newest",
            "collapse": collapse,
        },
    }


@router.get("/library")
def library(
    request: Request,
    items: dict[str, Any] = Depends(library_items),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    return render(
        request,
        "library.html",
        {
            "page": "library",
            **items,
            "collections": collections.overview(session, scope),
            "sorts": list(listing.PAGE_SORTS),
            "states": listing.MEME_STATES,
            "processing": listing.processing(session, scope),
        },
    )


@router.get("/ui/library")
def library_fragment(request: Request, items: dict[str, Any] = Depends(library_items)):
    return render(request, "partials/library_items.html", items)


@router.get("/trash")
def trash_view(
    request: Request,
    cursor: str | None = None,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    from mewdex.dto.cursor import CursorInvalid
    from mewdex.web.routers.trash import trash_page

    try:
        page = trash_page(session, scope, limit=60, cursor=cursor or None)
    except CursorInvalid:
        page = trash_page(session, scope, limit=60)
    return render(request, "trash.html", {"page": "trash", "trash": page})


@router.get("/upload")
def upload(request: Request, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    return render(
        request,
        "upload.html",
        {
            "page": "upload",
            "collections": collections.overview(session, scope),
            "max_upload_bytes": get_settings().max_upload_bytes,
        },
    )
