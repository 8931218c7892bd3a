"""Backups' settings (``MEWDEX_BACKUP_*``), declared here and gathered into the one validated
configuration (:class:`mewdex.config.SettingsGroup`; hook ``settings``). Scheduled backups run when a
destination is set (README "Backups and upgrades")."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from mewdex import hooks
from mewdex.config import SettingsGroup, get_settings


class BackupSettings(SettingsGroup):
    backup_dest: str | None = Field(
        default=None, description="Scheduled backups go here: a directory or s3://bucket/prefix (unset: none)."
    )
    backup_cron: str = Field(default="0 3 * * *", description="When scheduled backups run (cron, UTC).")
    backup_keep: int = Field(default=7, ge=1, description="Scheduled backups keep this many snapshots.")
    backup_key_file: Path | None = Field(
        default=None,
        description="File holding the backup key (64 hex characters); unset: MEWDEX_BACKUP_PASSPHRASE, else "
        "<data dir>/backup.key (made and printed once by the first backup).",
    )
    backup_passphrase: SecretStr | None = Field(
        default=None, description="Passphrase the backup key is derived from (scrypt, salt kept in DEST)."
    )
    backup_s3_allow_http: bool = Field(
        default=False, description="Allow an http:// S3 endpoint that is not loopback for backups."
    )
    backup_s3_sse: Literal["AES256", "aws:kms", "none"] = Field(
        default="AES256", description="Server-side encryption asked for on backup objects in S3 (none: off)."
    )

    @field_validator("backup_cron")
    @classmethod
    def _backup_cron(cls, value: str) -> str:
        from cronsim import CronSim, CronSimError

        try:
            CronSim(value, datetime.now(UTC))
        except CronSimError as exc:
            raise ValueError(f"MEWDEX_BACKUP_CRON is not a cron expression: {exc}") from None
        return value


hooks.provide("settings", "backups", BackupSettings)


def settings() -> BackupSettings:
    """This process's backup settings (validated on first use; :class:`mewdex.config.ConfigError`)."""
    return get_settings().group(BackupSettings)
