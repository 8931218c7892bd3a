"""Telegram's settings (``MEWDEX_TELEGRAM_*``), declared here and gathered into the one validated
configuration (:class:`mewdex.config.SettingsGroup`; hook ``settings``). Webhook mode when
``MEWDEX_PUBLIC_URL`` is set, long polling otherwise."""

from __future__ import annotations

from pydantic import Field

from mewdex import hooks
from mewdex.config import SettingsGroup, get_settings


class TelegramSettings(SettingsGroup):
    telegram_bot_token: str | None = Field(
        default=None,
        description="The installation's Telegram bot token (from @BotFather; never logged); wins over the one "
        "saved on the Channels page.",
    )
    telegram_webhook_secret: str | None = Field(
        default=None,
        description="Secret Telegram sends in X-Telegram-Bot-Api-Secret-Token (1-256 of A-Z a-z 0-9 _ -); "
        "unset = derived from the token.",
    )
    telegram_api_url: str = Field(
        default="https://api.telegram.org", description="Bot API server (a local one can stand in for it)."
    )
    telegram_poll_seconds: int = Field(
        default=25, ge=2, le=50, description="Long-polling: one getUpdates task runs this long (no public URL)."
    )
    telegram_storage_chat_id: str | None = Field(
        default=None, description="Chat the bot uploads memes to for inline mode (their file_id is cached)."
    )


hooks.provide("settings", "telegram", TelegramSettings)


def settings() -> TelegramSettings:
    """This process's Telegram settings (validated on first use; :class:`mewdex.config.ConfigError`)."""
    return get_settings().group(TelegramSettings)
