"""Search shapes: the filters every search takes (text or image), the request and the hits."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mewdex.dto.common import Dto, JsonObject
from mewdex.dto.media import FORMATS, MediaFormat
from mewdex.dto.memes import MemeBrief, MemeRef, NearDuplicate

# The latest processing job's status, or ``pending`` (queued or running) / ``none`` (no job).
PROCESSING_STATUSES = ("queued", "running", "succeeded", "failed", "blocked", "unknown_execution", "pending", "none")
MAX_QUERY_CHARS = 500
MAX_RESULTS = 50
MAX_OFFSET = 50


class SearchFilters(BaseModel):
    """Narrow a search (every leg, inside its SQL) or a listing. All optional; they combine with AND.

    ``collection_ids``: members of any of these collections; ``animated``: only animated memes — GIFs,
    clips and stickers — (true) or only stills (false); ``formats``: only these formats
    (:data:`mewdex.dto.media.FORMATS`: ``png`` … ``mp4``, ``webm``, ``tgs``); ``status``: the latest
    processing job's status (or ``pending`` / ``none``); ``created_from`` (inclusive) /
    ``created_to`` (exclusive): the meme's creation time (ISO 8601; without an offset, UTC);
    ``tags``: memes with every one of these tags; ``not_tags``: memes with none of them (names as a
    search's ``tag:NAME`` reads them, folded the way tags are stored).
    """

    model_config = ConfigDict(extra="forbid")

    collection_ids: list[str] | None = Field(None, max_length=100)
    animated: bool | None = None
    formats: list[MediaFormat] | None = Field(None, max_length=len(FORMATS))
    status: (
        Literal["queued", "running", "succeeded", "failed", "blocked", "unknown_execution", "pending", "none"] | None
    ) = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    tags: list[str] | None = Field(None, max_length=10)
    not_tags: list[str] | None = Field(None, max_length=10)

    @field_validator("collection_ids")
    @classmethod
    def _uuids(cls, value: list[str] | None) -> list[str] | None:
        from uuid import UUID

        if value is None:
            return None
        try:
            return [str(UUID(v)) for v in value]
        except (ValueError, AttributeError, TypeError):
            raise ValueError("collection_ids must be collection ids") from None

    @field_validator("created_from", "created_to")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value

    @property
    def empty(self) -> bool:
        return not any(
            v is not None
            for v in (
                self.collection_ids,
                self.animated,
                self.formats,
                self.status,
                self.created_from,
                self.created_to,
                self.tags or None,
                self.not_tags or None,
            )
        )


class SearchWithin(BaseModel):
    """``{"collection": id}``: search only this collection's memes — the caller's own collection or
    one shared with the caller's account (404 ``not_found`` otherwise)."""

    model_config = ConfigDict(extra="forbid")

    collection: str

    @field_validator("collection")
    @classmethod
    def _uuid(cls, value: str) -> str:
        from uuid import UUID

        try:
            return str(UUID(value))
        except (ValueError, AttributeError, TypeError):
            raise ValueError("collection must be a collection id") from None


class SearchRequest(SearchFilters):
    """``POST /api/v1/search``: ``query`` 1–500 characters, ``n_results`` 1–50, ``offset`` 0–50 (the
    next page starts at ``offset + n_results``), ``fold_variants`` (one meme per template group),
    plus the filters of :class:`SearchFilters`."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    query: str
    n_results: int = 10
    offset: int = 0
    fold_variants: bool = False  # the best-ranked meme of each template group only ("1 per template")
    # ``{"filters": {"collection": id}}``: inside one collection, possibly shared with the caller
    within: SearchWithin | None = Field(None, alias="filters")

    def filters(self) -> SearchFilters:
        return SearchFilters(**self.model_dump(include=set(SearchFilters.model_fields)))


class SearchHit(MemeRef):
    """A search result: the meme's reference, its fused ``score`` (cosine for image search), an OCR
    ``snippet`` and, for text search, ``confidence``: ``high`` | ``medium`` | ``low``, calibrated on
    the dev queries (see ``mewdex.search.confidence``; null for image search); ``why`` / ``why_query``
    when the feedback leg lifted it (``mewdex.search.feedback``; else null)."""

    score: float
    snippet: str
    confidence: Literal["high", "medium", "low"] | None = None
    why: str | None = None  # "you picked this for '…'": lifted by what was chosen for a query of that meaning
    why_query: str | None = None  # that query, as typed then


class SearchResults(Dto):
    results: list[SearchHit]
    took_ms: float


class DuplicatePair(Dto):
    meme_id: str
    duplicate_of: str
    phash_distance: int | None = None
    cosine: float | None = None


class DuplicateCluster(Dto):
    original: str
    size: int
    memes: list[MemeBrief]
    pairs: list[DuplicatePair]


class DuplicateClusters(Dto):
    """A page of clusters; pass ``next_cursor`` back as ``cursor`` (null on the last page)."""

    clusters: list[DuplicateCluster]
    total: int
    next_cursor: str | None = None


class NearDuplicates(Dto):
    near_duplicates: list[NearDuplicate]


class SearchStatus(BaseModel):
    """Per vector leg: the active generation, the one being built (progress, task), the configured model."""

    model_config = ConfigDict(extra="allow")

    memes: int
    memes_with_context: int
    legs: dict[str, JsonObject]
