"""The face of backups that the web layer, the command line and ``mewdex doctor`` call (contract
``backups-face``: nothing outside :mod:`mewdex.backups` imports its other modules): writing and
restoring a backup, the key file, the last result and the schedule."""

from __future__ import annotations

from typing import Any

from mewdex.backups.archive import BackupError, Progress
from mewdex.backups.keys import key_from_file
from mewdex.backups.restore import restore
from mewdex.backups.settings import BackupSettings, settings
from mewdex.backups.snapshot import backup, missing_message
from mewdex.backups.status import health, last_result, schedule

__all__ = [
    "BackupError",
    "BackupSettings",
    "Progress",
    "backup",
    "health",
    "key_from_file",
    "last_result",
    "missing_message",
    "overview",
    "restore",
    "settings",
]


def overview(session) -> dict[str, Any]:
    """The admin page's backups card: ``{"backup": health(), "schedule": {"dest", "cron", "keep"} | None
    (no ``MEWDEX_BACKUP_DEST``)}``."""
    return {"backup": health(session), "schedule": schedule()}
