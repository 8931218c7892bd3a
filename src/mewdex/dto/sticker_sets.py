"""Telegram sticker sets ↔ collections: the API's request and response shapes."""

from __future__ import annotations

from pydantic import BaseModel, Field


class StickerSetImportRequest(BaseModel):
    """``set``: a set name or ``https://t.me/addstickers/NAME``; ``collection_id``: one of the
    account's collections (absent: a new one named after the set)."""

    set: str = Field(max_length=300)
    collection_id: str | None = None


class StickerSetImport(BaseModel):
    """Counts of the set's stickers: ``imported`` (new memes), ``already_there`` (memes already in
    the library, added to the collection), ``failed``."""

    collection_id: str
    collection_name: str
    set: str
    imported: int
    already_there: int
    failed: int


class StickerSetExportRequest(BaseModel):
    """``title`` (1–64 characters) and ``name`` (letters, digits, ``_``; ``_by_<bot username>`` is added)."""

    title: str = Field(max_length=200)
    name: str = Field(max_length=200)


class SkippedSticker(BaseModel):
    meme_id: str
    name: str
    reason: str


class StickerSetExport(BaseModel):
    """The new set: its full ``name``, ``link`` (``https://t.me/addstickers/<name>``), how many
    stickers were ``added`` and the memes ``skipped`` (with why)."""

    name: str
    link: str
    added: int
    skipped: list[SkippedSticker]
