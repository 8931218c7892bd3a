"""Metering of outside calls: every call to a provider (a model, an embeddings endpoint, a
reverse-image search) is one :func:`metered_call` — reserve an operation grant (``quota_exceeded``
before any call), call, then commit the real cost or release; one usage event and one connector
audit row for every call, refused and failed ones included. :func:`optional_call` is the same for a
step the caller can do without (a search step): None instead of the error.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.db.models import OperationGrant, ScopeContext
from mewdex.providers import connectors, openai_compat
from mewdex.providers.errors import ProviderError
from mewdex.providers.openai_compat import ModelClient

log = logging.getLogger(__name__)


@dataclass
class CallResult:
    """What the ``call`` of :func:`metered_call` returns: its ``value``, the usage ``units``
    (``input_tokens``, ``cached_input_tokens``, ``output_tokens``, ``images``, ``requests``),
    ``status_code`` and ``response_bytes`` when known, and safe audit ``detail``."""

    value: Any
    units: dict[str, Any]
    status_code: int | None = 200
    response_bytes: int | None = None
    detail: dict[str, Any] | None = None


def metered_call(
    sessions: sessionmaker,
    scope: ScopeContext,
    model: ModelClient,
    call: Callable[[], CallResult],
    *,
    operation: str,
    idempotency_key: str | None = None,
    kind: str,
    event: str,
    task_id: str | None = None,
    resource_id: str | None = None,
    before_call: Callable[[], None] | None = None,
    max_cost: Decimal | None = None,
) -> CallResult:
    """Run one metered outside call (module doc) with ``model`` (its ``client`` may be None: a
    provider called over plain HTTP). ``operation``: the operation grant's
    (``analysis.agent``, ``provider.chat``, ``provider.embedding`` …); ``kind``: the usage event's;
    ``event``: the audit's; ``before_call``: run after the grant is reserved and just before the
    call (a task handler's ``ctx.external_started``); ``max_cost``: a frozen per-call limit (a job's
    ``analysis_policy``) — when the price of one image alone exceeds it the call is refused.

    Raises :class:`ProviderError` (the call failed; the grant released, a ``failed`` usage event
    and audit written) or ``PlatformError`` ``quota_exceeded`` (refused before any call; a
    ``refused`` usage event and audit written)."""
    from mewdex.platform import grants, usage
    from mewdex.platform.errors import PlatformError

    key = idempotency_key or f"call:{uuid.uuid4().hex}"
    base_units = {"provider": model.connection.provider, "model": model.model, "price_version": model.price.version}
    connection = model.connection
    try:
        with sessions.begin() as session:
            if max_cost is not None and model.price.image > max_cost:
                raise PlatformError(
                    "quota_exceeded",
                    "the analysis policy's cost limit would be passed",
                    {"max_cost_per_image": float(max_cost)},
                )
            grant = grants.reserve(
                session, scope, operation, key, task_id=task_id, resource_id=resource_id, source=openai_compat.PROVIDER
            )
            grant_id = grant.grant_id
    except PlatformError as exc:
        if exc.code != "quota_exceeded":
            raise
        with sessions.begin() as session:
            usage.record(
                session,
                scope_id=scope.scope_id,
                kind=kind,
                model_profile=model.model_profile,
                units={**base_units, "requests": 0, "outcome": "refused"},
                task_id=task_id,
                idempotency_key=f"refused:{uuid.uuid4().hex}",
                cost=Decimal(0),
            )
            connectors.audit(
                session,
                connection,
                event=event,
                outcome="refused",
                operation_id=key,
                task_id=task_id,
                detail={"code": exc.code, "model": model.model},
            )
        raise
    if before_call is not None:
        before_call()
    started = time.monotonic()
    try:
        result = call()
    except Exception as exc:  # noqa: BLE001 — every failure is metered and audited
        error = openai_compat.provider_error(exc)
        duration = int((time.monotonic() - started) * 1000)
        log.info("provider call failed: %s %s (%s)", event, model.model, error.code)
        with sessions.begin() as session:
            grant = _grant(session, grant_id)
            grants.release(session, grant)
            usage.record(
                session,
                scope_id=scope.scope_id,
                kind=kind,
                model_profile=model.model_profile,
                units={**base_units, "requests": 1, "outcome": "failed"},
                task_id=task_id,
                idempotency_key=f"failed:{grant_id}:{uuid.uuid4().hex[:8]}",
                cost=Decimal(0),
            )
            connectors.audit(
                session,
                connection,
                event=event,
                outcome="failed",
                status_code=error.status_code,
                duration_ms=duration,
                operation_id=key,
                task_id=task_id,
                detail={"code": error.code, "model": model.model},
            )
        raise error from None
    duration = int((time.monotonic() - started) * 1000)
    units = {**base_units, **result.units}
    cost = model.price.cost(units)
    with sessions.begin() as session:
        grant = _grant(session, grant_id)
        grants.commit(
            session, grant, kind=kind, model_profile=model.model_profile, units={**units, "outcome": "ok"}, cost=cost
        )
        connectors.audit(
            session,
            connection,
            event=event,
            outcome="ok",
            status_code=result.status_code,
            duration_ms=duration,
            response_bytes=result.response_bytes,
            operation_id=key,
            task_id=task_id,
            detail={"model": model.model, **(result.detail or {})},
        )
    return result


def optional_call(
    sessions: sessionmaker, scope: ScopeContext, model: ModelClient, call: Callable[[], CallResult], **options: Any
) -> CallResult | None:
    """:func:`metered_call` (same ``options``) of a step the caller can do without: None when it was
    refused or failed (metered, audited and logged already), and ``model``'s client closed either way."""
    from mewdex.platform.errors import PlatformError

    with model:
        try:
            return metered_call(sessions, scope, model, call, **options)
        except (ProviderError, PlatformError) as exc:
            log.info("%s not used (%s)", options.get("event", "call"), exc.code)
            return None


def _grant(session: Session, grant_id: str) -> OperationGrant:
    return session.execute(
        select(OperationGrant).where(OperationGrant.grant_id == grant_id).with_for_update()
    ).scalar_one()
