"""WeChat ClawBot's settings (``MEWDEX_CLAWBOT_*``: the iLink bot API and its CDN; a local server can
stand in), declared here and gathered into the one validated configuration
(:class:`mewdex.config.SettingsGroup`; hook ``settings``)."""

from __future__ import annotations

from pydantic import Field

from mewdex import hooks
from mewdex.config import SettingsGroup, get_settings


class ClawBotSettings(SettingsGroup):
    clawbot_api_url: str = Field(
        default="https://ilinkai.weixin.qq.com", description="iLink bot API server of the WeChat ClawBot channel."
    )
    clawbot_cdn_url: str = Field(
        default="https://novac2c.cdn.weixin.qq.com/c2c", description="CDN the ClawBot channel uploads images to."
    )
    clawbot_poll_seconds: int = Field(
        default=25, ge=2, le=35, description="One clawbot_polling task long-polls getupdates this long."
    )


hooks.provide("settings", "clawbot", ClawBotSettings)


def settings() -> ClawBotSettings:
    """This process's ClawBot settings (validated on first use; :class:`mewdex.config.ConfigError`)."""
    return get_settings().group(ClawBotSettings)
