"""Memes: upload (``POST /api/v1/memes``), list, read, rename (``PATCH``), delete, and
``GET /media/{id}`` (original bytes)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.engine import get_sessionmaker
from mewdex.dto.memes import (
    KnownMeme,
    KnownRequest,
    KnownResponse,
    MemePage,
    MemePatchRequest,
    MemeZipRequest,
    PopularMeme,
    PopularMemes,
    UploadResponse,
)
from mewdex.dto.memes import Meme as MemeDto
from mewdex.dto.scopes import ScopeContext
from mewdex.library import collections, listing, packages
from mewdex.library import memes as library
from mewdex.library import thumbnails as thumbs
from mewdex.library.listing import MEDIA_TYPES_BY_EXTENSION
from mewdex.library.names import saved_name
from mewdex.library.scopes import storage_namespace
from mewdex.platform.auth import Principal
from mewdex.queue import backpressure
from mewdex.search import feedback
from mewdex.search.image_search import near_duplicates_of_many
from mewdex.storage import blob_store
from mewdex.web.deps import current_principal, current_scope, db_session, parse_id, streaming_scope
from mewdex.web.errors import ApiError, error_body, error_responses
from mewdex.web.guards import cross_site
from mewdex.web.media import blob_response
from mewdex.web.security import UPLOAD_REQUEST_BYTES
from mewdex.web.uploads import memory_slot, read_upload, upload_slot

router = APIRouter(tags=["memes"])


def get_meme(session: Session, scope: ScopeContext, meme_id: str, *, include_trashed: bool = False) -> library.Meme:
    """The scope's live meme ``meme_id`` (``include_trashed``: one in the trash too, for its media on the
    trash page); 404 ``not_found`` (also for an id that is no UUID)."""
    meme = library.find(session, scope, parse_id(meme_id), include_trashed=include_trashed)
    if meme is None:
        raise ApiError(404, "not_found", "meme not found")
    return meme


def meme_dto(session: Session, meme: library.Meme) -> MemeDto:
    """The full meme shape (:class:`mewdex.dto.memes.Meme`)."""
    return memes_dto(session, [meme])[0]


def memes_dto(session: Session, memes: list[library.Meme]) -> list[MemeDto]:
    """:func:`meme_dto` of a page of memes of one scope (a fixed number of statements)."""
    if not memes:
        return []
    near = near_duplicates_of_many(session, memes[0].scope_id, [m.id for m in memes])
    return listing.memes_full(session, memes, near_duplicates=near)


def meme_dict(session: Session, meme: library.Meme) -> dict:
    return meme_dto(session, meme).model_dump()


@router.get("/api/v1/memes/popular", response_model=PopularMemes)
def popular_memes(
    days: int = Query(7, ge=1, le=feedback.POPULAR_MAX_DAYS, description="the window, in days back from now"),
    limit: int = Query(12, ge=1, le=100),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """The caller's most used live memes of the last ``days`` days (sent, shared, copied or downloaded:
    their own feedback events, :func:`mewdex.search.feedback.popular`), most used first. Empty when
    learning is off (no events are written). 422 for ``days``/``limit`` out of range."""
    ranked = feedback.popular(session, scope, days=days, limit=limit)
    memes = listing.memes_by_id(session, scope, [m for m, _n in ranked])
    items = [PopularMeme(**listing.meme_brief(memes[m]).model_dump(), uses=n) for m, n in ranked if m in memes]
    return PopularMemes(days=days, items=items)


@router.get("/api/v1/memes/{meme_id}", response_model=MemeDto)
def read_meme(
    meme_id: str,
    response: Response,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """The meme with its image facts, context and stage statuses (``ETag``: its revision, for
    ``If-Match`` on PATCH/DELETE); 404 ``not_found``."""
    meme = get_meme(session, scope, meme_id)
    response.headers["ETag"] = f'"{meme.revision}"'
    return meme_dto(session, meme)


def binary_responses(description: str, media_types: Iterable[str]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` of a route whose 200 is bytes of one of ``media_types`` (a file, a ZIP)."""
    binary = {"schema": {"type": "string", "format": "binary"}}
    return {200: {"description": description, "content": dict.fromkeys(media_types, binary)}}


