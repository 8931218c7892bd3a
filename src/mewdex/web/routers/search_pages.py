"""The search page (``/``) with its results fragments (``/ui/search``: text, ``POST /ui/search/image``:
by a dropped or pasted image), and ``/lang/{en|zh}``, which sets the language cookie.

Reads: :mod:`mewdex.search.service` and :mod:`mewdex.search.image_search`, the cards of
:mod:`mewdex.library.listing`; the page's menus from :mod:`mewdex.library.collections`.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from mewdex.config import get_settings
from mewdex.dto.scopes import ScopeContext
from mewdex.dto.search import SearchFilters
from mewdex.inference.errors import BackendUnavailable
from mewdex.library import collections, listing
from mewdex.library.images import ImageError
from mewdex.library.recaption import MAX_TEXT_CHARS as MAX_CAPTION_CHARS
from mewdex.search import feedback, image_search, service
from mewdex.search.confidence import strong_match
from mewdex.web import i18n
from mewdex.web.base_path import cookie_path, prefix
from mewdex.web.deps import current_scope, db_session
from mewdex.web.errors import ApiError
from mewdex.web.templating import parse_uuid, render
from mewdex.web.uploads import read_query_image

router = APIRouter(include_in_schema=False)
SEARCH_RESULTS = 20


@router.get("/lang/{code}")
def set_language(request: Request, code: str, next: str = "/"):
    """Set the language cookie and go back to ``next`` (a path on this site)."""
    target = next if next.startswith("/") and not next.startswith("//") and not urlsplit(next).netloc else "/"
    response = RedirectResponse(prefix(request, target), status_code=303)
    if code in i18n.LOCALES:
        response.set_cookie(i18n.COOKIE, code, max_age=365 * 24 * 3600, samesite="lax", path=cookie_path(request))
    return response


def search_results(
    q: str = "",
    collection: str = "",
    animated: bool = False,
    fold: bool = False,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
) -> dict[str, Any]:
    """The results of a text search (the page's and the fragment's query): ``state`` ``idle`` (no query;
    ``library_empty`` then, else the ``popular`` cards), ``error`` (``error``: a catalogue key;
    ``retry_after`` when overloaded), ``results`` or ``empty``."""
    query = q.strip()
    context: dict[str, Any] = {"q": q, "state": "idle", "results": [], "took_ms": None, "error": None}
    if not query:
        context["library_empty"] = listing.meme_count(session, scope) == 0
        if not context["library_empty"]:
            context["popular"] = popular_cards(session, scope)
        return context
    if len(query) > service.MAX_QUERY_CHARS:
        return {**context, "state": "error", "error": "error.query_too_long"}
    started = time.perf_counter()
    try:
        response = service.search(
            session,
            scope,
            query,
            SEARCH_RESULTS,
            filters=_filters(collection, animated),
            fold_variants=fold,
            shared=True,
        )
    except service.Overloaded as exc:
        # Every search slot stayed busy: the page says so (503 with the server's Retry-After; the
        # search box's script tries again after it) instead of an API error body.
        return {**context, "state": "error", "error": "error.overloaded", "retry_after": _retry_after(exc)}
    return _results_context(
        session,
        scope,
        context,
        [UUID(r.id) for r in response.results],
        {r.id: r.snippet for r in response.results},
        started,
        {r.id: r.confidence for r in response.results},
        {r.id: r.why_query for r in response.results if r.why_query},
    )


#: "Popular this week" on the search page: how many of the caller's most used memes of how many days.
POPULAR_CARDS = 8
POPULAR_DAYS = 7


def popular_cards(session: Session, scope: ScopeContext) -> list[listing.MemeCard]:
    """Cards of the caller's most used live memes of :data:`POPULAR_DAYS` days
    (:func:`mewdex.search.feedback.popular`), most used first; empty when nothing was used."""
    ids = [m for m, _n in feedback.popular(session, scope, days=POPULAR_DAYS, limit=POPULAR_CARDS)]
    memes = listing.memes_by_id(session, scope, ids)
    return listing.cards(session, scope, [memes[i] for i in ids if i in memes], with_stages=False)


def _retry_after(exc: service.Overloaded) -> int:
    try:
        return max(1, int((exc.headers or {}).get("Retry-After", "1")))
    except ValueError:
        return 1


def _search_response(request: Request, template: str, context: dict):
    """The search page or fragment; 503 with ``Retry-After`` when the search was refused as overloaded."""
    context = {**context, "retry_href": prefix(request, "/?" + request.url.query if request.url.query else "/")}
    retry_after = context.get("retry_after")
    response = render(request, template, context, status_code=200 if retry_after is None else 503)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


def _filters(collection: str, animated: bool) -> SearchFilters:
    """The page's filters (an unknown collection value filters nothing, as before) for the search service."""
    collection_id = parse_uuid(collection)
    return SearchFilters(
        collection_ids=None if collection_id is None else [str(collection_id)], animated=True if animated else None
    )


