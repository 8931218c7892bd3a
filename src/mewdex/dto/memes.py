"""Meme shapes: the brief one (grids, collection members, search hits, near-duplicates, import
reports; search hits carry only its :class:`MemeRef` core) and the full one
(``GET /api/v1/memes/{id}``, upload results, rename)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

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


class WatchedFile(Dto):
    """Where the meme's file lies in a watched folder (``MEWDEX_WATCH_DIRS``, ``mewdex watch``): the folder, the
    path below it, and since when the file is gone (deleted or moved out; the meme stays)."""

    folder: str
    path: str
    missing_since: Timestamp | None = None


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
    watched_file: WatchedFile | None = None
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


#: The most hashes one ``POST /api/v1/memes/known`` asks about.
MAX_KNOWN_HASHES = 1000


class KnownRequest(Dto):
    """``{"sha256": [hex digest, ...]}``: which of these contents the caller's library holds."""

    sha256: list[Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$")]] = Field(
        min_length=1, max_length=MAX_KNOWN_HASHES, description="SHA-256 hex digests of file contents (1–1000)"
    )


class KnownMeme(Dto):
    sha256: str
    meme_id: str


class KnownResponse(Dto):
    """The asked hashes the caller's library holds (lower case), each with its meme; the others are new."""

    known: list[KnownMeme]


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
