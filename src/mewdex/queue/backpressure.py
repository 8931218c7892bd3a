"""Back-pressure on interactive submissions: a scope whose queued agent-lane tasks reached
``MEWDEX_AGENT_BACKPRESSURE`` (default 32) gets :class:`QueueFull` (the web layer answers 429
``queue_full`` with ``Retry-After``). Stage hand-offs of accepted jobs never pass through here, and
bulk submissions become batches that feed the lane as it drains (:mod:`mewdex.queue.batches`)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.models import ScopeContext, Task

# Lanes whose depth is limited, and the lane whose limit applies to a pipeline submission: a new
# job's first stage (visual) ends up in the agent lane a moment later.
LIMITED_LANES = ("agent",)


class QueueFull(Exception):
    """The scope's queue in ``lane`` is at its limit. ``code`` is ``queue_full``; ``retry_after`` in seconds."""

    code = "queue_full"

    def __init__(self, lane: str, queued: int, limit: int, retry_after: int):
        super().__init__(f"the {lane} queue of this scope is full ({queued} queued, limit {limit}); retry later")
        self.lane, self.queued, self.limit, self.retry_after = lane, queued, limit, retry_after

    @property
    def details(self) -> dict:
        return {"lane": self.lane, "queued": self.queued, "limit": self.limit, "retry_after": self.retry_after}


def queued_in_lane(session: Session, scope: ScopeContext, lane: str) -> int:
    """Tasks of the scope in ``lane`` waiting to run (queued, not parked by a batch)."""
    from mewdex.queue.tasks import PARKED_AT

    return session.execute(
        select(func.count()).select_from(Task).where(
            Task.scope_id == scope.scope_id, Task.lane == lane, Task.status == "queued", Task.available_at < PARKED_AT
        )
    ).scalar_one()


def check(session: Session, scope: ScopeContext, lane: str = "agent", adding: int = 1) -> None:
    """Raise :class:`QueueFull` when ``adding`` more interactive tasks would pass the scope's limit in ``lane``.

    Only the agent lane is limited (``MEWDEX_AGENT_BACKPRESSURE``); other lanes always pass. Callers:
    single uploads with processing, task retries, processing re-submits of a few memes. The
    suggested ``Retry-After`` grows with the backlog (about 2 s per queued task over the limit, 5..300 s).
    """
    if lane not in LIMITED_LANES:
        return
    limit = get_settings().agent_backpressure
    queued = queued_in_lane(session, scope, lane)
    if queued + adding > limit:
        retry_after = max(5, min(300, 2 * (queued + adding - limit) + 5))
        raise QueueFull(lane, queued, limit, retry_after)
