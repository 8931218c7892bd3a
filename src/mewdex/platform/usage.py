"""Metering: one ``usage_events`` row per metered call, priced from the config's price table.

Kinds written today: ``analysis`` (the agent stage), ``embedding`` (the text-embedding stage),
``image_search`` (search by image). Local model profiles cost 0 unless the price table says
otherwise (``MEWDEX_PRICES='{"profile": {"unit": CNY per unit}}'``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Date, Select, String, cast, func, literal, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.models import UsageEvent, User, utcnow

GROUPS = ("day", "kind", "model_profile", "user")


def price(model_profile: str, units: dict[str, Any]) -> Decimal:
    """Cost in CNY: Σ units[k] × price[model_profile][k] over numeric units with a price."""
    table = get_settings().prices.get(model_profile, {})
    total = Decimal(0)
    for unit, per in table.items():
        amount = units.get(unit)
        if isinstance(amount, (int, float)) and not isinstance(amount, bool):
            total += Decimal(str(amount)) * Decimal(str(per))
    return total.quantize(Decimal("0.000001"))


@dataclass(frozen=True)
class Usage:
    """One metered call: ``units`` of ``model_profile`` (priced by :func:`price` unless ``cost``)."""

    kind: str
    model_profile: str
    units: dict[str, Any]
    task_id: str | None = None
    idempotency_key: str | None = None
    cost: Decimal | None = None


def record(
    session: Session,
    *,
    scope_id: str,
    kind: str,
    model_profile: str,
    units: dict[str, Any],
    task_id: str | None = None,
    idempotency_key: str | None = None,
    cost: Decimal | None = None,
) -> None:
    """Write one usage event for the scope's owner (``user_id`` NULL in single-user mode); a second
    write with the same ``idempotency_key`` is a no-op."""
    record_all(session, scope_id, [Usage(kind, model_profile, units, task_id, idempotency_key, cost)])


def record_all(session: Session, scope_id: str, events: list[Usage]) -> None:
    """:func:`record` for several events of one scope, in one statement."""
    if not events:
        return
    owner = select(User.user_id).where(User.scope_id == scope_id).scalar_subquery()
    now = utcnow()
    stmt = insert(UsageEvent).values(
        [
            {
                "user_id": owner,
                "scope_id": scope_id,
                "task_id": e.task_id,
                "kind": e.kind,
                "model_profile": e.model_profile,
                "units": e.units,
                "cost_cny": price(e.model_profile, e.units) if e.cost is None else e.cost,
                "idempotency_key": e.idempotency_key,
                "created_at": now,
            }
            for e in events
        ]
    )
    # events without a key never conflict (NULLs are distinct)
    session.execute(stmt.on_conflict_do_nothing(index_elements=["idempotency_key"]))


def month_cost(session: Session, scope_id: str, kinds: tuple[str, ...] = ("analysis",)) -> Decimal:
    """The scope's cost of ``kinds`` in the current calendar month (UTC)."""
    start = utcnow().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return session.execute(
        select(func.coalesce(func.sum(UsageEvent.cost_cny), 0)).where(
            UsageEvent.scope_id == scope_id, UsageEvent.kind.in_(kinds), UsageEvent.created_at >= start
        )
    ).scalar_one()


def summary(session: Session, *, start: datetime, end: datetime, group_by: str, scope_id: str | None = None) -> dict:
    """Events in ``[start, end)`` grouped by ``day`` | ``kind`` | ``model_profile`` | ``user``, for one
    scope or (``scope_id`` None, admin) all: ``{"from", "to", "group_by", "groups": [{"key", "events",
    "cost"}], "total": {"events", "cost"}}``; cost in CNY."""
    key = {
        "day": cast(func.timezone("UTC", UsageEvent.created_at), Date),
        "kind": UsageEvent.kind,
        "model_profile": UsageEvent.model_profile,
        "user": func.coalesce(cast(UsageEvent.user_id, String), literal("scope:") + UsageEvent.scope_id),
    }[group_by]
    query: Select[Any, int, Any] = select(
        key.label("key"), func.count().label("events"), func.sum(UsageEvent.cost_cny).label("cost")
    ).where(UsageEvent.created_at >= start, UsageEvent.created_at < end)
    if scope_id is not None:
        query = query.where(UsageEvent.scope_id == scope_id)
    rows = session.execute(query.group_by(key).order_by(key)).all()
    groups = [{"key": str(r.key), "events": r.events, "cost": float(r.cost or 0)} for r in rows]
    return {
        "from": start.isoformat(),
        "to": end.isoformat(),
        "group_by": group_by,
        "groups": groups,
        "total": {"events": sum(g["events"] for g in groups), "cost": round(sum(g["cost"] for g in groups), 6)},
    }


def instance_usage(session: Session) -> dict:
    """The whole instance (:class:`mewdex.dto.users.InstanceUsage`): ``{"users", "users_disabled",
    "memes", "storage_bytes", "analysis_cost_this_month"}`` — memes and their bytes in every library
    of the instance, counted from the memes themselves (the single-user library belongs to no account,
    so the accounts' disk usage rows would leave it out: "Memes 0" beside 935 imported), cost in CNY
    over every scope this calendar month (UTC)."""
    from mewdex.db.models import Meme

    accounts, disabled = session.execute(
        select(func.count(), func.count().filter(User.disabled.is_(True))).select_from(User)
    ).one()
    memes, stored = session.execute(
        select(func.count(), func.coalesce(func.sum(Meme.size_bytes), 0)).select_from(Meme)
    ).one()
    start = utcnow().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    cost = session.execute(
        select(func.coalesce(func.sum(UsageEvent.cost_cny), 0)).where(
            UsageEvent.kind == "analysis", UsageEvent.created_at >= start
        )
    ).scalar_one()
    return {
        "users": int(accounts),
        "users_disabled": int(disabled),
        "memes": int(memes),
        "storage_bytes": int(stored),
        "analysis_cost_this_month": float(cost),
    }
