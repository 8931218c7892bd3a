"""The web UI: server-rendered pages and the HTML fragments HTMX swaps into them.

Full pages: ``/`` (search), ``/memes/{id}``, ``/library``, ``/upload``, ``/collections``,
``/collections/{id}``, ``/tasks``, ``/tasks/{id}``; ``/lang/{en|zh}`` sets the language cookie.
Fragments (under ``/ui/``): search results (text and image), library items, task rows, the meme
detail (``/memes/{id}?fragment=1``). Reads come from :mod:`mewdex.web.views`; every change is
made by the page scripts through the JSON API.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse
from fastapi.templating import Jinja2Templates
from jinja2 import ChoiceLoader, FileSystemLoader, PrefixLoader
from markupsafe import Markup
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from mewdex import channels as channels_package
from mewdex.config import get_settings
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import STAGES, ScopeContext
from mewdex.dto.search import SearchFilters
from mewdex.inference import visual_model
from mewdex.inference.errors import BackendUnavailable
from mewdex.library.images import ImageError
from mewdex.search import image_search, service
from mewdex.search.confidence import strong_match
from mewdex.web import deps, errors, i18n, views
from mewdex.web.deps import current_scope, db_session
from mewdex.web.errors import ApiError
from mewdex.web.routers.health import page_state
from mewdex.web.routers.memes import get_meme, meme_dict
from mewdex.web.uploads import read_query_image

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent.parent / "templates")
# A channel package may bring its card for the Channels page: "channel/<name>/card.html" is
# src/mewdex/channels/<name>/card.html (channels.html includes it when it is there).
templates.env.loader = ChoiceLoader(
    [
        FileSystemLoader(Path(__file__).parent.parent / "templates"),
        PrefixLoader({"channel": FileSystemLoader(Path(channels_package.__file__).parent)}),
    ]
)
SEARCH_RESULTS = 20
SIMILAR_RESULTS = 12


def _filesize(n: float | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def _when(value: datetime | str | None) -> Markup:
    """An instant as ``<time datetime="…Z" data-when>2026-12-03 18:33 UTC</time>``: the page's
    times.js rewrites the text in the reader's time zone (the account's, else the browser's) and the
    page's language with ``Intl.DateTimeFormat``; the UTC text is what a script-less reader sees."""
    if value is None or value == "":
        return Markup("")
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    utc = value.astimezone(UTC)
    return Markup('<time datetime="{}" data-when>{}</time>').format(
        utc.strftime("%Y-%m-%dT%H:%M:%SZ"), utc.strftime("%Y-%m-%d %H:%M UTC")
    )


templates.env.filters["filesize"] = _filesize
templates.env.filters["when"] = _when


def _error_page_principal(request: Request):
    """Who is signed in, for an error page no route resolved it for (an unknown path); None when it
    cannot be told (no credential, a bad one, the database gone)."""
    try:
        with get_sessionmaker()() as session:
            return deps.resolve_principal(request, session)
    except Exception:  # noqa: BLE001 — the error page is shown anyway, without the account
        return None


def render(request: Request, name: str, context: dict | None = None, status_code: int = 200):
    """Render ``name`` in the request's language (``_`` translates, ``messages`` feeds the scripts);
    ``Cache-Control: no-store``."""
    locale = i18n.request_locale(request)
    base = {
        "_": partial(i18n.translate, locale),
        "error_text": partial(i18n.error_text, locale),
        "lang": locale,
        "html_lang": i18n.HTML_LANG[locale],
        "messages": i18n.client_messages(locale),
        "path": request.url.path,
        "query_string": request.url.query,
        "server_state": page_state(request),  # the header's badge: ok / degraded / unavailable
    }
    principal = getattr(request.state, "principal", None)
    if principal is None and status_code >= 400:
        principal = _error_page_principal(request)  # an error page keeps the header of the signed-in pages
    if principal is not None and principal.user is not None:  # accounts exist: who is signed in
        base["signed_in"] = {"email": principal.user.email, "admin": principal.is_admin}
        base["time_zone"] = principal.user.time_zone  # times.js shows times in it (else the browser's)
    response = templates.TemplateResponse(request, name, {**base, **(context or {})}, status_code=status_code)
    # Pages show one account's data: never kept for the Back button after signing out, nor by a proxy.
    response.headers["Cache-Control"] = "no-store"
    return response


errors.set_page_renderer(render)  # error pages for browsers (mewdex.web.errors.error_page)


def _not_found(request: Request):
    return render(request, "not_found.html", {"page": "none"}, status_code=404)


def _uuid(value: str) -> UUID | None:
    try:
        return UUID(value)
    except ValueError:
        return None


# ------------------------------------------------------------------ language


