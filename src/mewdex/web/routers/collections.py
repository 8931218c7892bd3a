"""Collections API and collection ZIP packages (``/api/v1/collections``)."""

from __future__ import annotations

from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response, StreamingResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from mewdex.config import get_settings
from mewdex.db.engine import get_sessionmaker
from mewdex.dto.collections import (
    AddItemsRequest,
    AddItemsResponse,
    Collection,
    CollectionBrief,
    CollectionList,
    CollectionNameRequest,
    ImportResponse,
)
from mewdex.dto.scopes import ScopeContext
from mewdex.library import collections, packages, sharing
from mewdex.library.collections import MemeCollection
from mewdex.library.listing import meme_brief
from mewdex.storage import blob_store
from mewdex.web.deps import current_scope, current_user_id, db_session, parse_id, streaming_scope
from mewdex.web.errors import ApiError
from mewdex.web.routers.memes import (
    IMAGE_RESPONSE,
    THUMBNAIL_RESPONSE,
    ZIP_RESPONSE,
    file_response,
    thumbnail_response,
)
from mewdex.web.uploads import upload_slot

router = APIRouter(prefix="/api/v1/collections", tags=["collections"])


def collection_brief(
    collection: MemeCollection,
    item_count: int,
    role: str = "owner",
    owner: str | None = None,
    use_in_chat: bool | None = None,
) -> CollectionBrief:
    return CollectionBrief(
        id=str(collection.id),
        name=collection.name,
        item_count=item_count,
        created_at=collection.created_at.isoformat(),
        updated_at=collection.updated_at.isoformat(),
        role=role,  # type: ignore[arg-type]  # one of the Literal's values (library.sharing.access)
        owner=owner,
        use_in_chat=use_in_chat,
    )


def member_media_url(collection_id, meme_id) -> str:
    """A shared collection's meme as a member reads it (never the owner's ``/media/{id}``)."""
    return sharing.member_media_path(collection_id, meme_id)


def collection_dict(collection: MemeCollection, item_count: int) -> dict:
    return collection_brief(collection, item_count).model_dump()


@router.get("", response_model=CollectionList)
def list_collections(
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
    user_id: UUID | None = Depends(current_user_id),
):
    """``{"collections": [{"id", "name", "item_count", "created_at", "updated_at", "role", "owner",
    "use_in_chat"}]}``: the caller's own by name (``role`` ``owner``, ``use_in_chat`` null), then those
    shared with the caller's account by name (``role`` ``viewer``/``editor``, ``owner`` the owning
    account's email, ``use_in_chat`` the member's choice of ``PUT /{id}/membership``)."""
    own = [collection_brief(c, n) for c, n in collections.list_collections(session, scope)]
    shared = [
        collection_brief(
            s.collection,
            collections.count_items(session, ScopeContext(s.collection.scope_id), s.collection.id),
            s.role,
            s.owner_email,
            s.use_in_chat,
        )
        for s in sharing.shared_with(session, user_id)
    ]
    return CollectionList(collections=own + shared)


@router.post("", status_code=201, response_model=CollectionBrief)
def create_collection(
    body: CollectionNameRequest, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
):
    """``{"name"}`` → 201 the new collection; 422 ``collection_name_invalid``, 409 ``collection_name_taken``."""
    collection = collections.create(session, scope, body.name)
    return collection_brief(collection, 0)


@router.post(
    "/import",
    status_code=201,
    response_model=ImportResponse,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["file"],
                        "properties": {"file": {"type": "string", "format": "binary"}, "name": {"type": "string"}},
                    }
                }
            },
        }
    },
)
async def import_package(request: Request, scope: ScopeContext = Depends(streaming_scope)):
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
            packages.import_package,
            get_sessionmaker(),
            blob_store(),
            scope,
            upload.file,
            source_name=upload.filename or "",
            name=fields.get("name"),
        )
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


@router.get("/{collection_id}", response_model=Collection)
def read_collection(
    collection_id: str,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
    user_id: UUID | None = Depends(current_user_id),
):
    """The collection with ``items`` (meme summaries in member order): the caller's own, or one shared
    with the caller's account (its items' ``media_url``/``thumbnail_url`` then point at
    ``/api/v1/collections/{id}/media/{meme_id}``); 404 ``not_found``."""
    granted = sharing.access(session, scope, user_id, parse_id(collection_id, "collection"))
    items = [meme_brief(m) for m in collections.members(session, granted.owner, granted.collection.id)]
    owner, use_in_chat = None, None
    if granted.role != "owner":
        owner, use_in_chat = sharing.owner_email(session, granted.owner.scope_id), granted.use_in_chat
        for item in items:
            item.media_url = item.thumbnail_url = member_media_url(granted.collection.id, item.id)
    brief = collection_brief(granted.collection, len(items), granted.role, owner, use_in_chat)
    return Collection(**brief.model_dump(), items=items)


