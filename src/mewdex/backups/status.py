"""The last backup's result and the schedule's state, for ``/health``, the admin page and
``mewdex doctor`` (``platform_settings`` rows ``last_backup`` and ``backup_schedule``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from mewdex.backups.archive import log
from mewdex.backups.settings import settings as backup_settings

LAST_BACKUP_SETTING = "last_backup"
SCHEDULE_STATE_SETTING = "backup_schedule"


def record_result(result: dict[str, Any]) -> None:
    """Store the last backup's result (``platform_settings.last_backup``) for ``/health`` and the
    admin page, with ``last_ok_at`` (the last successful one's end); a database that cannot be
    written is logged, never raised."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.platform.instance import get_setting, set_setting

    now = datetime.now(UTC).isoformat(timespec="seconds")
    try:
        with get_sessionmaker().begin() as session:
            previous = get_setting(session, LAST_BACKUP_SETTING, None) or {}
            # an incomplete snapshot still restores everything but the files named in its result
            last_ok = now if result.get("status") in ("ok", "incomplete") else previous.get("last_ok_at")
            set_setting(session, LAST_BACKUP_SETTING, {**result, "finished_at": now, "last_ok_at": last_ok})
    except Exception:
        log.warning("backup: could not record the result", exc_info=True)


def last_result(session) -> dict[str, Any] | None:
    """The last backup's result: ``{"status": "ok", "finished_at", "last_ok_at", "dest", "snapshot",
    "counts", "blobs", "seconds"}`` (``"status": "incomplete"`` with ``"code": "backup_blobs_missing"``
    and ``"message"`` when files the database references were missing from the store) or
    ``{"status": "failed", "code", "message", "dest", "finished_at", "last_ok_at"}``; None when no
    backup ran."""
    from mewdex.platform.instance import get_setting

    return get_setting(session, LAST_BACKUP_SETTING, None)


def health(session) -> dict[str, Any]:
    """``/health``'s ``backup`` entry: ``{"configured": bool, "last": last_result | None, "stale":
    bool}``; ``stale``: scheduled backups are configured (``MEWDEX_BACKUP_DEST``) and the last
    successful backup — or, without one, the start of the schedule — is older than twice their
    interval (at least a day)."""
    from mewdex.platform.instance import get_setting

    settings = backup_settings()
    last = last_result(session)
    stale = False
    if settings.backup_dest:
        # since the last good backup, or since scheduled backups started (the first check) when none
        since = (last or {}).get("last_ok_at") or (get_setting(session, SCHEDULE_STATE_SETTING, None) or {}).get(
            "since"
        )
        if since is not None:
            stale = datetime.now(UTC) - datetime.fromisoformat(since) > stale_after(settings.backup_cron)
    return {"configured": bool(settings.backup_dest), "last": last, "stale": stale}


def schedule() -> dict[str, Any] | None:
    """The scheduled backups: ``{"dest", "cron", "keep"}``; None without ``MEWDEX_BACKUP_DEST``."""
    settings = backup_settings()
    if not settings.backup_dest:
        return None
    return {"dest": settings.backup_dest, "cron": settings.backup_cron, "keep": settings.backup_keep}


def stale_after(cron: str) -> timedelta:
    """Twice the gap between the cron expression's next two runs, at least a day."""
    from mewdex.schedules import service as cronmath

    runs = cronmath.next_runs(cron, "UTC", datetime.now(UTC), 2)
    gap = runs[1] - runs[0] if len(runs) == 2 else timedelta(days=1)
    return max(2 * gap, timedelta(days=1))
