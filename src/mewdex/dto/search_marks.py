""" "This is the meme I wanted" marks (issue 15, point 7)."""

from __future__ import annotations

from pydantic import Field

from mewdex.dto.common import Dto, Timestamp


class SearchMarkCreate(Dto):
    query: str = Field(max_length=2000, description="The search as typed (1–500 characters after trimming).")
    meme_id: str


class SearchMark(Dto):
    id: str
    query: str
    meme_id: str
    created_at: Timestamp


class SearchMarkList(Dto):
    marks: list[SearchMark]