#: ``responses`` of a route answering a meme's original bytes (its real media type).
IMAGE_RESPONSE = binary_responses("the meme's original bytes", MEDIA_TYPES_BY_EXTENSION.values())
#: ``responses`` of a route answering a meme's thumbnail (:func:`thumbnail_response`).
THUMBNAIL_RESPONSE = binary_responses(
    "the still WEBP thumbnail or the animated preview (the original until the worker made it)",
    dict.fromkeys(("image/webp", "image/png", "image/jpeg", "image/gif", *MEDIA_TYPES_BY_EXTENSION.values())),
)
#: ``responses`` of a route streaming a ZIP.
ZIP_RESPONSE = binary_responses("the ZIP, streamed", ("application/zip",))


@router.get("/media/{meme_id}", response_class=Response, responses=IMAGE_RESPONSE)
@router.head("/media/{meme_id}", include_in_schema=False)
def media(
    meme_id: str,
    request: Request,
    download: bool = Query(False, description="true: ``Content-Disposition: attachment`` (save, not show)"),
    q: str | None = Query(None, max_length=2000, description="the search this download came from (feedback)"),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
    principal: Principal = Depends(current_principal),
):
    """Original bytes with their real ``Content-Type``, ``ETag`` (sha256), a year-long immutable cache
    and ``Content-Disposition`` naming the file ``<name><extension>`` (``inline``; ``attachment`` with
    ``?download=1``), so a saved or shared image keeps its name and type.

    ``q``: the search whose result was downloaded (the result cards' download link): recorded as
    ``download`` feedback (learning, :mod:`mewdex.search.feedback`) for a GET of the account itself
    from this site (not a signed link, not a read-only token, not a request from another site). A meme
    in the trash is served too (the trash page shows it; its files are kept until it is purged)."""
    meme = get_meme(session, scope, meme_id, include_trashed=True)
    if meme.deleted_at is not None:
        q = None  # nothing is learned from the trash
    if q and request.method == "GET" and _may_learn(request, principal):
        try:
            feedback.record(session, scope, q, meme.id, "download", "search")
        except feedback.FeedbackError:
            pass  # an empty or overlong query: the download itself goes on
    return file_response(request, session, scope, meme, download=download)


def file_response(
    request: Request,
    session: Session,
    scope: ScopeContext,
    meme: library.Meme,
    *,
    download: bool,
    cache: str = "private, max-age=31536000, immutable",
) -> Response:
    """The meme's original bytes (of ``scope``'s blob namespace) with ``ETag`` (sha256, 304 on a match),
    ``cache`` as ``Cache-Control`` and ``Content-Disposition`` naming the file (``attachment`` when
    ``download``); 404 ``blob_missing``. The caller has checked the meme may be read."""
    etag = f'"{meme.sha256}"'
    headers = {
        "ETag": etag,
        "Cache-Control": cache,
        "Content-Disposition": packages.content_disposition(
            saved_name(meme.display_name, meme.extension), "attachment" if download else "inline"
        ),
    }
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    namespace = storage_namespace(session, scope.scope_id)
    found = blob_response(
        blob_store(), namespace, meme.storage_key, media_type=MEDIA_TYPES_BY_EXTENSION[meme.extension], headers=headers
    )
    if found is None:
        raise ApiError(404, "blob_missing", "the image file is missing from the blob store")
    return found


def thumbnail_response(
    request: Request,
    session: Session,
    scope: ScopeContext,
    meme: library.Meme,
    *,
    animated: bool = False,
    cache: str = "private, max-age=31536000, immutable",
) -> Response:
    """The meme's still WEBP thumbnail (``animated``: its animated preview when it has one) from the
    thumbnail store of ``scope``'s namespace, ``ETag`` its sha256 (304 on a match), ``cache`` as
    ``Cache-Control``. Until the worker has made one the original stands in (``no-store``); 404
    ``blob_missing`` when even that is gone. The caller has checked the meme may be read."""
    namespace = storage_namespace(session, scope.scope_id)
    store = blob_store()
    profiles = ([thumbs.ANIMATED_PROFILE] if animated else []) + [thumbs.STILL_PROFILE]
    for profile in profiles:
        row = thumbs.current_thumbnail(session, meme, profile)
        if row is None or not row.output_key:
            continue
        etag = f'"{row.output_sha256}"'
        headers = {"ETag": etag, "Cache-Control": cache}
        found = blob_response(
            store,
            thumbs.thumbnail_namespace(namespace),
            row.output_key,
            media_type=row.media_type or thumbs.MEDIA_TYPE,
            headers=headers,
        )
        if found is None:
            continue
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        return found
    # Thumbnails are made only by the worker: until then the original stands in (decoding here, on
    # every GET and on an API thread, would let one image tie up the server).
    media_type = (meme.extensions or {}).get("image", {}).get("media_type") or "application/octet-stream"
    original = blob_response(
        store, namespace, meme.storage_key, media_type=media_type, headers={"Cache-Control": "no-store"}
    )
    if original is None:
        raise ApiError(404, "blob_missing", "the image file is missing from the blob store")
    return original


