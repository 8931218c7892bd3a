"""Collection shapes: brief (listings) and full (with its members), add-items and import reports."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, WithJsonSchema

from mewdex.dto.common import Dto, JsonObject, Timestamp
from mewdex.dto.memes import MemeBrief


class CollectionBrief(Dto):
    id: str
    name: str
    item_count: int
    created_at: Timestamp
    updated_at: Timestamp


class Collection(CollectionBrief):
    """The collection with its members in the order they were added."""

    items: list[MemeBrief]


class CollectionList(Dto):
    collections: list[CollectionBrief]


class CollectionNameRequest(BaseModel):
    """``{"name"}``; the service checks the value (422 ``collection_name_invalid``)."""

    name: Annotated[Any, WithJsonSchema({"type": "string", "maxLength": 100})]


class AddItemsRequest(BaseModel):
    """``{"meme_ids": [...]}``; the service checks the ids (422 ``invalid_request`` / ``memes_not_found``)."""

    meme_ids: Annotated[
        Any,
        WithJsonSchema(
            {"type": "array", "items": {"type": "string", "format": "uuid"}, "minItems": 1, "maxItems": 1000}
        ),
    ]


class AddItemsResponse(Dto):
    added: int
    already_members: int
    item_count: int


class ImportItem(Dto):
    name: str
    display_name: str | None = None
    status: str
    meme: MemeBrief | None = None
    error: JsonObject | None = None


class ImportResponse(Dto):
    collection: CollectionBrief
    items: list[ImportItem]
