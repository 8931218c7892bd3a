"""Visual endpoints: thumbnails, search by image, similar memes, near-duplicates.

* ``GET /media/{id}/thumbnail`` (``?animated=1`` for the animated preview, falling back to the still)
* ``POST /api/v1/search/image`` (multipart ``file``, form ``n_results``)
* ``GET /api/v1/memes/{id}/similar?n_results=``
* ``GET /api/v1/memes/{id}/duplicates``
* ``GET /api/v1/duplicates?limit=&cursor=`` (clusters)
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from mewdex.config import get_settings
from mewdex.db.engine import get_sessionmaker
from mewdex.dto.media import FORMATS
from mewdex.dto.scopes import ScopeContext
from mewdex.dto.search import DuplicateClusters, NearDuplicates, SearchFilters, SearchResults
from mewdex.inference.errors import BackendUnavailable
from mewdex.library.images import ImageError
from mewdex.pipeline.visual import MODEL_ID as visual_model_id
from mewdex.platform import metering
from mewdex.search import image_search
from mewdex.web.deps import current_scope, db_session, streaming_scope
from mewdex.web.errors import ApiError
from mewdex.web.routers.memes import THUMBNAIL_RESPONSE, get_meme, thumbnail_response
from mewdex.web.routers.search import search_filters
from mewdex.web.uploads import read_query_image, upload_slot

router = APIRouter(tags=["visual"])
READ_CHUNK = 1024 * 1024


def _n_results(n: int) -> int:
    if not 1 <= n <= 50:
        raise ApiError(422, "n_results_out_of_range", "n_results must be between 1 and 50")
    return n


@router.get("/media/{meme_id}/thumbnail", response_class=Response, responses=THUMBNAIL_RESPONSE)
@router.head("/media/{meme_id}/thumbnail", include_in_schema=False)
def thumbnail(
    meme_id: str,
    request: Request,
    animated: bool = False,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """The still WEBP thumbnail (or, with ``animated=1``, the animated preview when the meme has one).

    When no thumbnail is available yet (the worker makes them) the original's bytes stand in
    (``Cache-Control: no-store``) so the UI always has a picture; 404 ``blob_missing`` when even
    the original is gone. A meme in the trash has its thumbnail too (the trash page).
    """
    meme = get_meme(session, scope, meme_id, include_trashed=True)
    return thumbnail_response(request, session, scope, meme, animated=animated)


def _search_by_image(
    scope: ScopeContext, data: bytes, n_results: int, max_pixels: int, filters: SearchFilters
) -> SearchResults:
    """Decode + model off the event loop, in a transaction of its own (the body is read by then)."""
    with get_sessionmaker().begin() as session:
        response = image_search.search_by_image(session, scope, data, n_results, max_pixels=max_pixels, filters=filters)
        metering.meter_image_search(session, scope, visual_model_id)
        return response.to_dto()


# The API's search-by-image body: the image, ``n_results`` and the filters of ``POST /api/v1/search``
# (``collection_ids`` and ``formats`` repeated). The route reads it itself, after authentication.
SEARCH_IMAGE_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "n_results": {"type": "integer", "default": 10},
                        "collection_ids": {"type": "array", "items": {"type": "string", "format": "uuid"}},
                        "animated": {"type": "boolean"},
                        "formats": {"type": "array", "items": {"type": "string", "enum": list(FORMATS)}},
                        "status": {"type": "string"},
                        "created_from": {"type": "string", "format": "date-time"},
                        "created_to": {"type": "string", "format": "date-time"},
                    },
                }
            }
        },
    }
}


@router.post("/api/v1/search/image", response_model=SearchResults, openapi_extra=SEARCH_IMAGE_BODY)
async def search_image(request: Request, scope: ScopeContext = Depends(streaming_scope)):
    """Memes that look like the uploaded image (multipart ``file`` ≤ ``MEWDEX_MAX_UPLOAD_BYTES``, form
    ``n_results`` 1–50); the text search's result shape, ``score`` = cosine. The body is read only
    after authentication, bounded while streaming (413 ``upload_too_large``).

    Form fields besides ``file`` and ``n_results``: the filters of ``POST /api/v1/search``
    (``collection_ids`` and ``formats`` repeated), applied inside the nearest-neighbour query."""
    settings = get_settings()
    async with upload_slot(scope.scope_id):  # no transaction is open while the body streams
        data, _filename, fields = await read_query_image(request, max_bytes=settings.max_upload_bytes)
    last = {name: values[-1] for name, values in fields.items()}
    try:
        n_results = int(last.get("n_results", "10"))
    except ValueError:
        raise ApiError(422, "invalid_request", "n_results must be an integer") from None
    _n_results(n_results)
    filters = search_filters(
        collection_ids=fields.get("collection_ids"),
        animated=last.get("animated"),
        formats=fields.get("formats"),
        status=last.get("status"),
        created_from=last.get("created_from"),
        created_to=last.get("created_to"),
    )
    if not data:
        raise ApiError(422, "image_corrupt", "the file is empty")
    try:
        return await run_in_threadpool(_search_by_image, scope, data, n_results, settings.max_pixels, filters)
    except ImageError as exc:
        raise ApiError(exc.http_status, exc.code, exc.message) from exc
    except BackendUnavailable as exc:
        raise ApiError(503, exc.code, str(exc), exc.details) from exc


@router.get("/api/v1/memes/{meme_id}/similar", response_model=SearchResults)
def similar(
    meme_id: str,
    n_results: int = Query(10),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """Memes that look like this one (itself excluded); 409 ``visual_not_ready`` before its visual stage ran."""
    _n_results(n_results)
    meme = get_meme(session, scope, meme_id)
    try:
        return image_search.similar(session, scope, meme.id, n_results).to_dto()
    except image_search.MemeNotEmbedded:
        raise ApiError(409, "visual_not_ready", "the meme has no image embedding yet") from None


@router.get("/api/v1/memes/{meme_id}/duplicates", response_model=NearDuplicates)
def meme_duplicates(meme_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    """``{"near_duplicates": [{"id", "display_name", "relation", "phash_distance", "cosine", ...}]}``."""
    meme = get_meme(session, scope, meme_id)
    return {"near_duplicates": image_search.near_duplicates_of(session, scope.scope_id, meme.id)}


@router.get("/api/v1/duplicates", response_model=DuplicateClusters)
def duplicates(
    limit: int = Query(100, ge=1, le=1000),
    cursor: str | None = Query(None, max_length=2048, description="``next_cursor`` of the previous page"),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """Near-duplicate clusters, biggest first: ``{"clusters": [{"original", "size", "memes", "pairs"}], "total",
    "next_cursor"}``; pass ``next_cursor`` back as ``cursor`` for the next page (422 ``invalid_cursor``)."""
    return image_search.duplicate_clusters(session, scope, limit=limit, cursor=cursor)
