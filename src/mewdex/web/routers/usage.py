"""``GET /api/v1/usage?from=&to=&group_by=day|kind``: the caller's metered usage and cost (CNY)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session

from mewdex.dto.scopes import ScopeContext
from mewdex.dto.users import UsageSummary
from mewdex.platform import usage
from mewdex.web.deps import current_scope, db_session
from mewdex.web.errors import ApiError, error_responses

router = APIRouter(prefix="/api/v1", tags=["usage"], responses=error_responses(401, 422))
DEFAULT_DAYS = 30


def time_range(start: datetime | None, end: datetime | None) -> tuple[datetime, datetime]:
    """``[start, end)`` in UTC (naive = UTC); default the last 30 days; 422 ``range_invalid``."""
    try:
        end = end or datetime.now(UTC)
        end = end if end.tzinfo else end.replace(tzinfo=UTC)
        start = start or end - timedelta(days=DEFAULT_DAYS)
        start = start if start.tzinfo else start.replace(tzinfo=UTC)
        if start >= end:
            raise ValueError
        start, end = start.astimezone(UTC), end.astimezone(UTC)
    except (ValueError, OverflowError):
        raise ApiError(422, "range_invalid", "from must be before to") from None
    return start, end


@router.get("/usage", response_model=UsageSummary)
def my_usage(
    start: datetime | None = Query(None, alias="from"),
    end: datetime | None = Query(None, alias="to"),
    group_by: str = Query("day", pattern="^(day|kind|model_profile)$"),
    scope: ScopeContext = Depends(current_scope),
    session: Session = Depends(db_session),
):
    """``{"from", "to", "group_by", "groups": [{"key", "events", "cost"}], "total": {"events", "cost"}}``."""
    start, end = time_range(start, end)
    return usage.summary(session, start=start, end=end, group_by=group_by, scope_id=scope.scope_id)
