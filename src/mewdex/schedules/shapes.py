"""Schedule shapes: the preview of a cron expression, scheduled jobs, their runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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


JobMode = Literal["isolated", "persistent"]


class ScheduleCreate(BaseModel):
    """``POST /api/v1/schedules``. ``notify``: ``{"type": "webhook", "definition_id"}`` or
    ``{"type": "channel", "channel"}`` (optional); ``expires_at`` with an offset; ``cost_cap_cny``
    not above the owner's monthly budget."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=200)
    prompt: str = Field(max_length=2000)
    cron: str = Field(max_length=200)
    tz: str = Field("Asia/Shanghai", max_length=100)
    mode: JobMode = "isolated"
    notify: dict[str, Any] | None = None
    timeout_seconds: int = Field(0, ge=0, le=3600)
    expires_at: datetime | None = None
    max_runs: int | None = Field(None, ge=1, le=1_000_000)
    cost_cap_cny: float | None = Field(None, gt=0, le=1_000_000)


class SchedulePatch(BaseModel):
    """``PATCH /api/v1/schedules/{id}``: only the fields given change (a new ``cron``/``tz``
    recomputes the next run from now)."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(None, max_length=200)
    prompt: str | None = Field(None, max_length=2000)
    cron: str | None = Field(None, max_length=200)
    tz: str | None = Field(None, max_length=100)
    mode: JobMode | None = None
    notify: dict[str, Any] | None = None
    timeout_seconds: int | None = Field(None, ge=0, le=3600)
    expires_at: datetime | None = None
    max_runs: int | None = Field(None, ge=1, le=1_000_000)
    cost_cap_cny: float | None = Field(None, gt=0, le=1_000_000)


class Schedule(Dto):
    """A scheduled job. ``disabled_reason``: why it stopped by itself (failures, expiry, maximum
    runs, cost cap); None when enabled or paused by hand. ``next_run`` is shown in UTC and in ``tz``."""

    id: str
    scope_id: str
    name: str
    prompt: str
    cron: str
    tz: str
    description: str
    mode: JobMode
    notify: dict[str, Any] | None
    enabled: bool
    timeout_seconds: int
    next_run: PreviewRun
    last_run_at: Timestamp | None
    last_status: Literal["ok", "error", "skipped"] | None
    last_error: str | None
    consecutive_failures: int
    run_count: int
    expires_at: Timestamp | None
    max_runs: int | None
    cost_cap_cny: float | None
    disabled_reason: str | None
    disabled_at: Timestamp | None
    bound_conversation_id: str | None
    created_at: Timestamp
    updated_at: Timestamp


class ScheduleList(Dto):
    items: list[Schedule]


class ScheduleRun(Dto):
    """One slot of a job: ``status`` queued|running|ok|error|skipped (``reason`` for skipped),
    ``coalesced`` missed slots it stands for, the delivery apart from the run's status."""

    id: str
    slot: PreviewRun
    status: Literal["queued", "running", "ok", "error", "skipped"]
    reason: str | None
    coalesced: int
    attempts: int
    conversation_id: str | None
    meme_id: str | None
    delivery_status: Literal["none", "queued", "succeeded", "failed", "unknown"]
    delivery_detail: dict[str, Any] | None
    error_code: str | None
    error: str | None
    cost_cny: float
    started_at: Timestamp | None
    finished_at: Timestamp | None


class ScheduleRunList(Dto):
    items: list[ScheduleRun]