def _may_learn(request: Request, principal: Principal) -> bool:
    """Whether a GET may write feedback: the account's own request from this site."""
    if principal.via == "signed_url" or not principal.may("write"):
        return False
    return not cross_site({k.lower(): v for k, v in request.headers.items()})


# ---------------------------------------------------------------- upload, list, rename, delete

MAX_FILES_PER_REQUEST = 20
MAX_REQUEST_BYTES = UPLOAD_REQUEST_BYTES
UPLOAD_THREADS = 4
REJECTION_STATUS = {
    "unsupported_media_type": 415,
    "image_too_large": 422,
    "image_corrupt": 422,
    "quota_exceeded": 413,
    "insufficient_storage": 507,
    "blob_store_unavailable": 503,
}
_TRUE, _FALSE = {"1", "true", "on", "yes"}, {"", "0", "false", "off", "no"}


def _collection_id(session: Session, scope: ScopeContext, value: str):
    collection_id = parse_id(value, "collection")
    try:
        collections.find(session, scope, collection_id)
    except collections.CollectionError:
        raise ApiError(404, "not_found", "collection not found") from None
    return collection_id


def _relative_paths(values: list[str], files) -> list[str | None]:
    """The form's ``relative_path`` values, one per file in order (a folder import's path of each file,
    ``memegen/drake/1.png``): ``/``-separated, without empty, ``.`` or ``..`` parts; 422 ``invalid_request``
    when given for some files only."""
    if not values:
        return [None] * len(files)
    if len(values) != len(files):
        raise ApiError(422, "invalid_request", "send one relative_path per file, in the order of the files")
    cleaned: list[str | None] = []
    for value in values:
        parts = [p for p in value.replace("\\", "/").split("/") if p and p not in (".", "..")]
        cleaned.append("/".join(parts)[:1000] or None)
    return cleaned


def _upload_files(
    scope: ScopeContext, files, auto_name: bool, collection_value: str | None, paths: list[str | None]
) -> list[dict]:
    """Add each file (a few at a time: the work is mostly database round trips); results in request order."""
    sessions, store = get_sessionmaker(), blob_store()
    collection_ids = []
    if collection_value:
        with sessions.begin() as session:
            collection_ids = [_collection_id(session, scope, collection_value)]
    path_of = {id(part): path for part, path in zip(files, paths, strict=True)}

    def add(part) -> dict:
        name = part.filename.replace("\\", "/").rsplit("/", 1)[-1]
        relative = path_of[id(part)]
        folder = relative.rsplit("/", 2)[-2] if relative and "/" in relative else None
        with memory_slot(part.size):  # bounds the upload bytes in memory per process
            result = library.add_image(
                sessions,
                store,
                scope,
                part.read(),
                filename=name,
                provenance={"source": "upload", "relative_path": relative or name},
                collection_ids=collection_ids,
                auto_name=auto_name,
                folder=folder,
            )
        entry = {"filename": part.filename, "status": result.status, "meme": None, "error": None}
        if result.status in ("skipped", "failed"):
            entry["status"] = "rejected" if result.status == "skipped" else "failed"
            entry["error"] = {
                "code": result.error,
                "message": result.message,
                "status": REJECTION_STATUS.get(result.error or "", 422),
            }
        elif result.meme_id is not None:  # added or already there
            with sessions.begin() as session:
                entry["meme"] = meme_dict(session, get_meme(session, scope, result.meme_id))
        return entry

    # Repeats of the same bytes wait for the first, so the first in request order is the one created.
    seen: set[bytes] = set()
    first: list[int] = []
    repeats: list[int] = []
    for index, part in enumerate(files):
        digest = part.sha256()
        (repeats if digest in seen else first).append(index)
        seen.add(digest)
    results: list[dict[str, Any]] = [{} for _ in files]  # each filled below, in request order
    with ThreadPoolExecutor(max_workers=min(UPLOAD_THREADS, len(first)), thread_name_prefix="upload") as pool:
        for index, entry in zip(first, pool.map(add, [files[i] for i in first]), strict=False):
            results[index] = entry
    for index in repeats:
        results[index] = add(files[index])
    return results


