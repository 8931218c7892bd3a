"""Meme shapes: the brief one (grids, collection members, search hits, near-duplicates, import
reports; search hits carry only its :class:`MemeRef` core) and the full one
(``GET /api/v1/memes/{id}``, upload results, rename)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from mewdex.dto.common import Dto, JsonObject, Timestamp


class MemeRef(Dto):
    """The least a meme is shown with: identity, name, content hash and its bytes' URL (search hits
    extend it; every other meme shape extends :class:`MemeBrief`)."""

    id: str
    display_name: str
    sha256: str
    media_url: str = Field(description="``/media/{id}``: the original bytes")


class MemeBrief(MemeRef):
    """A meme in a list: :class:`MemeRef` plus format, size, thumbnail and creation time."""

    extension: str
    size_bytes: int
    thumbnail_url: str = Field(description="``/media/{id}/thumbnail``: the still WEBP thumbnail")
    created_at: Timestamp


class NearDuplicate(MemeBrief):
    """The other meme of a near-duplicate pair: ``duplicate_of`` (this meme duplicates that older
    one) or ``duplicated_by``; ``kind``: ``duplicate`` (same picture, same text: one can go) or
    ``variant`` (same template or shot, another caption)."""

    relation: Literal["duplicate_of", "duplicated_by"]
    kind: Literal["duplicate", "variant"]
    phash_distance: int | None = None
    cosine: float | None = None


class JobBrief(Dto):
    """A processing job in brief: the latest job of a meme."""

    id: str
    status: str
    error: JsonObject | None = None


class StageStatus(Dto):
    """One stage of a meme's latest job."""

    status: str
    planned: bool
    skip_reason: str | None = None
    attempts: int
    error: JsonObject | None = None


class Meme(MemeBrief):
    """The full meme: image facts, derived data and the stage statuses of its latest job."""

    media_type: str
    width: int | None = None
    height: int | None = None
    frames: int | None = None
    duration_ms: int | None = None
    animated: bool | None = None
    animated_preview_url: str | None = None
    thumbnails: dict[str, str] = Field(description="``{profile: status}`` of the current thumbnails")
    near_duplicates: list[NearDuplicate]
    context_status: str
    meme_context: JsonObject
    provenance: JsonObject
    template_id: str | None = Field(
        default=None, description="the meme this one was re-captioned from or made a template of (issue 44)"
    )
    job: JobBrief | None = None
    stages: dict[str, StageStatus]
    revision: int
    updated_at: Timestamp


class MemePage(Dto):
    """A page of memes; pass ``next_cursor`` back as ``cursor`` (null on the last page)."""

    items: list[Meme]
    next_cursor: str | None = None


class RenameRequest(Dto):
    display_name: str


class UploadError(Dto):
    code: str
    message: str
    status: int


class UploadResult(Dto):
    filename: str
    status: Literal["created", "duplicate", "rejected"]
    meme: Meme | None = None
    error: UploadError | None = None


class UploadResponse(Dto):
    """Results in request order; ``error`` beside them when every file was rejected."""

    results: list[UploadResult]
    error: Any = None


class RecaptionRequest(Dto):
    """A new caption for a meme (``POST /api/v1/memes/{id}/recaption``): ``text`` (1–200 characters,
    line breaks kept: one line per text block when the counts match), ``boxes`` (``[x0, y0, x1, y1]``
    pixels of the upright image to write in; default: the caption lines the OCR read), and the style —
    ``color``/``outline`` ``#rrggbb`` (``outline: "none"``: no outline; default: as the old text),
    ``font_size`` in pixels (default: auto-fit). ``GET /media/{id}/recaption`` previews the same
    without storing anything."""

    text: str = Field(max_length=2000)
    boxes: list[list[int]] | None = Field(default=None, max_length=20)
    color: str | None = Field(default=None, max_length=16)
    outline: str | None = Field(default=None, max_length=16)
    font_size: int | None = None
