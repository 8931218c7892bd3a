"""The queue's own upkeep as task types (lane ``maintenance``): ``lease_reaping`` (lane slot rows,
expired leases with their types' failure hooks and batches) and ``batch_feeding`` (parked batch
tasks released as their pressure lane drains). The runtime schedules both every second
(:mod:`mewdex.runtime.maintenance`); an in-process :class:`~mewdex.queue.worker.Worker` with
``maintenance=True`` calls :func:`maintain` inline instead."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from mewdex.queue import batches, registry
from mewdex.queue import tasks as queue
from mewdex.queue.registry import Lane, TaskContext, register_lane, task_type

log = logging.getLogger(__name__)
MAINTENANCE_LANE = "maintenance"
INTERVAL_SECONDS = 1.0
_REAPED_OUTCOME = {"requeued": "retrying", "failed": "failed", "unknown_execution": "unknown_execution"}

register_lane(Lane(MAINTENANCE_LANE, listed=False))


def reap(session: Session) -> int:
    """Re-create the lane slot rows and handle expired leases (the types' failure hooks run and the
    batches of tasks that ended are finalised). Returns how many leases were reaped."""
    for lane in registry.lane_names():
        queue.ensure_lane(session, lane)
    reaped = queue.reap_expired(session)
    for r in reaped:
        task = r.task
        registry.failure_outcome(session, task, _REAPED_OUTCOME[r.outcome])
        if r.outcome != "requeued":
            batches.task_ended(session, task.scope_id, task.id)
        log.warning("lease of task %s expired: %s", task.id, r.outcome)
    return len(reaped)


def maintain(session: Session) -> dict[str, int]:
    """One maintenance pass inline: :func:`reap` then batch feeding. Returns ``{"reaped": n, "fed": n}``."""
    reaped = reap(session)
    return {"reaped": reaped, "fed": batches.feed(session)}


@task_type("lease_reaping", lane=MAINTENANCE_LANE, retry=registry.RetryPolicy(max_attempts=1))
def lease_reaping(ctx: TaskContext) -> dict[str, int]:
    """``{"reaped": n}``."""
    with ctx.sessions.begin() as session:
        return {"reaped": reap(session)}


@task_type("batch_feeding", lane=MAINTENANCE_LANE, retry=registry.RetryPolicy(max_attempts=1))
def batch_feeding(ctx: TaskContext) -> dict[str, int]:
    """``{"fed": n}``."""
    with ctx.sessions.begin() as session:
        return {"fed": batches.feed(session)}
