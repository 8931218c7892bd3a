"""The connectors' settings (``MEWDEX_RETENTION_AUDIT_DAYS``), declared here and gathered into the
one validated configuration (:class:`mewdex.config.SettingsGroup`; hook ``settings``)."""

from __future__ import annotations

from pydantic import Field

from mewdex import hooks
from mewdex.config import SettingsGroup, get_settings


class ConnectorSettings(SettingsGroup):
    retention_audit_days: float = Field(
        default=365.0, gt=0, description="Connector audit rows of successful calls are deleted after this long."
    )


hooks.provide("settings", "connectors", ConnectorSettings)


def settings() -> ConnectorSettings:
    """This process's connector settings (validated on first use; :class:`mewdex.config.ConfigError`)."""
    return get_settings().group(ConnectorSettings)
