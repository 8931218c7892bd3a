"""Re-caption a meme of the library, or make a text-free template of it (issue 44) — the one service
the API, the pages, the CLI, the assistant/MCP tool ``make_meme`` and the chat reply call.

The pixels are :mod:`mewdex.library.recaption`'s; this module finds the text boxes (the caption lines
the context stage stored with their boxes in ``memes.meme_context.ocr_lines``, else the OCR reads the
image now: memes processed before boxes were kept, or not processed yet) and adds the result through
the upload path (:func:`mewdex.library.memes.add_image`: quota, exact-duplicate check, journal,
processing job) to the caller's library with ``provenance = {"source": "recaption" | "template",
"template_id": <original id>, "caption": ...}``. The original is never written to; nothing is stored
when anything fails.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from mewdex.config import get_settings
from mewdex.db.models import Meme, ScopeContext
from mewdex.inference import models
from mewdex.inference.errors import BackendUnavailable
from mewdex.library import memes as library
from mewdex.library.images import ImageError, load_frames
from mewdex.library.recaption import (
    CaptionStyle,
    RecaptionError,
    Rendered,
    TextBox,
    boxes_from_ocr,
    clean_text,
    render,
)
from mewdex.library.scopes import storage_namespace
from mewdex.pipeline.context import clean_ocr_lines
from mewdex.queue import backpressure

__all__ = [
    "CaptionStyle",
    "RecaptionError",
    "Recaptioned",
    "recaption",
    "recaption_image",
    "make_template",
    "text_boxes",
]


@dataclass
class Recaptioned:
    """What a re-caption made: ``status`` ``created`` | ``duplicate`` (the same picture was in the
    library: its id) | ``preview`` (not stored) | ``template`` (the meme has no text: it is its own
    template); ``meme_id`` (None for a preview), the image (``rendered``; None for ``template``)."""

    status: str
    meme_id: str | None
    rendered: Rendered | None
    template_id: str


def text_boxes(meme: Meme | None, data: bytes) -> list[TextBox]:
    """The boxes of the meme's caption lines: those stored by the context stage, else read now with
    the OCR (``backend_unavailable`` when it cannot load; ``meme`` None: an image of no library, read
    now). Empty when the image has no text."""
    stored = ((meme.meme_context or {}) if meme is not None else {}).get("ocr_lines") or []
    boxes = boxes_from_ocr([line for line in stored if isinstance(line, dict)])
    if boxes:
        return boxes
    try:
        frames = load_frames(data, indices="first_middle", max_pixels=get_settings().max_pixels)
        lines = models.ocr_engine().read(frames)
    except ImageError as exc:
        raise RecaptionError(exc.code, exc.message) from None
    except BackendUnavailable as exc:
        raise RecaptionError("backend_unavailable", str(exc)) from None
    return boxes_from_ocr(clean_ocr_lines(lines, image_size=frames[0].size))


def _original(sessions: sessionmaker[Session], store, scope: ScopeContext, meme_id: Any) -> tuple[Meme, bytes]:
    with sessions.begin() as session:
        meme = library.find(session, scope, meme_id)
        if meme is None:
            raise RecaptionError("not_found", "meme not found")
        session.expunge(meme)
        namespace = storage_namespace(session, scope.scope_id)
    try:
        data = store.read_bytes(namespace, meme.storage_key)
    except FileNotFoundError:
        raise RecaptionError("blob_missing", "the image file is missing from the blob store") from None
    return meme, data


def _file_name(text: str, extension: str) -> str:
    """A file name whose stem is the caption (the new meme's display name): one line, no path or
    control characters, at most 80 characters."""
    stem = re.sub(r"[\x00-\x1f\x7f/\\]+", " ", " ".join(text.split())).strip(" .")[:80].strip(" .")
    return f"{stem or 'meme'}{extension}"


def _store(
    sessions: sessionmaker[Session], store, scope: ScopeContext, rendered: Rendered, name: str, provenance: dict
) -> tuple[str, str]:
    """Add the image through the upload path; (status, meme id). Raises the upload's refusal codes."""
    with sessions.begin() as session:
        backpressure.check(session, scope, "agent", adding=1)  # QueueFull: 429 queue_full
    result = library.add_image(
        sessions, store, scope, rendered.data, filename=_file_name(name, rendered.extension), provenance=provenance
    )
    if result.status in ("skipped", "failed") or result.meme_id is None:
        raise RecaptionError(result.error or "image_corrupt", result.message or "the image could not be stored")
    return result.status, result.meme_id


def recaption(
    sessions: sessionmaker[Session],
    store,
    scope: ScopeContext,
    meme_id: Any,
    text: str,
    *,
    boxes: Sequence[Sequence[int]] | None = None,
    style: CaptionStyle | None = None,
    save: bool = True,
    all_frames: bool = False,
    place: str | None = None,
) -> Recaptioned:
    """Re-caption the scope's meme ``meme_id`` with ``text`` (see :func:`mewdex.library.recaption.render`
    for the drawing; ``boxes``: ``[x0, y0, x1, y1]`` to write in instead of the OCR's; ``place``:
    ``top``/``bottom``, a band written over the picture, nothing erased — a text-free template's
    caption). ``save``: add the result to the library as a new meme naming the original as
    ``template_id`` (its display name is the caption; processed like an upload), else only return the
    image: its first frame (a preview), every frame with ``all_frames``.

    Raises :class:`RecaptionError`: ``not_found``, ``caption_empty``, ``caption_too_long``,
    ``no_text_boxes`` (no boxes given and the OCR reads none), ``boxes_invalid``, ``style_invalid``,
    ``recaption_too_large``, ``caption_font_missing``, ``backend_unavailable``, ``blob_missing``, the
    image and upload codes (``image_too_large``, ``quota_exceeded``, ``insufficient_storage``...);
    :class:`mewdex.queue.backpressure.QueueFull` when the scope's processing queue is full."""
    meme, data = _original(sessions, store, scope, meme_id)
    chosen = [_box(b) for b in boxes] if boxes else None  # none or an empty list: the OCR's
    if place is not None:  # a band of the picture, over it (render: nothing erased)
        chosen = []
    elif chosen is None:
        clean_text(text)  # an empty or over-long caption fails before the OCR runs
        chosen = text_boxes(meme, data)
    preview = not save and not all_frames
    limit = get_settings().max_pixels
    rendered = render(
        data, text, chosen, style or CaptionStyle(), first_frame_only=preview, max_pixels=limit, place=place
    )
    if not save:
        return Recaptioned("preview", None, rendered, str(meme.id))
    provenance = {"source": "recaption", "template_id": str(meme.id), "caption": " ".join(text.split())[:200]}
    status, new_id = _store(sessions, store, scope, rendered, text, provenance)
    return Recaptioned(status, new_id, rendered, str(meme.id))


def recaption_image(
    sessions: sessionmaker[Session],
    store,
    scope: ScopeContext,
    data: bytes,
    text: str,
    *,
    save: bool = False,
    place: str | None = None,
    provenance: dict | None = None,
) -> Recaptioned:
    """Re-caption image bytes of no library (an image a chat sent): as :func:`recaption` with every
    frame, the boxes read by the OCR now (or the ``place`` band). ``save``: added to the scope's
    library like an upload (``provenance`` plus ``source: recaption`` and the caption), else only
    returned (``status="preview"``). Raises as :func:`recaption`."""
    chosen: list[TextBox] = []
    if place is None:
        clean_text(text)
        chosen = text_boxes(None, data)
    rendered = render(data, text, chosen, CaptionStyle(), max_pixels=get_settings().max_pixels, place=place)
    if not save:
        return Recaptioned("preview", None, rendered, "")
    made = {**(provenance or {}), "source": "recaption", "caption": " ".join(text.split())[:200]}
    status, new_id = _store(sessions, store, scope, rendered, text, made)
    return Recaptioned(status, new_id, rendered, "")


def make_template(sessions: sessionmaker[Session], store, scope: ScopeContext, meme_id: Any) -> Recaptioned:
    """A text-free copy of the scope's meme (its caption boxes erased on every frame), added like an
    upload with ``template_id`` naming the original; a meme with no text is already a template
    (``status="template"``, its own id, nothing stored). Raises as :func:`recaption`."""
    meme, data = _original(sessions, store, scope, meme_id)
    boxes = text_boxes(meme, data)
    if not boxes:
        return Recaptioned("template", str(meme.id), None, str(meme.id))
    rendered = render(data, None, boxes, max_pixels=get_settings().max_pixels)
    provenance = {"source": "template", "template_id": str(meme.id)}
    status, new_id = _store(sessions, store, scope, rendered, f"{meme.display_name} template", provenance)
    return Recaptioned(status, new_id, rendered, str(meme.id))


def _box(value: Sequence[int]) -> TextBox:
    if len(value) != 4 or not all(isinstance(v, int) for v in value):
        raise RecaptionError("boxes_invalid", "each box is [x0, y0, x1, y1] in whole pixels")
    return TextBox(*value)
