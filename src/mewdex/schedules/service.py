"""The face of schedules that the web layer, the command line, the runtime and backups call
(contract ``schedules-face``: outside :mod:`mewdex.schedules` only this module, the package and its
routes, which the web layer mounts, are imported): the jobs of a viewer, the cron math, the
schedules' clock, the dispatch interval and the settings."""

from __future__ import annotations

from mewdex.schedules.clock import now
from mewdex.schedules.cron import explain, next_run, next_runs, run_view
from mewdex.schedules.dispatch import DISPATCH_INTERVAL_SECONDS
from mewdex.schedules.errors import ScheduleError
from mewdex.schedules.jobs import LIMIT_SETTINGS, Viewer, create, delete, get, limits, list_jobs, pause, resume, runs
from mewdex.schedules.settings import ScheduleSettings, settings

__all__ = [
    "DISPATCH_INTERVAL_SECONDS",
    "LIMIT_SETTINGS",
    "ScheduleError",
    "ScheduleSettings",
    "Viewer",
    "create",
    "delete",
    "explain",
    "get",
    "limits",
    "list_jobs",
    "next_run",
    "next_runs",
    "now",
    "pause",
    "resume",
    "run_view",
    "runs",
    "settings",
]
