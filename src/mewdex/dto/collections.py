"""Collection shapes: brief (listings) and full (with its members), add-items and import reports."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, WithJsonSchema

from mewdex.dto.common import Dto, JsonObject, Timestamp
from mewdex.dto.memes import MemeBrief


class CollectionBrief(Dto):
    """A collection in a list. ``role``: ``owner`` (the caller's own), or ``viewer`` / ``editor`` (shared
    with the caller; ``owner`` then names the owning account's email, else null, and ``use_in_chat``
    says whether the caller's assistant answers from it; null for the caller's own)."""

    id: str
    name: str
    item_count: int
    created_at: Timestamp
    updated_at: Timestamp
    role: Literal["owner", "editor", "viewer"] = "owner"
    owner: str | None = None
    use_in_chat: bool | None = None


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


class CopiedItem(Dto):
    """An editor's meme copied into a shared collection's owner library (``status`` as an upload's)."""

    source_id: str
    status: str
    meme_id: str | None = None
    error: str | None = None


class AddItemsResponse(Dto):
    added: int
    already_members: int
    item_count: int
    items: list[CopiedItem] | None = None  # an editor's copies (a shared collection); else left out


class ImportItem(Dto):
    name: str
    display_name: str | None = None
    status: str
    meme: MemeBrief | None = None
    error: JsonObject | None = None


class ImportResponse(Dto):
    collection: CollectionBrief
    items: list[ImportItem]


class LinkRequest(BaseModel):
    """``{"expires_in_days": 1–365 (default 30), "show_owner": false}``; the service checks the values
    (422 ``expiry_invalid`` / ``invalid_request``)."""

    expires_in_days: Annotated[Any, WithJsonSchema({"type": "integer", "minimum": 1, "maximum": 365})] = None
    show_owner: Annotated[Any, WithJsonSchema({"type": "boolean"})] = False


class LinkBrief(Dto):
    """A public link of a collection (its token is never shown again after creation)."""

    id: str
    expires_at: Timestamp
    created_at: Timestamp
    show_owner: bool


class LinkCreated(LinkBrief):
    """The new link with its ``url`` (``<base>/s/<token>``), shown this once."""

    url: str


class LinkList(Dto):
    links: list[LinkBrief]


class MemberRequest(BaseModel):
    """``{"role": "viewer" | "editor"}`` (422 ``role_invalid`` otherwise)."""

    role: Annotated[Any, WithJsonSchema({"type": "string", "enum": ["viewer", "editor"]})]


class Member(Dto):
    email: str
    role: Literal["viewer", "editor"]
    created_at: Timestamp


class MembershipRequest(BaseModel):
    """``{"use_in_chat": true | false}`` (422 ``invalid_request`` otherwise)."""

    use_in_chat: Annotated[Any, WithJsonSchema({"type": "boolean"})]


class Membership(Dto):
    """The caller's membership of a collection shared with it."""

    collection_id: str
    role: Literal["viewer", "editor"]
    use_in_chat: bool


class MemberList(Dto):
    members: list[Member]