def _check_backpressure(scope: ScopeContext, files: int) -> None:
    """429 ``queue_full`` (raised as QueueFull) before anything is stored when the scope's agent lane is full."""
    with get_sessionmaker().begin() as session:
        backpressure.check(session, scope, "agent", adding=files)


UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["files"],
                    "properties": {
                        "files": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "minItems": 1,
                            "maxItems": 20,
                        },
                        "auto_name": {"type": "boolean"},
                        "collection_id": {"type": "string", "format": "uuid"},
                        "relative_path": {
                            "type": "array",
                            "items": {"type": "string", "maxLength": 1000},
                            "maxItems": 20,
                        },
                    },
                }
            }
        },
    }
}


@router.post(
    "/api/v1/memes",
    status_code=201,
    response_model=UploadResponse,
    openapi_extra=UPLOAD_BODY,
    responses={200: {"model": UploadResponse, "description": "no meme created; a duplicate"}},
)
async def upload(request: Request, scope: ScopeContext = Depends(streaming_scope)):
    """Upload 1–20 memes as multipart field ``files`` (each ≤ ``MEWDEX_MAX_UPLOAD_BYTES``, the
    request ≤ 200 MiB, enforced while streaming): PNG, JPEG, GIF, WEBP, AVIF, HEIC, MP4 and WebM clips,
    TGS stickers — the format read from the bytes, never from the name or the part's content type (a
    file of another format is ``rejected`` with 415 ``unsupported_media_type``). Form options:
    ``auto_name`` (bool: name each new meme from its context title once analysed), ``collection_id``
    (add the memes to it) and ``relative_path`` (one per file, in order: the path it had in an imported
    folder, ``memegen/drake/1.png``; its folders name a meme with a generic file name and stay
    searchable, as for a local folder import).

    Response ``{"results": [{"filename", "status": "created"|"duplicate"|"rejected"|"failed", "meme", "error"}]}``
    in request order; ``meme`` is the meme as ``GET /api/v1/memes/{id}`` shows it (stages pending
    for a new one), ``error`` ``{"code", "message", "status"}`` for a rejection or failure. HTTP 507
    ``insufficient_storage`` (``error.details``: ``stored``, ``not_stored``) when the disk was full for
    any file (``failed``; the others' results say what was stored; 503 ``blob_store_unavailable`` the
    same way when the object store failed), else 201 when any was created,
    200 when none was but one was a duplicate, else the rejection's status (413/415/422)
    with an ``error`` beside the results. A file over the limit stops the whole request at once
    (nothing of it is added). Errors: 413 ``upload_too_large``, 415
    ``unsupported_media_type`` (not multipart), 422 ``no_files`` / ``too_many_files`` /
    ``invalid_request``, 404 ``not_found`` (collection), 429 ``queue_full`` (with ``Retry-After``) when the
    scope's agent queue is at ``MEWDEX_AGENT_BACKPRESSURE``, 429 ``too_many_uploads`` past
    ``MEWDEX_MAX_CONCURRENT_UPLOADS`` bodies streaming at once. No transaction is open while the
    body streams.
    """
    settings = get_settings()
    async with upload_slot(scope.scope_id):  # no transaction is open while the body streams
        form = await read_upload(
            request,
            max_file_bytes=settings.max_upload_bytes,
            max_request_bytes=MAX_REQUEST_BYTES,
            max_files=MAX_FILES_PER_REQUEST,
        )
    try:
        if not form.files:
            raise ApiError(422, "no_files", "send 1 to 20 images in the form field 'files'")
        flag = form.fields.get("auto_name", "").strip().lower()
        if flag not in _TRUE | _FALSE:
            raise ApiError(422, "invalid_request", "auto_name must be true or false")
        await run_in_threadpool(_check_backpressure, scope, len(form.files))
        paths = _relative_paths(form.values.get("relative_path", []), form.files)
        results = await run_in_threadpool(
            _upload_files, scope, form.files, flag in _TRUE, form.fields.get("collection_id") or None, paths
        )
    finally:
        form.close()
    statuses = {r["status"] for r in results}
    if "failed" in statuses:  # the disk is full or the blob store away: say what was stored and what was not
        stored = sum(r["status"] in ("created", "duplicate") for r in results)
        code = next(r["error"]["code"] for r in results if r["status"] == "failed")
        reason = "the disk is full" if code == "insufficient_storage" else "the blob store is unavailable"
        body = {
            "results": results,
            **error_body(
                code,
                f"{reason}: some files were not stored; send them again later",
                {"stored": stored, "not_stored": len(results) - stored},
            ),
        }
        return JSONResponse(body, status_code=REJECTION_STATUS[code])
    if "created" in statuses:
        return JSONResponse({"results": results}, status_code=201)
    if "duplicate" in statuses:
        return JSONResponse({"results": results}, status_code=200)
    codes = {r["error"]["status"] for r in results}
    status = codes.pop() if len(codes) == 1 else 422
    first = results[0]["error"]
    body = {
        "results": results,
        **error_body(
            first["code"] if len(results) == 1 else "all_rejected",
            first["message"] if len(results) == 1 else "every file was rejected",
        ),
    }
    return JSONResponse(body, status_code=status)


