"""Errors of the schedules' services (codes mapped to HTTP statuses in ``web/errors.py``)."""

from __future__ import annotations

from mewdex.dto.errors import DomainError


class ScheduleError(DomainError):
    """``cron_invalid`` / ``timezone_invalid`` / ``schedule_invalid`` (422: a bad expression, zone or
    field), ``cron_never_runs`` (422: no run within 50 years, e.g. ``0 0 30 2 *``), ``not_found`` (404:
    missing, deleted or another owner's job), ``schedule_too_frequent`` (422: the cron runs more often
    than the minimum interval), ``schedule_limit_reached`` (409: the account has as many jobs as it may)."""

    code = "schedule_invalid"
