"""Schedules' settings (``MEWDEX_SCHEDULE_*``, ``MEWDEX_RETENTION_SCHEDULE_CONVERSATION_DAYS``),
declared here and gathered into the one validated configuration (:class:`mewdex.config.SettingsGroup`;
hook ``settings``). The two limits are also changed at run time by an admin
(:func:`mewdex.schedules.jobs.limits`: ``platform_settings`` first)."""

from __future__ import annotations

from pydantic import Field

from mewdex import hooks
from mewdex.config import SettingsGroup, get_settings


class ScheduleSettings(SettingsGroup):
    schedule_scope_concurrency: int = Field(
        default=2,
        ge=1,
        le=8,
        description="Scheduled runs one account runs at once, all processes: its share of the `schedules` lane.",
    )
    schedule_max_jobs_per_account: int = Field(
        default=20, ge=1, description="Scheduled jobs one account may have (admins can change it at run time)."
    )
    schedule_min_interval_minutes: int = Field(
        default=5,
        ge=1,
        le=1440,
        description="Shortest gap between two runs a job's cron may ask for (admins can change it at run time).",
    )
    schedule_keep_run_conversations: int = Field(
        default=20, ge=1, description="An isolated job keeps the conversations of its latest runs; older are deleted."
    )
    retention_schedule_conversation_days: float = Field(
        default=30.0,
        gt=0,
        description="Conversations of successful isolated schedule runs are deleted after this long.",
    )


hooks.provide("settings", "schedules", ScheduleSettings)


def settings() -> ScheduleSettings:
    """This process's schedule settings (validated on first use; :class:`mewdex.config.ConfigError`)."""
    return get_settings().group(ScheduleSettings)
