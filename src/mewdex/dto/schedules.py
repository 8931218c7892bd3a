"""Schedule shapes: the preview of a cron expression, scheduled jobs, their runs."""

from __future__ import annotations

from mewdex.dto.common import Dto, Timestamp


class PreviewRun(Dto):
    """One run: ``utc`` (ISO, ``Z``), ``local`` (ISO with the zone's offset), ``local_display``
    (e.g. ``Mon 2026-12-07 09:00``), ``utc_offset`` (``+08:00``)."""

    utc: Timestamp
    local: Timestamp
    local_display: str
    utc_offset: str


class SchedulePreview(Dto):
    """``GET /api/v1/schedules/preview``: the normalised expression, its zone, an English
    description (may be empty) and the next runs after ``after``."""

    cron: str
    tz: str
    after: Timestamp
    description: str
    runs: list[PreviewRun]
