"""Back-pressure on interactive submissions, per lane: a lane declared with a ``backpressure`` limit
(:class:`mewdex.queue.registry.Lane`; the image pipeline's context lane ``agent`` uses
``MEWDEX_AGENT_BACKPRESSURE``, default 32) gives a scope whose queued tasks in it reached the limit
:class:`QueueFull` (the web layer answers 429 ``queue_full`` with ``Retry-After``). Stage hand-offs of accepted jobs
never pass through here, and
bulk submissions become batches that feed the lane as it drains (:mod:`mewdex.queue.batches`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mewdex.db.models.base import ScopeContext
from mewdex.db.models.queue import Task
from mewdex.queue import registry


class QueueFull(Exception):
    """The scope's queue in ``lane`` is at its limit. ``code`` is ``queue_full``; ``retry_after`` in seconds."""

    code = "queue_full"

    def __init__(self, lane: str, queued: int, limit: int, retry_after: int):
        super().__init__(f"the {lane} queue of this scope is full ({queued} queued, limit {limit}); retry later")
        self.lane, self.queued, self.limit, self.retry_after = lane, queued, limit, retry_after

    @property
    def details(self) -> dict[str, Any]:
        return {"lane": self.lane, "queued": self.queued, "limit": self.limit, "retry_after": self.retry_after}


def queued_in_lane(session: Session, scope: ScopeContext, lane: str) -> int:
    """Tasks of the scope in ``lane`` waiting to run (queued, not parked by a batch)."""
    from mewdex.queue.tasks import PARKED_AT

    return session.execute(
        select(func.count())
        .select_from(Task)
        .where(
            Task.scope_id == scope.scope_id, Task.lane == lane, Task.status == "queued", Task.available_at < PARKED_AT
        )
    ).scalar_one()


def limit(lane: str) -> int | None:
    """The lane's back-pressure limit (queued tasks per scope), None when the lane is not limited."""
    declared = registry.lane(lane)
    return declared.backpressure() if declared is not None and declared.backpressure is not None else None


def check(session: Session, scope: ScopeContext, lane: str, adding: int = 1) -> None:
    """Raise :class:`QueueFull` when ``adding`` more interactive tasks would pass the scope's limit in ``lane``.

    Lanes without a back-pressure limit always pass. Callers: single uploads with processing, task
    retries, re-submits of a few items (they pass the pressure lane of the task type
    they submit). The suggested ``Retry-After`` grows with the backlog (about 2 s per queued task
    over the limit, 5..300 s).
    """
    cap = limit(lane)
    if cap is None:
        return
    queued = queued_in_lane(session, scope, lane)
    if queued + adding > cap:
        retry_after = max(5, min(300, 2 * (queued + adding - cap) + 5))
        raise QueueFull(lane, queued, cap, retry_after)
