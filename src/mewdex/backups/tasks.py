"""The task types of scheduled backups (lane ``maintenance``): ``backup_check`` every minute
(:func:`mewdex.runtime.maintenance.schedules`) queues one ``backup`` when a run of
``MEWDEX_BACKUP_CRON`` is due."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mewdex.backups.archive import BackupError
from mewdex.backups.settings import settings as backup_settings
from mewdex.backups.snapshot import backup
from mewdex.backups.status import SCHEDULE_STATE_SETTING
from mewdex.queue.registry import RetryPolicy, TaskContext, task_type


@task_type("backup_check", lane="maintenance", retry=RetryPolicy(max_attempts=1))
def backup_check(ctx: TaskContext) -> dict[str, Any]:
    """Every minute: when ``MEWDEX_BACKUP_DEST`` is set and a run of ``MEWDEX_BACKUP_CRON`` (UTC) is
    due since the last check, queue one ``backup`` task. ``{"queued": task id | None}``."""
    from sqlalchemy import text

    from mewdex.platform.instance import get_setting, set_setting
    from mewdex.queue import registry
    from mewdex.schedules import service as cronmath

    settings = backup_settings()
    if not settings.backup_dest:
        return {"queued": None}
    now = datetime.now(UTC)
    with ctx.sessions.begin() as session:
        session.execute(text("SELECT pg_advisory_xact_lock(hashtextextended('backup_check', 0))"))
        state = dict(get_setting(session, SCHEDULE_STATE_SETTING, None) or {})
        if state.get("cron") != settings.backup_cron or "after" not in state:
            state.update(cron=settings.backup_cron, after=now.isoformat(), since=now.isoformat())
            set_setting(session, SCHEDULE_STATE_SETTING, state)
            return {"queued": None}
        due = cronmath.next_run(settings.backup_cron, "UTC", datetime.fromisoformat(state["after"]))
        if due is None or due > now:
            return {"queued": None}
        task = registry.submit(
            session,
            scope_id=ctx.claim.scope_id,  # the system scope, as its check's (runtime.maintenance)
            task_type="backup",
            dedupe_key=f"backup:{due.isoformat()}",
            payload={"due": due.isoformat()},
        )
        set_setting(session, SCHEDULE_STATE_SETTING, {**state, "after": now.isoformat()})
        return {"queued": str(task.id)}


@task_type("backup", lane="maintenance", retry=RetryPolicy(max_attempts=1))
def backup_task(ctx: TaskContext) -> dict[str, Any]:
    """A scheduled backup to ``MEWDEX_BACKUP_DEST``, keeping ``MEWDEX_BACKUP_KEEP`` snapshots; the
    summary of :func:`backup` (also on ``/health``). A failure is recorded and fails the task
    (``backup_failed`` or the :class:`BackupError` code); the next scheduled run tries again."""
    from mewdex.queue.registry import TaskError

    settings = backup_settings()
    if not settings.backup_dest:
        return {"skipped": "MEWDEX_BACKUP_DEST is not set"}
    try:
        summary = backup(settings.backup_dest, keep=settings.backup_keep)
    except BackupError as exc:
        raise TaskError(exc.code, exc.message, retryable=False) from None
    return {k: v for k, v in summary.items() if k != "copied_keys"}
