"""Operation grants (seed 000 ``operation_grants``): reserve before a metered call, then commit
(which writes its usage event) or release; every step is idempotent per idempotency key."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.db.models import OperationGrant, ScopeContext, utcnow
from mewdex.platform import usage
from mewdex.platform.errors import PlatformError

ANALYSIS_OPERATIONS = ("analysis.agent", "analysis.reverse_image_search", "provider.chat", "provider.embedding")
# Usage kinds the monthly budget (``analysis_cost_per_month``) counts: every metered outside call.
BUDGET_KINDS = ("analysis", "chat", "embedding", "reverse_image_search", "schedule_run")


def reserve(
    session: Session,
    scope: ScopeContext,
    operation: str,
    idempotency_key: str,
    *,
    units: int = 1,
    task_id: str | None = None,
    resource_id: str | None = None,
    source: str | None = None,
    check_budget: bool = True,
) -> OperationGrant:
    """The grant for ``(scope, operation, idempotency_key)``, created ``acquired`` on first call;
    a released grant is acquired again, a committed one is returned as is.

    Raises 429 ``quota_exceeded`` for an analysis operation when the scope's owner has spent the
    monthly ``analysis_cost_per_month``.
    """
    if check_budget and operation in ANALYSIS_OPERATIONS:
        _check_analysis_budget(session, scope)
    created = session.execute(
        insert(OperationGrant)
        .values(
            scope_id=scope.scope_id,
            operation=operation,
            idempotency_key=idempotency_key,
            grant_id=f"grant_{uuid.uuid4().hex}",
            task_id=task_id,
            resource_id=resource_id,
            source=source,
            units=units,
            state="acquired",
            created_at=utcnow(),
            updated_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["scope_id", "operation", "idempotency_key"])
        .returning(OperationGrant)
    ).scalar_one_or_none()
    if created is not None:  # new, so this transaction holds it
        return created
    grant = session.execute(
        select(OperationGrant)
        .where(
            OperationGrant.scope_id == scope.scope_id,
            OperationGrant.operation == operation,
            OperationGrant.idempotency_key == idempotency_key,
        )
        .with_for_update()
    ).scalar_one()
    if grant.state == "released":
        grant.state = "acquired"
    return grant


def commit(
    session: Session,
    grant: OperationGrant,
    *,
    kind: str,
    model_profile: str,
    units: dict[str, Any],
    metering_units: int | None = None,
    cost: Decimal | None = None,
) -> None:
    """Mark the grant committed and write its usage event (once, keyed by the grant id)."""
    if grant.state == "committed":
        return
    if grant.state not in ("acquired", "unknown"):
        raise PlatformError("grant_not_acquired", f"grant {grant.grant_id} is {grant.state}")
    grant.state = "committed"
    grant.metering_units = metering_units if metering_units is not None else grant.units
    usage.record(
        session,
        scope_id=grant.scope_id,
        kind=kind,
        model_profile=model_profile,
        units=units,
        task_id=grant.task_id,
        idempotency_key=f"grant:{grant.grant_id}",
        cost=cost,
    )


def release(session: Session, grant: OperationGrant) -> None:
    """Give the reservation back (the call did not happen or failed); a committed grant stays."""
    if grant.state == "acquired":
        grant.state = "released"


def _check_analysis_budget(session: Session, scope: ScopeContext) -> None:
    from mewdex.platform.owners import user_for_scope
    from mewdex.platform.quotas import limits_for

    user = user_for_scope(session, scope.scope_id)
    if user is None:
        return
    limit = limits_for(user).analysis_cost_per_month
    if limit is not None and usage.month_cost(session, scope.scope_id, BUDGET_KINDS) >= limit:
        raise PlatformError(
            "quota_exceeded", "this month's analysis budget is spent", {"analysis_cost_per_month": float(limit)}
        )
