"""Re-caption (改字) and templates (issue 44): ``POST /api/v1/memes/{id}/recaption``,
``POST /api/v1/memes/{id}/template`` and the preview image ``GET /media/{id}/recaption`` (nothing
stored), all over :mod:`mewdex.pipeline.recaption`."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from mewdex.db.engine import get_sessionmaker
from mewdex.dto.memes import Meme as MemeDto
from mewdex.dto.memes import RecaptionRequest
from mewdex.dto.scopes import ScopeContext
from mewdex.library.listing import MEDIA_TYPES_BY_EXTENSION
from mewdex.pipeline import recaption as service
from mewdex.storage import blob_store
from mewdex.web.deps import current_scope, parse_id
from mewdex.web.errors import error_responses
from mewdex.web.routers.memes import binary_responses, get_meme, meme_dict

router = APIRouter(tags=["memes"])

ERRORS = error_responses(404, 409, 413, 422, 429, 503)


def _answer(scope: ScopeContext, made: service.Recaptioned) -> JSONResponse:
    with get_sessionmaker().begin() as session:
        body = meme_dict(session, get_meme(session, scope, str(made.meme_id)))
    return JSONResponse(body, status_code=201 if made.status == "created" else 200)


@router.post(
    "/api/v1/memes/{meme_id}/recaption",
    status_code=201,
    response_model=MemeDto,
    responses={200: {"model": MemeDto, "description": "the same picture was already in the library"}, **ERRORS},
)
async def recaption_meme(meme_id: str, body: RecaptionRequest, scope: ScopeContext = Depends(current_scope)):
    """Re-caption the meme (its text erased, ``text`` drawn in its place on every frame) into a **new**
    meme of the caller's library, processed like an upload; the original is not changed. Body:
    :class:`~mewdex.dto.memes.RecaptionRequest`. 201 with the new meme (``template_id``: the original;
    its display name is the caption), 200 with the existing one when the same picture is already there.
    Errors: 404 ``not_found``; 422 ``caption_empty`` / ``caption_too_long`` (over 200 characters) /
    ``no_text_boxes`` (the meme has no text and no ``boxes`` were given) / ``boxes_invalid`` /
    ``style_invalid``; 413 ``recaption_too_large`` (an animation over 300 frames or 120 million decoded
    pixels), ``image_too_large``, ``quota_exceeded``; 429 ``queue_full``; 503 ``caption_font_missing``,
    ``backend_unavailable`` (the OCR, for a meme processed before boxes were kept)."""
    uid = parse_id(meme_id)
    style = service.CaptionStyle(color=body.color, outline=body.outline, font_size=body.font_size)
    made = await run_in_threadpool(
        service.recaption,
        get_sessionmaker(),
        blob_store(),
        scope,
        uid,
        body.text,
        boxes=body.boxes,
        style=style,
        place=body.place,
    )
    return _answer(scope, made)


@router.post(
    "/api/v1/memes/{meme_id}/template",
    status_code=201,
    response_model=MemeDto,
    responses={
        200: {"model": MemeDto, "description": "the meme has no text (it is its own template), or the copy exists"},
        **ERRORS,
    },
)
async def make_template(meme_id: str, scope: ScopeContext = Depends(current_scope)):
    """A text-free copy of the meme (its caption erased on every frame) as a new meme with
    ``template_id`` naming the original, to caption later: 201. A meme with no text is already a
    template: 200 with the meme itself. Errors as for re-captioning."""
    made = await run_in_threadpool(service.make_template, get_sessionmaker(), blob_store(), scope, parse_id(meme_id))
    return _answer(scope, made)


_PREVIEW_RESPONSE = binary_responses(
    "the re-captioned first frame (PNG, or JPEG for a JPEG)", ("image/png", "image/jpeg")
)


@router.get("/media/{meme_id}/recaption", response_class=Response, responses=_PREVIEW_RESPONSE)
async def preview(
    meme_id: str,
    text: str = Query(..., max_length=2000),
    color: str | None = Query(None, max_length=16),
    outline: str | None = Query(None, max_length=16),
    font_size: int | None = Query(None),
    place: str | None = Query(None, pattern="^(top|bottom)$"),
    scope: ScopeContext = Depends(current_scope),
):
    """The re-captioned first frame as an image (PNG, or JPEG for a JPEG), stored nowhere: the detail
    page's live preview, "Make a meme" on the search page, and "copy without saving". ``place``: as in
    :class:`~mewdex.dto.memes.RecaptionRequest`. Errors as for ``POST .../recaption``."""
    style = service.CaptionStyle(color=color or None, outline=outline or None, font_size=font_size)
    made = await run_in_threadpool(
        service.recaption,
        get_sessionmaker(),
        blob_store(),
        scope,
        parse_id(meme_id),
        text,
        style=style,
        save=False,
        place=place or None,
    )
    assert made.rendered is not None
    media_type = MEDIA_TYPES_BY_EXTENSION.get(made.rendered.extension, "image/png")
    return Response(made.rendered.data, media_type=media_type, headers={"Cache-Control": "private, no-store"})