@router.post("/api/v1/memes/known", response_model=KnownResponse)
def known_memes(
    body: KnownRequest, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
):
    """Which contents the caller's library already holds: body ``{"sha256": [hex, ...]}`` (1–1000 SHA-256
    digests of files), answer ``{"known": [{"sha256", "meme_id"}]}`` for the ones it holds (lower case), in
    no particular order; the rest are new. Only the caller's own memes count (another account's copy of
    the same bytes is not known here). ``mewdex import`` against a server asks this before uploading, so
    known files are never sent. A write-scoped token (it is the first step of an upload). 422
    ``invalid_request`` (not hex digests, none, more than 1000)."""
    found = library.known_sha256(session, scope, body.sha256)
    return KnownResponse(known=[KnownMeme(sha256=sha, meme_id=meme_id) for sha, meme_id in sorted(found.items())])


@router.post(
    "/api/v1/memes/zip",
    response_class=StreamingResponse,
    responses={**ZIP_RESPONSE, **error_responses(404, 409)},
)
def zip_memes(body: MemeZipRequest, scope: ScopeContext = Depends(current_scope)) -> StreamingResponse:
    """Download a selection (the library's bulk "Download ZIP"): body ``{"ids": [...]}`` (1–500 of the
    caller's memes), answer a ``mewdex-collection`` v1 ZIP (``images/<name>.<ext>`` in request order and
    ``manifest.json``; it imports as a collection), streamed, ``Content-Disposition`` naming it. Errors:
    404 ``not_found`` (any id that is not one of the caller's live memes; ``details.missing``, nothing
    streamed), 409 ``blob_missing``, 422 ``invalid_request`` (no ids, or more than 500)."""
    ids = [parse_id(i) for i in body.ids]
    with get_sessionmaker().begin() as session:
        plan = packages.plan_selection(session, blob_store(), scope, ids)
    return StreamingResponse(
        packages.stream_zip(plan),
        media_type="application/zip",
        headers={"Content-Disposition": packages.content_disposition(plan.archive_name)},
    )