@router.get("/lang/{code}")
def set_language(code: str, next: str = "/"):
    """Set the language cookie and go back to ``next`` (a path on this site)."""
    target = next if next.startswith("/") and not next.startswith("//") and not urlsplit(next).netloc else "/"
    response = RedirectResponse(target, status_code=303)
    if code in i18n.LOCALES:
        response.set_cookie(i18n.COOKIE, code, max_age=365 * 24 * 3600, samesite="lax")
    return response


# ------------------------------------------------------------------ search


def _search_context(
    session: Session, scope: ScopeContext, q: str, collection: str, animated: bool, fold: bool = False
) -> dict:
    query = q.strip()
    context: dict[str, Any] = {"q": q, "state": "idle", "results": [], "took_ms": None, "error": None}
    if not query:
        context["library_empty"] = views.meme_count(session, scope) == 0
        return context
    if len(query) > service.MAX_QUERY_CHARS:
        return {**context, "state": "error", "error": "error.query_too_long"}
    started = time.perf_counter()
    try:
        response = service.search(
            session, scope, query, SEARCH_RESULTS, filters=_filters(collection, animated), fold_variants=fold
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


def _retry_after(exc: service.Overloaded) -> int:
    try:
        return max(1, int((exc.headers or {}).get("Retry-After", "1")))
    except ValueError:
        return 1


def _search_response(request: Request, template: str, context: dict):
    """The search page or fragment; 503 with ``Retry-After`` when the search was refused as overloaded."""
    context = {**context, "retry_href": "/?" + request.url.query if request.url.query else "/"}
    retry_after = context.get("retry_after")
    response = render(request, template, context, status_code=200 if retry_after is None else 503)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


def _filters(collection: str, animated: bool) -> SearchFilters:
    """The page's filters (an unknown collection value filters nothing, as before) for the search service."""
    collection_id = views.parse_uuid(collection)
    return SearchFilters(
        collection_ids=None if collection_id is None else [str(collection_id)], animated=True if animated else None
    )


def _results_context(session, scope, context, ids, snippets, started, confidences=None, whys=None) -> dict:
    """The results fragment's context; with ``confidences`` (text search: id → high|medium|low) the
    ``low`` ones move under "weaker matches", and all of them when none is ``high`` ("no strong match");
    ``whys``: id → the past query the feedback leg lifted it for ("you picked this for …")."""
    memes = views.memes_by_id(session, scope, ids)
    cards = views.cards(session, scope, [memes[i] for i in ids if i in memes], with_stages=False)
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
    q: str = "",
    collection: str = "",
    animated: bool = False,
    fold: bool = False,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    context = _search_context(session, scope, q, collection, animated, fold)
    return _search_response(
        request,
        "search.html",
        {
            "page": "search",
            **context,
            "collection": collection,
            "animated": animated,
            "fold": fold,
            "collections": views.collections(session, scope),
            "processing": views.processing(session, scope),
        },
    )


@router.get("/ui/search")
def search_fragment(
    request: Request,
    q: str = "",
    collection: str = "",
    animated: bool = False,
    fold: bool = False,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    return _search_response(
        request, "partials/search_results.html", _search_context(session, scope, q, collection, animated, fold)
    )


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


# ------------------------------------------------------------------ meme detail


def _detail_context(session: Session, scope: ScopeContext, meme_id: str) -> dict:
    meme = get_meme(session, scope, meme_id)
    data = meme_dict(session, meme)
    try:
        similar = image_search.similar(session, scope, meme.id, SIMILAR_RESULTS)
        similar_cards = views.cards(
            session,
            scope,
            [
                m
                for m in (
                    views.memes_by_id(session, scope, [UUID(r.id) for r in similar.results]).get(UUID(r.id))
                    for r in similar.results
                )
                if m is not None
            ],
        )
    except image_search.MemeNotEmbedded:
        similar_cards = None
    stages = [
        {"stage": s, **data["stages"][s], "task_id": None}
        for s in STAGES
        if s in data["stages"] and data["stages"][s]["planned"]
    ]
    task_ids = views.stage_statuses(session, scope, [meme.id]).get(meme.id, {})
    for stage in stages:
        stage["task_id"] = task_ids.get(stage["stage"], {}).get("task_id")
    context = meme.meme_context or {}
    visual_labels = ((meme.extensions or {}).get("visual") or {}).get("labels") or []
    return {
        "meme": data,
        "stages": stages,
        "ocr_text": context.get("ocr_text") or "",
        "context": context,
        # "Looks like" in the page's language only (the context keeps both for search)
        "labels_by_lang": {lang: visual_model.labels_in(visual_labels, lang) for lang in ("en", "zh")},
        "similar": similar_cards,
        "duplicates": [d for d in data["near_duplicates"] if d["kind"] == "duplicate"],
        "variants": [d for d in data["near_duplicates"] if d["kind"] == "variant"],
        "in_collections": views.collections_of_meme(session, scope, meme.id),
        "collections": views.collections(session, scope),
    }


@router.get("/memes/{meme_id}")
def meme_page(
    request: Request,
    meme_id: str,
    fragment: bool = False,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    try:
        context = _detail_context(session, scope, meme_id)
    except ApiError:
        return _not_found(request)
    if fragment:
        return render(request, "partials/meme_detail.html", context)
    return render(request, "meme.html", {"page": "meme", **context})


# ------------------------------------------------------------------ library


def _library_context(
    session: Session,
    scope: ScopeContext,
    name: str,
    state: str,
    collection: str,
    animated: bool,
    sort: str,
    view: str,
    page: int,
    collapse: bool = False,
) -> dict:
    result = views.library_page(
        session,
        scope,
        name=name,
        state=state,
        collection=collection,
        animated=animated,
        sort=sort,
        page=page,
        collapse=collapse,
    )
    return {
        "lib": result,
        "view": "list" if view == "list" else "grid",
        "filters": {
            "name": name,
            "state": state,
            "collection": collection,
            "animated": animated,
            "sort": sort if sort in views.SORTS else "newest",
            "collapse": collapse,
        },
    }


@router.get("/library")
def library(
    request: Request,
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
):
    return render(
        request,
        "library.html",
        {
            "page": "library",
            **_library_context(session, scope, name, state, collection, animated, sort, view, page, collapse),
            "collections": views.collections(session, scope),
            "sorts": list(views.SORTS),
            "states": views.MEME_STATES,
            "processing": views.processing(session, scope),
        },
    )


@router.get("/ui/library")
def library_fragment(
    request: Request,
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
):
    return render(
        request,
        "partials/library_items.html",
        _library_context(session, scope, name, state, collection, animated, sort, view, page, collapse),
    )


# ------------------------------------------------------------------ upload


@router.get("/upload")
def upload(request: Request, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    return render(
        request,
        "upload.html",
        {
            "page": "upload",
            "collections": views.collections(session, scope),
            "max_upload_bytes": get_settings().max_upload_bytes,
        },
    )


# ------------------------------------------------------------------ collections


@router.get("/collections")
def collections_page(
    request: Request,
    q: str = "",
    sort: str = "name",
    page: str = "1",
    created: str = "",
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """Search (name contains ``q``), sort (name, size, updated) and pages of 50; ``created`` (an id) is the
    collection just created: confirmed and scrolled to."""
    q = q.strip()[:100]
    sort = sort if sort in views.COLLECTION_SORTS else "name"
    total = views.count_collections(session, scope, q or None)
    pages = max(1, -(-total // views.COLLECTIONS_PER_PAGE))
    page_number = min(max(1, int(page) if page.isdigit() and len(page) < 7 else 1), pages)
    rows = views.collections(
        session,
        scope,
        q=q or None,
        sort=sort,
        limit=views.COLLECTIONS_PER_PAGE,
        offset=(page_number - 1) * views.COLLECTIONS_PER_PAGE,
    )
    return render(
        request,
        "collections.html",
        {
            "page": "collections",
            "collections": rows,
            "q": q,
            "sort": sort,
            "sorts": views.COLLECTION_SORTS,
            "page_number": page_number,
            "pages": pages,
            "total": total,
            "created": next((c for c in rows if c.id == created), None),
        },
    )


@router.get("/collections/{collection_id}")
def collection_page(
    request: Request,
    collection_id: str,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    cid = _uuid(collection_id)
    row = views.collection(session, scope, cid) if cid else None
    if row is None:
        return _not_found(request)
    return render(
        request,
        "collection.html",
        {
            "page": "collections",
            "collection": row,
            "members": views.collection_members(session, scope, row.id),
        },
    )


# ------------------------------------------------------------------ tasks


def _tasks_context(session: Session, scope: ScopeContext, status: str, task_type: str, stage: str) -> dict:
    return {
        "tasks": views.tasks(session, scope, status=status, task_type=task_type, stage=stage),
        "depths": views.lane_depths(session, scope),
        "batches": views.batch_progress(session, scope),
        "filters": {"status": status, "type": task_type, "stage": stage},
    }


@router.get("/tasks")
def tasks_page(
    request: Request,
    status: str = "",
    type: str = "",
    stage: str = "",
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    return render(
        request,
        "tasks.html",
        {
            "page": "tasks",
            **_tasks_context(session, scope, status, type, stage),
            "statuses": views.TASK_STATUSES,
            "types": views.task_types(session, scope),
            "stages": STAGES,
        },
    )


@router.get("/ui/tasks")
def tasks_fragment(
    request: Request,
    status: str = "",
    type: str = "",
    stage: str = "",
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    return render(request, "partials/task_rows.html", _tasks_context(session, scope, status, type, stage))


@router.get("/tasks/{task_id}")
def task_page(
    request: Request, task_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
):
    found = views.task(session, scope, task_id)
    if found is None:
        return _not_found(request)
    task, meme, attempts = found
    return render(request, "task.html", {"page": "tasks", "task": task, "meme": meme, "attempts": attempts})
