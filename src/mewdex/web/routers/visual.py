"""Visual endpoints: thumbnails, search by image, similar memes, near-duplicates.

* ``GET /media/{id}/thumbnail`` (``?animated=1`` for the animated preview, falling back to the still)
* ``POST /api/v1/search/image`` (multipart ``file``, form ``n_results``)
* ``GET /api/v1/memes/{id}/similar?n_results=``
* ``GET /api/v1/memes/{id}/duplicates``
* ``GET /api/v1/duplicates?limit=&offset=`` (clusters)
"""

from __future__ import annotations

import io

from fastapi import APIRouter, Depends, File, Form, Query, Request, UploadFile
from fastapi.responses import FileResponse, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from mewdex.config import get_settings
from mewdex.db.models import ScopeContext
from mewdex.library import thumbnails as thumbs
from mewdex.library.images import ImageError
from mewdex.library.scopes import storage_namespace
from mewdex.inference.errors import BackendUnavailable
from mewdex.pipeline.visual import MODEL_ID as visual_model_id
from mewdex.platform import metering
from mewdex.search import image_search
from mewdex.storage import blob_store
from mewdex.web.deps import current_scope, db_session
from mewdex.web.errors import ApiError
from mewdex.web.routers.memes import get_meme

router = APIRouter(tags=["visual"])
READ_CHUNK = 1024 * 1024


def _n_results(n: int) -> int:
    if not 1 <= n <= 50:
        raise ApiError(422, "n_results_out_of_range", "n_results must be between 1 and 50")
    return n


@router.get("/media/{meme_id}/thumbnail")
@router.head("/media/{meme_id}/thumbnail", include_in_schema=False)
def thumbnail(meme_id: str, request: Request, animated: bool = False, session: Session = Depends(db_session),
              scope: ScopeContext = Depends(current_scope)):
    """The still WEBP thumbnail (or, with ``animated=1``, the animated preview when the meme has one).

    When no thumbnail is available yet the still is rendered from the original on the fly (not
    stored; ``Cache-Control: no-store``) so the UI always has a picture; 404 ``blob_missing`` when
    even the original is gone, 422 with the image error code when it cannot be decoded.
    """
    meme = get_meme(session, scope, meme_id)
    namespace = storage_namespace(session, scope.scope_id)
    store = blob_store()
    profiles = ([thumbs.ANIMATED_PROFILE] if animated else []) + [thumbs.STILL_PROFILE]
    for profile in profiles:
        row = thumbs.current_thumbnail(session, meme, profile)
        if row is None or not row.output_key:
            continue
        path = store.path(thumbs.thumbnail_namespace(namespace), row.output_key)
        if not path.is_file():
            continue
        etag = f'"{row.output_sha256}"'
        headers = {"ETag": etag, "Cache-Control": "private, max-age=31536000, immutable"}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        return FileResponse(path, media_type=row.media_type or thumbs.MEDIA_TYPE, headers=headers)
    original = store.path(namespace, meme.storage_key)
    if not original.is_file():
        raise ApiError(404, "blob_missing", "the image file is missing from the blob store")
    try:
        still = thumbs.make_still(original.read_bytes(), max_pixels=get_settings().max_pixels)
    except ImageError as exc:
        raise ApiError(exc.http_status if exc.http_status != 415 else 422, exc.code, exc.message) from exc
    return Response(still.data, media_type=still.media_type, headers={"Cache-Control": "no-store"})


async def _read_limited(upload: UploadFile, limit: int) -> bytes:
    buf = io.BytesIO()
    while chunk := await upload.read(READ_CHUNK):
        buf.write(chunk)
        if buf.tell() > limit:
            raise ApiError(413, "upload_too_large", f"the file is over {limit} bytes")
    return buf.getvalue()


@router.post("/api/v1/search/image")
async def search_image(file: UploadFile = File(...), n_results: int = Form(10),
                       session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)) -> dict:
    """Memes that look like the uploaded image; the text search's result shape, ``score`` = cosine."""
    _n_results(n_results)
    settings = get_settings()
    data = await _read_limited(file, settings.max_upload_bytes)
    if not data:
        raise ApiError(422, "image_corrupt", "the file is empty")
    try:
        response = await run_in_threadpool(image_search.search_by_image, session, scope, data, n_results,
                                           max_pixels=settings.max_pixels)  # decode + model off the event loop
        metering.meter_image_search(session, scope, visual_model_id)
        return response.as_dict()
    except ImageError as exc:
        raise ApiError(exc.http_status, exc.code, exc.message) from exc
    except BackendUnavailable as exc:
        raise ApiError(503, exc.code, str(exc), exc.details) from exc


@router.get("/api/v1/memes/{meme_id}/similar")
def similar(meme_id: str, n_results: int = Query(10), session: Session = Depends(db_session),
            scope: ScopeContext = Depends(current_scope)) -> dict:
    """Memes that look like this one (itself excluded); 409 ``visual_not_ready`` before its visual stage ran."""
    _n_results(n_results)
    meme = get_meme(session, scope, meme_id)
    try:
        return image_search.similar(session, scope, meme.id, n_results).as_dict()
    except image_search.MemeNotEmbedded:
        raise ApiError(409, "visual_not_ready", "the meme has no image embedding yet") from None


@router.get("/api/v1/memes/{meme_id}/duplicates")
def meme_duplicates(meme_id: str, session: Session = Depends(db_session),
                    scope: ScopeContext = Depends(current_scope)) -> dict:
    """``{"near_duplicates": [{"id", "display_name", "relation", "phash_distance", "cosine", ...}]}``."""
    meme = get_meme(session, scope, meme_id)
    return {"near_duplicates": image_search.near_duplicates_of(session, scope.scope_id, meme.id)}


@router.get("/api/v1/duplicates")
def duplicates(limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0),
               session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)) -> dict:
    """Near-duplicate clusters, biggest first: ``{"clusters": [{"original", "size", "memes", "pairs"}], "total"}``."""
    return image_search.duplicate_clusters(session, scope, limit=limit, offset=offset)
