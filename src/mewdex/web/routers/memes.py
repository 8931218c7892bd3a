"""``GET /api/v1/memes/{id}`` and ``GET /media/{id}`` (original bytes)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from mewdex.db.models import ImageProcessingJob, ImageProcessingStage, Meme, ScopeContext
from mewdex.library.images import EXTENSIONS, MEDIA_TYPES
from mewdex.library.scopes import storage_namespace
from mewdex.library.thumbnails import thumbnail_status
from mewdex.search.image_search import near_duplicates_of
from mewdex.storage import blob_store
from mewdex.web.deps import current_scope, db_session, parse_id
from mewdex.web.errors import ApiError

router = APIRouter(tags=["memes"])
MEDIA_TYPES_BY_EXTENSION = {EXTENSIONS[f]: MEDIA_TYPES[f] for f in EXTENSIONS}


def get_meme(session: Session, scope: ScopeContext, meme_id: str) -> Meme:
    meme = session.execute(
        select(Meme).where(Meme.scope_id == scope.scope_id, Meme.id == parse_id(meme_id))
    ).scalar_one_or_none()
    if meme is None:
        raise ApiError(404, "not_found", "meme not found")
    return meme


def meme_dict(session: Session, meme: Meme) -> dict:
    job = session.execute(
        select(ImageProcessingJob)
        .where(ImageProcessingJob.scope_id == meme.scope_id, ImageProcessingJob.meme_id == meme.id)
        .order_by(ImageProcessingJob.created_at.desc())
        .limit(1)
    ).scalar_one_or_none()
    stages = {}
    if job is not None:
        for stage in session.execute(
            select(ImageProcessingStage).where(
                ImageProcessingStage.scope_id == job.scope_id, ImageProcessingStage.job_id == job.id
            )
        ).scalars():
            stages[stage.stage] = {
                "status": stage.status,
                "planned": stage.planned,
                "skip_reason": stage.skip_reason,
                "attempts": stage.attempt_count,
                "error": stage.error,
            }
    image = meme.extensions.get("image", {})
    return {
        "id": str(meme.id),
        "display_name": meme.display_name,
        "sha256": meme.sha256,
        "extension": meme.extension,
        "size_bytes": meme.size_bytes,
        "media_type": MEDIA_TYPES_BY_EXTENSION[meme.extension],
        **{k: image.get(k) for k in ("width", "height", "frames", "duration_ms", "animated")},
        "media_url": f"/media/{meme.id}",
        "thumbnail_url": f"/media/{meme.id}/thumbnail",
        "animated_preview_url": f"/media/{meme.id}/thumbnail?animated=1" if image.get("animated") else None,
        "thumbnails": thumbnail_status(session, meme),
        "near_duplicates": near_duplicates_of(session, meme.scope_id, meme.id),
        "context_status": meme.context_status,
        "meme_context": meme.meme_context,
        "provenance": meme.provenance,
        "job": None if job is None else {"id": str(job.id), "status": job.status, "error": job.error},
        "stages": stages,
        "revision": meme.revision,
        "created_at": meme.created_at.isoformat(),
        "updated_at": meme.updated_at.isoformat(),
    }


@router.get("/api/v1/memes/{meme_id}")
def read_meme(meme_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    """The meme with its image facts, context and stage statuses; 404 ``not_found``."""
    return meme_dict(session, get_meme(session, scope, meme_id))


@router.api_route("/media/{meme_id}", methods=["GET", "HEAD"])
def media(meme_id: str, request: Request, session: Session = Depends(db_session),
          scope: ScopeContext = Depends(current_scope)):
    """Original bytes with their real ``Content-Type``, ``ETag`` (sha256) and a year-long immutable cache."""
    meme = get_meme(session, scope, meme_id)
    etag = f'"{meme.sha256}"'
    headers = {"ETag": etag, "Cache-Control": "private, max-age=31536000, immutable"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    namespace = storage_namespace(session, scope.scope_id)
    path = blob_store().path(namespace, meme.storage_key)
    if not path.is_file():
        raise ApiError(404, "blob_missing", "the image file is missing from the blob store")
    return FileResponse(path, media_type=MEDIA_TYPES_BY_EXTENSION[meme.extension], headers=headers)
