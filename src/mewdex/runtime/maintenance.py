"""Periodic maintenance as task types, and the schedules every worker process's scheduler runs.

Each kind of upkeep is one registered task type in lane ``maintenance`` of the system scope
(:data:`SYSTEM_SCOPE`, which no user reaches), enqueued once per interval across all processes by
:class:`mewdex.queue.scheduler.Scheduler`:

==================== ====================================== ===========================
task type            what it does                           every
==================== ====================================== ===========================
``lease_reaping``    expired leases, lane slot rows         1 s (``queue.maintenance``)
``batch_feeding``    parked batch tasks as lanes drain      1 s (``queue.maintenance``)
``storage_recovery`` interrupted uploads/renames/deletes    300 s
``disk_rescan``      per-user disk usage drift              ``MEWDEX_DISK_RESCAN_SECONDS``
``thumbnail_reconcile`` missing or stale thumbnails         24 h, every user scope
``scheduled_job_dispatch`` due cron jobs → run tasks       1 s (``schedules.dispatch``)
``retention``        old finished work (``runtime.retention``)  600 s, small batches
``backup_check``     a due ``MEWDEX_BACKUP_CRON`` run →     60 s (``backups.tasks``)
                     one ``backup`` task
==================== ====================================== ===========================
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select

from mewdex.assistant.service import REAPING_INTERVAL_SECONDS as RUN_REAPING_INTERVAL_SECONDS
from mewdex.channels import tasks as channel_tasks
from mewdex.config import get_settings
from mewdex.queue import maintenance as queue_maintenance
from mewdex.queue.registry import RetryPolicy, TaskContext, task_type
from mewdex.queue.scheduler import Schedule
from mewdex.runtime import retention as rules
from mewdex.runtime.recovery import SYSTEM_SCOPE, recover_storage
from mewdex.schedules import service as schedule_service

log = logging.getLogger(__name__)
LANE = queue_maintenance.MAINTENANCE_LANE
RECOVERY_INTERVAL_SECONDS = 300
RECONCILE_INTERVAL_SECONDS = 24 * 3600
BACKUP_CHECK_SECONDS = 60
_ONCE = RetryPolicy(max_attempts=1)


@task_type("storage_recovery", lane=LANE, retry=_ONCE)
def storage_recovery(ctx: TaskContext) -> dict[str, Any]:
    """Complete or compensate interrupted storage operations; remove stale staging files. ``{}``."""
    recover_storage()
    return {}


@task_type("disk_rescan", lane=LANE, retry=_ONCE)
def disk_rescan(ctx: TaskContext) -> dict[str, Any]:
    """Recompute every user's disk usage; ``{"corrected": {user_id: drift}}``."""
    from mewdex.platform.quotas import rescan

    fixed = rescan(ctx.sessions)
    if fixed:
        log.warning("disk usage drift corrected: %s", fixed)
    return {"corrected": fixed}


@task_type("thumbnail_reconcile", lane=LANE, retry=_ONCE)
def thumbnail_reconcile(ctx: TaskContext) -> dict[str, Any]:
    """Rebuild missing or stale thumbnails of every scope; ``{scope_id: {"checked", "rebuilt", "failed"}}``."""
    from mewdex.db.models import Scope
    from mewdex.library.thumbnails import reconcile
    from mewdex.storage import blob_store

    with ctx.sessions.begin() as session:
        scope_ids = [s for s in session.execute(select(Scope.id)).scalars() if s != SYSTEM_SCOPE]
    store, max_pixels = blob_store(), get_settings().max_pixels
    return {s: reconcile(ctx.sessions, store, s, max_pixels=max_pixels).as_dict() for s in scope_ids}


@task_type("retention", lane=LANE, retry=_ONCE)
def retention(ctx: TaskContext) -> dict[str, Any]:
    """Delete finished work past its retention (:mod:`mewdex.runtime.retention`); ``{"deleted": {rule:
    rows}, "batches", "seconds", "complete"}``."""
    return rules.run(ctx.sessions)


def schedules() -> list[Schedule]:
    """The built-in maintenance schedules (all in the system scope)."""
    return [
        Schedule("lease_reaping", "lease_reaping", queue_maintenance.INTERVAL_SECONDS, SYSTEM_SCOPE, keep_intervals=60),
        Schedule("batch_feeding", "batch_feeding", queue_maintenance.INTERVAL_SECONDS, SYSTEM_SCOPE, keep_intervals=60),
        Schedule("storage_recovery", "storage_recovery", RECOVERY_INTERVAL_SECONDS, SYSTEM_SCOPE),
        Schedule("disk_rescan", "disk_rescan", lambda: get_settings().disk_rescan_seconds, SYSTEM_SCOPE),
        Schedule("thumbnail_reconcile", "thumbnail_reconcile", RECONCILE_INTERVAL_SECONDS, SYSTEM_SCOPE),
        Schedule("retention", "retention", rules.INTERVAL_SECONDS, SYSTEM_SCOPE),
        Schedule("conversation_run_reaping", "conversation_run_reaping", RUN_REAPING_INTERVAL_SECONDS, SYSTEM_SCOPE),
        *channel_tasks.schedules(),
        Schedule("backup_check", "backup_check", BACKUP_CHECK_SECONDS, SYSTEM_SCOPE),
        Schedule(
            "scheduled_job_dispatch",
            "scheduled_job_dispatch",
            schedule_service.DISPATCH_INTERVAL_SECONDS,
            SYSTEM_SCOPE,
            keep_intervals=60,
        ),
    ]
