"""Meme shapes: the brief one (grids, collection members, search hits, near-duplicates, import
reports; search hits carry only its :class:`MemeRef` core) and the full one
(``GET /api/v1/memes/{id}``, upload results, rename)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

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
    template_id: str | None = Field(
        default=None, description="the meme this one was re-captioned from or made a template of (issue 44)"
    )
    watched_file: WatchedFile | None = None
    job: JobBrief | None = None
    stages: dict[str, StageStatus]
    revision: int
    updated_at: Timestamp
    tags: list[str] = Field(default_factory=list, description="the meme's tags, sorted (normalised names)")


class PopularMeme(MemeBrief):
    """A meme of ``GET /api/v1/memes/popular`` with how often it was used in the window."""

    uses: int = Field(description="the caller's send, share, copy and download events for it in the window")


class PopularMemes(Dto):
    """The caller's most used live memes of the last ``days`` days, most used first."""

    days: int
    items: list[PopularMeme]


class MemePage(Dto):
    """A page of memes; pass ``next_cursor`` back as ``cursor`` (null on the last page)."""

    items: list[Meme]
    next_cursor: str | None = None


class MemePatchRequest(Dto):
    """``PATCH /api/v1/memes/{id}``: at least one of ``display_name`` (rename), ``text`` and ``tags``,
    applied together. ``text`` replaces what OCR read (≤ :data:`MAX_TEXT_CHARS` characters; ``""`` says it
    shows no text), the OCR original kept; ``"text": null`` restores the OCR original. ``tags`` is the
    meme's whole tag list (up to 50 names of up to 64 characters, normalised). An empty body, or
    ``display_name`` / ``tags`` sent as null, is invalid (422 ``invalid_request``)."""

    display_name: str | None = None
    text: str | None = Field(None, description="the meme's corrected text; null: back to what OCR read")
    tags: list[str] | None = Field(None, max_length=200, description="the meme's whole tag list")

    @model_validator(mode="after")
    def _some_change(self) -> MemePatchRequest:
        sent = self.model_fields_set
        if not sent & {"display_name", "text", "tags"}:
            raise ValueError("send display_name, text and/or tags")
        if ("display_name" in sent and self.display_name is None) or ("tags" in sent and self.tags is None):
            raise ValueError("display_name is a string and tags a list (only text may be null)")
        return self


#: The longest corrected text ``PATCH /api/v1/memes/{id}`` takes (characters).
MAX_TEXT_CHARS = 2000


class TrashItem(MemeBrief):
    """A meme in the trash: when it was trashed and when it is deleted for good (``MEWDEX_TRASH_DAYS``)."""

    deleted_at: Timestamp
    purge_at: Timestamp


class TrashPage(Dto):
    """A page of the trash (most recently trashed first; pass ``next_cursor`` back as ``cursor``), with
    the whole trash's ``total`` memes and ``total_bytes`` (they count toward the quota) and ``trash_days``."""

    items: list[TrashItem]
    next_cursor: str | None = None
    total: int
    total_bytes: int
    trash_days: float


class TrashEmptied(Dto):
    """``DELETE /api/v1/trash``: how many memes were deleted for good."""

    purged: int


class TagEditRequest(Dto):
    """``POST /api/v1/memes/tags``: add ``add`` to and take ``remove`` from every meme of ``ids``
    (1–500 of the caller's memes), all or nothing."""

    ids: list[str] = Field(min_length=1, max_length=500)
    add: list[str] = Field(default_factory=list, max_length=50)
    remove: list[str] = Field(default_factory=list, max_length=50)


class MemeZipRequest(Dto):
    """``POST /api/v1/memes/zip``: the caller's memes ``ids`` (1–500) to download as one ZIP."""

    ids: list[str] = Field(min_length=1, max_length=500)


class MemeTags(Dto):
    id: str
    tags: list[str]


class TagEditResult(Dto):
    """Each edited meme's tags after the edit, in request order."""

    items: list[MemeTags]


class TagCount(Dto):
    name: str
    count: int = Field(description="how many of the caller's memes have the tag")


class TagSuggestion(Dto):
    name: str = Field(description="a tag name, normalised as tags are")
    source: Literal["folder", "label", "caption"] = Field(
        description="the folder the file came from, the visual model's labels, or a word of the meme's text"
    )


class TagSuggestions(Dto):
    """Tags a meme could have (none it has), folder first, then labels, then caption words."""

    items: list[TagSuggestion]


class TagList(Dto):
    """The caller's tags, most used first, then by name."""

    items: list[TagCount]


class TagRenameRequest(Dto):
    """``PATCH /api/v1/tags/{name}``: the tag's new ``name`` (an existing tag's name merges the two)."""

    name: str


class TagRenamed(TagCount):
    merged: bool = Field(description="the new name existed: the two tags are one now")


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
    place: Literal["top", "bottom"] | None = Field(
        default=None,
        description="write in the top or bottom band, over the picture, erasing nothing (a text-free "
        "template); instead of boxes",
    )
