"""Feedback shapes (issue 33: learning from what each person picks, sends and skips)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mewdex.dto.common import Dto, Timestamp

FeedbackKind = Literal["mark", "copy", "download", "share", "send", "kept", "rejected"]


class FeedbackCreate(Dto):
    """``POST /api/v1/feedback``: for ``query`` (the search as typed, 1–500 characters after trimming)
    the user did ``kind`` with ``meme_id``; ``source`` says where (``search`` results, a ``meme``
    page, or ``api``)."""

    query: str = Field(max_length=2000)
    meme_id: str
    kind: FeedbackKind
    source: Literal["search", "meme", "api"] = "api"


class FeedbackEvent(Dto):
    """One thing learned: for ``query`` the meme ``meme_id`` was chosen or passed over (``kind``);
    in lists also the meme's ``display_name`` and ``thumbnail_url``."""

    id: str
    query: str
    meme_id: str
    kind: FeedbackKind
    source: str
    created_at: Timestamp
    display_name: str | None = None
    thumbnail_url: str | None = None


class FeedbackRecorded(Dto):
    """``recorded`` false (and ``event`` null) when the account has learning turned off."""

    recorded: bool
    event: FeedbackEvent | None = None


class FeedbackSummary(Dto):
    learning_enabled: bool
    events: int
    queries: int
    by_kind: dict[str, int]


class FeedbackList(Dto):
    """The newest events; pass ``next_cursor`` back as ``cursor`` for older ones (null at the end)."""

    summary: FeedbackSummary
    events: list[FeedbackEvent]
    next_cursor: str | None = None


class FeedbackExport(Dto):
    """Every event of the account, oldest first."""

    exported_at: Timestamp
    learning_enabled: bool
    events: list[FeedbackEvent]


class FeedbackCleared(Dto):
    deleted: int


class FeedbackSettings(Dto):
    learning_enabled: bool
