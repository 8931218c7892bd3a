"""Discord's settings (``MEWDEX_DISCORD_*``), declared here and gathered into the one validated
configuration (:class:`mewdex.config.SettingsGroup`; hook ``settings``)."""

from __future__ import annotations

from pydantic import Field

from mewdex import hooks
from mewdex.config import SettingsGroup, get_settings


class DiscordSettings(SettingsGroup):
    discord_api_url: str = Field(
        default="https://discord.com/api/v10", description="Discord's REST API (a local one can stand in for it)."
    )


hooks.provide("settings", "discord", DiscordSettings)


def settings() -> DiscordSettings:
    """This process's Discord settings (validated on first use; :class:`mewdex.config.ConfigError`)."""
    return get_settings().group(DiscordSettings)
