"""Schedules (issue 18): ``/api/v1/schedules`` — the preview of a cron expression in a zone.

Errors: 422 ``cron_invalid`` / ``cron_never_runs`` / ``timezone_invalid`` / ``schedule_invalid``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Depends, Query

from mewdex.db.models import ScopeContext
from mewdex.dto import schedules as dto
from mewdex.schedules import cron
from mewdex.schedules.errors import ScheduleError
from mewdex.web.deps import current_scope

router = APIRouter(prefix="/api/v1/schedules", tags=["schedules"])


def parse_instant(value: str | None) -> datetime:
    """An ISO 8601 instant with an offset (``Z`` allowed); now when None. 422 ``schedule_invalid``."""
    if value is None or not value.strip():
        return datetime.now(UTC)
    try:
        instant = datetime.fromisoformat(value.strip().replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        raise ScheduleError("schedule_invalid", f"after: not an ISO 8601 instant: {value!r}") from None
    if instant.tzinfo is None:
        raise ScheduleError("schedule_invalid", "after: the instant needs an offset (e.g. 2027-03-27T01:30Z)")
    return instant


@router.get("/preview", response_model=dto.SchedulePreview)
def preview(
    cron_expr: str = Query(..., alias="cron", max_length=200, description="5-field cron expression"),
    tz: str = Query(cron.DEFAULT_TZ, max_length=100, description="IANA time zone"),
    after: str | None = Query(None, max_length=64, description="ISO instant; default now"),
    count: int = Query(5, ge=1, le=cron.MAX_PREVIEW),
    _scope: ScopeContext = Depends(current_scope),
):
    """The next ``count`` runs of ``cron`` in ``tz`` strictly after ``after``, in UTC and in the zone."""
    return cron.preview(cron_expr, tz, parse_instant(after), count)