@router.get("/{collection_id}/media/{meme_id}", response_class=Response, responses=IMAGE_RESPONSE)
def member_media(
    collection_id: str,
    meme_id: str,
    request: Request,
    download: bool = Query(False, description="true: ``Content-Disposition: attachment``"),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
    user_id: UUID | None = Depends(current_user_id),
) -> Response:
    """The original bytes of a meme of the collection (the caller's own or one shared with it); 404
    ``not_found`` for a meme outside it, in the trash, or a collection the caller may not read."""
    granted = sharing.access(session, scope, user_id, parse_id(collection_id, "collection"))
    meme = sharing.collection_meme(session, granted, parse_id(meme_id))
    return file_response(request, session, granted.owner, meme, download=download, cache="private, no-cache")


@router.get("/{collection_id}/media/{meme_id}/thumbnail", response_class=Response, responses=THUMBNAIL_RESPONSE)
def member_thumbnail(
    collection_id: str,
    meme_id: str,
    request: Request,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
    user_id: UUID | None = Depends(current_user_id),
) -> Response:
    """The still thumbnail of a meme of the collection (the caller's own or one shared with it): what a
    member's page and chat cards show; 404 ``not_found`` as for its original."""
    granted = sharing.access(session, scope, user_id, parse_id(collection_id, "collection"))
    meme = sharing.collection_meme(session, granted, parse_id(meme_id))
    return thumbnail_response(request, session, granted.owner, meme, cache="private, no-cache")


@router.patch("/{collection_id}", response_model=CollectionBrief)
def rename_collection(
    collection_id: str,
    body: CollectionNameRequest,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """``{"name"}`` → the renamed collection; 404, 422 ``collection_name_invalid``, 409 ``collection_name_taken``."""
    collection = collections.rename(session, scope, parse_id(collection_id, "collection"), body.name)
    return collection_brief(collection, collections.count_items(session, scope, collection.id))


@router.delete("/{collection_id}", status_code=204)
def delete_collection(
    collection_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
) -> Response:
    """Delete the collection (its memes stay in the library); 204, or 404 ``not_found``."""
    collections.remove(session, scope, parse_id(collection_id, "collection"))
    return Response(status_code=204)


@router.post("/{collection_id}/items", response_model=AddItemsResponse, response_model_exclude_none=True)
def add_items(
    collection_id: str,
    body: AddItemsRequest,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
    user_id: UUID | None = Depends(current_user_id),
):
    """``{"meme_ids": [...]}`` → ``{"added", "already_members", "item_count"}``; all or nothing:
    422 ``memes_not_found`` (details ``missing``) when any id is missing or another scope's.

    An editor of a collection shared with it adds memes of its own library: each is copied into the
    owner's library (``provenance.origin`` says from where) and added (``items`` reports each copy)."""
    cid = parse_id(collection_id, "collection")
    granted = sharing.access(session, scope, user_id, cid, need="edit")
    if granted.role != "owner":
        result = sharing.editor_add(get_sessionmaker(), blob_store(), scope, user_id, cid, body.meme_ids)
        return {**result, "item_count": collections.count_items(session, granted.owner, cid)}
    result = collections.add_members(session, scope, cid, body.meme_ids)
    return {**result, "item_count": collections.count_items(session, scope, cid)}


@router.delete("/{collection_id}/items/{meme_id}", status_code=204)
def remove_item(
    collection_id: str,
    meme_id: str,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
) -> Response:
    """Take a meme out of the collection (the meme stays); 204, or 404 ``not_found``."""
    collections.remove_member(session, scope, parse_id(collection_id, "collection"), parse_id(meme_id))
    return Response(status_code=204)


@router.get("/{collection_id}/export", response_class=StreamingResponse, responses=ZIP_RESPONSE)
def export_collection(collection_id: str, scope: ScopeContext = Depends(current_scope)) -> StreamingResponse:
    """The collection as a ``mewdex-collection`` v1 ZIP, streamed (``Content-Disposition`` names it)."""
    cid = parse_id(collection_id, "collection")
    with get_sessionmaker().begin() as session:
        plan = packages.plan_export(session, blob_store(), scope, cid)
    return StreamingResponse(
        packages.stream_zip(plan),
        media_type="application/zip",
        headers={"Content-Disposition": packages.content_disposition(plan.archive_name)},
    )