def _results_context(session, scope, context, ids, snippets, started, confidences=None, whys=None) -> dict:
    """The results fragment's context; with ``confidences`` (text search: id → high|medium|low) the
    ``low`` ones move under "weaker matches", and all of them when none is ``high`` ("no strong match");
    ``whys``: id → the past query the feedback leg lifted it for ("you picked this for …")."""
    memes = listing.memes_by_id(session, scope, ids)
    cards = listing.cards(session, scope, [memes[i] for i in ids if i in memes], with_stages=False)
    weaker: list = []
    if confidences is not None:
        if strong_match(list(confidences.values())):
            weaker = [c for c in cards if confidences.get(c.id) == "low"]
            cards = [c for c in cards if confidences.get(c.id) != "low"]
        else:
            cards, weaker = [], cards
    return {
        **context,
        "state": "results" if cards or weaker else "empty",
        "results": cards,
        "weaker": weaker,
        "no_strong_match": confidences is not None and not cards and bool(weaker),
        "snippets": {str(k): v for k, v in snippets.items()},
        "whys": {str(k): v for k, v in (whys or {}).items()},
        "took_ms": round((time.perf_counter() - started) * 1000),
    }


@router.get("/")
def index(
    request: Request,
    collection: str = "",
    animated: bool = False,
    fold: bool = False,
    results: dict[str, Any] = Depends(search_results),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    return _search_response(
        request,
        "search.html",
        {
            "page": "search",
            **results,
            "collection": collection,
            "animated": animated,
            "fold": fold,
            "collections": collections.overview(session, scope),
            "processing": listing.processing(session, scope),
            "max_caption_chars": MAX_CAPTION_CHARS,  # "Make a meme" (partials/make_meme.html)
        },
    )


@router.get("/ui/search")
def search_fragment(request: Request, results: dict[str, Any] = Depends(search_results)):
    return _search_response(request, "partials/search_results.html", results)


@router.post("/ui/search/image")
async def image_search_fragment(
    request: Request, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
):
    """Results of a search by the dropped or pasted image (the same fragment as text search); the
    body goes through the bounded upload reader after authentication."""
    settings = get_settings()
    context: dict[str, Any] = {
        "q": "",
        "state": "error",
        "results": [],
        "took_ms": None,
        "by_image": True,
        "image_name": "",
    }
    try:
        data, filename, fields = await read_query_image(request, max_bytes=settings.max_upload_bytes)
    except ApiError as exc:
        if exc.status != 413:
            raise
        return render(request, "partials/search_results.html", {**context, "error": "error.image_too_large"})
    context["image_name"] = filename
    collection = (fields.get("collection") or [""])[-1]
    animated = (fields.get("animated") or [""])[-1].strip().lower() in ("1", "true", "on", "yes")
    if not data:
        return render(request, "partials/search_results.html", {**context, "error": "error.image_corrupt"})
    started = time.perf_counter()
    try:
        response = await run_in_threadpool(
            image_search.search_by_image,
            session,
            scope,
            data,
            SEARCH_RESULTS,
            max_pixels=settings.max_pixels,
            filters=_filters(collection, animated),
        )
    except ImageError as exc:
        return render(request, "partials/search_results.html", {**context, "error": f"error.{exc.code}"})
    except BackendUnavailable:
        return render(request, "partials/search_results.html", {**context, "error": "error.backend_unavailable"})
    return render(
        request,
        "partials/search_results.html",
        _results_context(session, scope, context, [UUID(r.id) for r in response.results], {}, started),
    )
