"""Collections API and collection ZIP packages (``/api/v1/collections``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Request
from fastapi.responses import Response, StreamingResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from mewdex.config import get_settings

from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import MemeCollection, ScopeContext
from mewdex.library import collections, packages
from mewdex.storage import blob_store
from mewdex.web.deps import current_scope, db_session, parse_id, streaming_scope
from mewdex.web.uploads import upload_slot
from mewdex.web.errors import ApiError

router = APIRouter(prefix="/api/v1/collections", tags=["collections"])


def _api_error(exc: collections.CollectionError | packages.PackageError) -> ApiError:
    return ApiError(exc.status, exc.code, exc.message, exc.details)


def collection_dict(collection: MemeCollection, item_count: int) -> dict:
    return {
        "id": str(collection.id),
        "name": collection.name,
        "item_count": item_count,
        "created_at": collection.created_at.isoformat(),
        "updated_at": collection.updated_at.isoformat(),
    }


def _field(body: Any, name: str) -> Any:
    if not isinstance(body, dict) or name not in body:
        raise ApiError(422, "invalid_request", f"the body needs {name!r}")
    return body[name]


@router.get("")
def list_collections(session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)) -> dict:
    """``{"collections": [{"id", "name", "item_count", "created_at", "updated_at"}]}`` by name."""
    return {"collections": [collection_dict(c, n) for c, n in collections.list_collections(session, scope)]}


@router.post("", status_code=201)
def create_collection(body: Any = Body(None), session: Session = Depends(db_session),
                      scope: ScopeContext = Depends(current_scope)) -> dict:
    """``{"name"}`` → 201 the new collection; 422 ``collection_name_invalid``, 409 ``collection_name_taken``."""
    try:
        collection = collections.create(session, scope, _field(body, "name"))
    except collections.CollectionError as exc:
        raise _api_error(exc) from None
    return collection_dict(collection, 0)


@router.post("/import", status_code=201)
async def import_package(request: Request, scope: ScopeContext = Depends(streaming_scope)) -> dict:
    """Multipart ``file`` (a ``mewdex-collection`` ZIP or a plain ZIP of images), optional ``name``.

    Nothing is written unless the whole archive passes the preflight (see
    :mod:`mewdex.library.packages`). 201 ``{"collection", "items": [{"name", "status", "meme", "error"}]}``;
    413/422 with a stable code (``unsafe_path``, ``package_too_large``, ``zip_invalid``…) otherwise.
    A taken collection name gets a `` (2)``-style suffix.
    """
    async with upload_slot(scope.scope_id):  # no transaction is open while the body streams
        upload, fields = await receive_zip_upload(request)
    try:
        result = await _run_in_thread(
            packages.import_package, get_sessionmaker(), blob_store(), scope, upload.file,
            source_name=upload.filename or "", name=fields.get("name"),
        )
    except packages.PackageError as exc:
        raise _api_error(exc) from None
    finally:
        upload.file.close()
    return result.as_dict()


async def _run_in_thread(fn, *args, **kwargs):
    return await run_in_threadpool(fn, *args, **kwargs)


async def receive_zip_upload(request: Request) -> tuple[UploadFile, dict[str, str]]:
    """The multipart ``file`` part (spooled to an anonymous temp file) and the text fields.

    The body is counted as it arrives, whatever Content-Length says: past the package limit
    (``zip_max_total_bytes`` + 1 MiB of multipart overhead) it answers 413 ``package_too_large``.
    """
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise ApiError(415, "unsupported_media_type", "send the ZIP as multipart/form-data (field 'file')")
    limit = get_settings().zip_max_total_bytes + 1024 * 1024

    async def counted():
        received = 0
        async for chunk in request.stream():
            received += len(chunk)
            if received > limit:
                raise ApiError(413, "package_too_large", f"the upload is over {limit} bytes", {"limit": limit})
            yield chunk

    try:
        form = await MultiPartParser(request.headers, counted(), max_files=1, max_fields=8).parse()
    except MultiPartException as exc:
        raise ApiError(422, "invalid_request", f"the multipart body is not valid: {exc.message}") from None
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise ApiError(422, "invalid_request", "the multipart field 'file' (the ZIP) is missing")
    fields = {k: v for k, v in form.multi_items() if isinstance(v, str)}
    return upload, fields


@router.get("/{collection_id}")
def read_collection(collection_id: str, session: Session = Depends(db_session),
                    scope: ScopeContext = Depends(current_scope)) -> dict:
    """The collection with ``items`` (meme summaries in member order); 404 ``not_found``."""
    try:
        collection = collections.find(session, scope, parse_id(collection_id, "collection"))
    except collections.CollectionError as exc:
        raise _api_error(exc) from None
    items = collections.members(session, scope, collection.id)
    return {**collection_dict(collection, len(items)), "items": [collections.meme_summary(m) for m in items]}


@router.patch("/{collection_id}")
def rename_collection(collection_id: str, body: Any = Body(None), session: Session = Depends(db_session),
                      scope: ScopeContext = Depends(current_scope)) -> dict:
    """``{"name"}`` → the renamed collection; 404, 422 ``collection_name_invalid``, 409 ``collection_name_taken``."""
    try:
        collection = collections.rename(session, scope, parse_id(collection_id, "collection"), _field(body, "name"))
    except collections.CollectionError as exc:
        raise _api_error(exc) from None
    return collection_dict(collection, collections.count_items(session, scope, collection.id))


@router.delete("/{collection_id}", status_code=204)
def delete_collection(collection_id: str, session: Session = Depends(db_session),
                      scope: ScopeContext = Depends(current_scope)) -> Response:
    """Delete the collection (its memes stay in the library); 204, or 404 ``not_found``."""
    try:
        collections.remove(session, scope, parse_id(collection_id, "collection"))
    except collections.CollectionError as exc:
        raise _api_error(exc) from None
    return Response(status_code=204)


@router.post("/{collection_id}/items")
def add_items(collection_id: str, body: Any = Body(None), session: Session = Depends(db_session),
              scope: ScopeContext = Depends(current_scope)) -> dict:
    """``{"meme_ids": [...]}`` → ``{"added", "already_members", "item_count"}``; all or nothing:
    422 ``memes_not_found`` (details ``missing``) when any id is missing or another scope's."""
    cid = parse_id(collection_id, "collection")
    try:
        result = collections.add_members(session, scope, cid, _field(body, "meme_ids"))
    except collections.CollectionError as exc:
        raise _api_error(exc) from None
    return {**result, "item_count": collections.count_items(session, scope, cid)}


@router.delete("/{collection_id}/items/{meme_id}", status_code=204)
def remove_item(collection_id: str, meme_id: str, session: Session = Depends(db_session),
                scope: ScopeContext = Depends(current_scope)) -> Response:
    """Take a meme out of the collection (the meme stays); 204, or 404 ``not_found``."""
    try:
        collections.remove_member(session, scope, parse_id(collection_id, "collection"), parse_id(meme_id))
    except collections.CollectionError as exc:
        raise _api_error(exc) from None
    return Response(status_code=204)


@router.get("/{collection_id}/export")
def export_collection(collection_id: str, scope: ScopeContext = Depends(current_scope)) -> StreamingResponse:
    """The collection as a ``mewdex-collection`` v1 ZIP, streamed (``Content-Disposition`` names it)."""
    cid = parse_id(collection_id, "collection")
    try:
        with get_sessionmaker().begin() as session:
            plan = packages.plan_export(session, blob_store(), scope, cid)
    except (collections.CollectionError, packages.PackageError) as exc:
        raise _api_error(exc) from None
    return StreamingResponse(
        packages.stream_zip(plan),
        media_type="application/zip",
        headers={"Content-Disposition": packages.content_disposition(plan.archive_name)},
    )
