"""Telegram's set-up shapes (``/api/v1/channels/telegram/…``) and the fields it adds to its entry of
``GET /api/v1/channels`` (:data:`INFO`), and the sticker sets' (``/api/v1/collections/…sticker-set``).
No shape carries the token."""

from __future__ import annotations

from pydantic import BaseModel, Field

from mewdex.dto.common import Dto

#: The fields of its entry of ``GET /api/v1/channels`` (``CHANNEL.info``; the adapter's ``status()``).
INFO = {
    "mode": (str | None, Field(None, description="Telegram: webhook (public URL) or polling")),
    "token_source": (
        str | None,
        Field(None, description="Telegram: where the bot token comes from (environment | settings), None when unset"),
    ),
    "token_hint": (str | None, Field(None, description="Telegram: the token's last characters (never the token)")),
}


class TelegramTokenSet(Dto):
    token: str | None = Field(
        None, max_length=200, description="A bot token from @BotFather; empty or null removes the saved one"
    )


class TelegramTokenStatus(Dto):
    configured: bool
    source: str | None = Field(None, description="environment (MEWDEX_TELEGRAM_BOT_TOKEN wins) | settings | None")
    hint: str = Field(description="The token's last characters (never the token)")


class TelegramLink(Dto):
    url: str = Field(description="https://t.me/<bot username>?start=<code>")
    code: str = Field(description="One-time bind code (valid 15 minutes)")


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
