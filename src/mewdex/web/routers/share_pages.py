"""The public gallery of a collection link (issue 43): ``GET /s/{token}`` (server-rendered, works
without JavaScript; ``?q=`` searches inside the collection), ``GET /s/{token}/media/{meme_id}`` (a
meme's file; ``?download=1`` saves it) and ``GET /s/{token}/media/{meme_id}/thumbnail`` (its still
thumbnail, what the grid shows: the original is sent only when a meme is opened or downloaded). No
sign-in: the token is the only credential, checked by :func:`mewdex.library.sharing.open_link` on
every request (an unknown, expired or deleted token is the same 404), and only the collection's live
memes are ever shown or served. Every request counts against the per-address limit
(:func:`mewdex.library.sharing.check_public_rate`)."""

from __future__ import annotations

from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from mewdex.dto.search import MAX_QUERY_CHARS, MAX_RESULTS
from mewdex.library import collections, sharing
from mewdex.search import service
from mewdex.web.deps import db_session, parse_id
from mewdex.web.routers.memes import file_response, thumbnail_response
from mewdex.web.security import client_ip
from mewdex.web.templating import render

router = APIRouter(include_in_schema=False)

#: A link's page is nobody's to index (its token never leaves in a Referer: the site's
#: ``Referrer-Policy: same-origin``, and the page's own ``no-referrer``).
PRIVATE_HEADERS = {"X-Robots-Tag": "noindex, nofollow"}


def _open(request: Request, session: Session, token: str) -> sharing.PublicView:
    sharing.check_public_rate(client_ip(request))
    return sharing.open_link(session, token)


@router.get("/s/{token}")
def gallery(
    token: str,
    request: Request,
    q: str = Query("", max_length=MAX_QUERY_CHARS),
    session: Session = Depends(db_session),
):
    """The collection's memes in member order, or those matching ``q`` (the search service over the
    owner's library, kept to this collection; nothing is learned and no provider is called)."""
    view = _open(request, session, token)
    granted = view.granted
    query = q.strip()
    if query:
        found = service.search_collection(
            session, granted.owner, granted.collection.id, query, MAX_RESULTS, member=True
        )
        ids = [UUID(hit.id) for hit in found.results]
        by_id = {m.id: m for m in collections.members(session, granted.owner, granted.collection.id)}
        memes = [by_id[i] for i in ids if i in by_id]
    else:
        memes = collections.members(session, granted.owner, granted.collection.id)
    context = {
        "page": "shared",
        "token": token,
        "collection_name": granted.collection.name,
        "owner_name": view.owner_name,
        "memes": memes,
        "q": query,
        "expires_at": view.expires_at,
    }
    response = render(request, "shared.html", context)
    response.headers.update(PRIVATE_HEADERS)
    return response


@router.get("/s/{token}/media/{meme_id}")
@router.head("/s/{token}/media/{meme_id}")
def shared_media(
    token: str,
    meme_id: str,
    request: Request,
    download: bool = Query(False),
    session: Session = Depends(db_session),
) -> Response:
    """A meme of the link's collection (404 for any other meme, or a dead link)."""
    view = _open(request, session, token)
    meme = sharing.collection_meme(session, view.granted, parse_id(meme_id))
    response = file_response(request, session, view.granted.owner, meme, download=download, cache="private, no-cache")
    response.headers.update(PRIVATE_HEADERS)
    return response


@router.get("/s/{token}/media/{meme_id}/thumbnail")
@router.head("/s/{token}/media/{meme_id}/thumbnail")
def shared_thumbnail(
    token: str,
    meme_id: str,
    request: Request,
    session: Session = Depends(db_session),
) -> Response:
    """The still thumbnail of a meme of the link's collection (the gallery's grid; the original only
    when opened or downloaded); 404 for any other meme, or a dead link. ``no-cache``: every use asks
    again, so a deleted link stops at once."""
    view = _open(request, session, token)
    meme = sharing.collection_meme(session, view.granted, parse_id(meme_id))
    response = thumbnail_response(request, session, view.granted.owner, meme, cache="private, no-cache")
    response.headers.update(PRIVATE_HEADERS)
    return response