@router.get("/api/v1/memes", response_model=MemePage)
def list_memes(
    name: str | None = Query(None, max_length=255, description="Case-insensitive substring of the display name."),
    collection_id: str | None = Query(None),
    status: str | None = Query(None, description="Latest job status, or pending / none."),
    animated: bool | None = Query(None),
    sort: str = Query("created", description="created | updated (newest first) | name (A→Z)"),
    limit: int = Query(50, ge=1, le=200),
    cursor: str | None = Query(None, description="``next_cursor`` of the previous page"),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """``{"items": [meme...], "next_cursor": str | null}`` — pass ``next_cursor`` back as ``cursor``
    for the next page. 422 ``invalid_request`` for an unknown sort/status, ``invalid_cursor``."""
    if sort not in library.SORTS:
        raise ApiError(422, "invalid_request", f"sort must be one of {', '.join(library.SORTS)}")
    if status is not None and status not in (*library.JOB_STATUSES, "pending", "none"):
        raise ApiError(422, "invalid_request", "unknown processing status")
    if name is not None and "\x00" in name:
        raise ApiError(422, "invalid_request", "the name filter contains a NUL character")
    collection = _collection_id(session, scope, collection_id) if collection_id else None
    page = library.list_memes(
        session,
        scope,
        name=name or None,
        collection_id=collection,
        status=status,
        animated=animated,
        sort=sort,
        limit=limit,
        cursor=cursor,
    )
    return MemePage(items=memes_dto(session, page.memes), next_cursor=page.next_cursor)


def _if_match(value: str | None) -> int | None:
    """``If-Match: 3`` / ``"3"`` / ``W/"3"`` → 3; ``*`` or absent → None."""
    if value is None or value.strip() == "*":
        return None
    match = re.fullmatch(r'\s*(?:W/)?"?(\d{1,18})"?\s*', value)
    if match is None:
        raise ApiError(422, "invalid_request", "If-Match must be the meme's revision number")
    return int(match.group(1))


@router.patch("/api/v1/memes/{meme_id}", response_model=MemeDto, responses=error_responses(409, 412))
def rename_meme(
    meme_id: str,
    body: MemePatchRequest,
    if_match: str | None = Header(None),
    scope: ScopeContext = Depends(current_scope),
):
    """Rename, correct the text and/or set the tags, together: body ``{"display_name": str}``
    (normalized under the name rules; ``name_source`` becomes ``manual``), ``{"text": str | null}`` —
    what the meme says, replacing what OCR read (≤ 2000 characters; the OCR original is kept in
    ``meme_context.text_correction`` and ``"text": null`` restores it; the meme is re-indexed at once:
    keyword, vectors, a name that came from its text), ``{"tags": [str]}`` (the meme's whole tag list,
    normalised by :func:`mewdex.library.tags.normalize_tag`; the keyword index follows at once; the
    revision stays). ``If-Match: <revision>`` makes it conditional (checked once, against the meme as
    the transaction locks it). Returns the meme (``ETag``: its revision). Errors: 404 ``not_found``, 409
    ``text_not_ready`` (not analysed yet) / ``operation_in_progress``, 412 ``revision_conflict`` (a stale
    ``If-Match``), 422 ``display_name_invalid`` / ``text_too_long`` / ``text_invalid`` / ``tag_empty`` /
    ``tag_too_long`` / ``tag_invalid`` / ``too_many_tags`` / ``invalid_request`` (no field, or
    ``display_name`` / ``tags`` null). Every value is checked first, then one transaction writes them
    all (:func:`mewdex.pipeline.corrections.edit`): a refused request leaves nothing half-written."""
    from mewdex.pipeline import corrections

    corrections.edit(
        get_sessionmaker(),
        scope,
        parse_id(meme_id),
        name=body.display_name,
        text=body.text if "text" in body.model_fields_set else corrections.UNCHANGED,
        tags=body.tags,
        expected_revision=_if_match(if_match),
    )
    with get_sessionmaker().begin() as session:
        meme = get_meme(session, scope, meme_id)
        return JSONResponse(meme_dict(session, meme), headers={"ETag": f'"{meme.revision}"'})


@router.delete("/api/v1/memes/{meme_id}", status_code=204, responses=error_responses(409, 412))
def delete_meme(meme_id: str, if_match: str | None = Header(None), scope: ScopeContext = Depends(current_scope)):
    """Move the meme to the trash (``GET /api/v1/trash``): no longer listed, found or sent; its files,
    collections, tags and learning are kept for a restore until it is purged (``DELETE /api/v1/trash/{id}``,
    or ``MEWDEX_TRASH_DAYS`` later). ``If-Match: <revision>`` makes it conditional. 204; 404 ``not_found``
    (also one already in the trash); 409 ``operation_in_progress``; 412 ``revision_conflict``."""
    from mewdex.library import trash

    expected = _if_match(if_match)
    trash.move_to_trash(get_sessionmaker(), scope, parse_id(meme_id), expected_revision=expected)
    return Response(status_code=204)
