"""The durable task queue: enqueue with dedupe, claim with ``FOR UPDATE SKIP LOCKED``, leases,
heartbeats, ``claim_generation`` fencing, retries with capped exponential backoff and jitter.

Every write-back of a claimed task goes through :func:`fenced` so a worker that lost its lease
(another worker re-claimed the task with a higher generation) can never apply its result.
"""

from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass
from datetime import timedelta
from collections.abc import Callable
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.db.models import Task, utcnow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    """A task claimed by one worker: its identity, payload and the generation that fences it."""

    scope_id: str
    task_id: str
    task_type: str
    lane: str
    payload: dict[str, Any]
    processing_job_id: uuid.UUID | None
    image_stage: str | None
    target_meme_id: uuid.UUID | None
    claim_generation: int
    attempt_count: int
    max_attempts: int


class StaleClaim(Exception):
    """The claim's generation is no longer current (lease lost); its result must be discarded."""


def new_task_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def enqueue(session: Session, *, scope_id: str, task_type: str, lane: str = "default", dedupe_key: str | None = None,
            payload: dict[str, Any] | None = None, max_attempts: int = 3, **fields: Any) -> Task:
    """Insert a queued task, or return the active (queued/running) one with the same dedupe key."""
    values = dict(
        id=new_task_id(task_type),
        scope_id=scope_id,
        task_type=task_type,
        lane=lane,
        dedupe_key=dedupe_key,
        payload=payload or {},
        max_attempts=max_attempts,
        status="queued",
        available_at=utcnow(),
        **fields,
    )
    stmt = insert(Task).values(**values)
    if dedupe_key is not None:
        stmt = stmt.on_conflict_do_nothing(
            index_elements=["scope_id", "task_type", "dedupe_key"],
            index_where=text("status IN ('queued','running') AND dedupe_key IS NOT NULL"),
        )
    inserted = session.execute(stmt.returning(Task.id)).scalar_one_or_none()
    if inserted is None:
        return session.execute(
            select(Task).where(
                Task.scope_id == scope_id,
                Task.task_type == task_type,
                Task.dedupe_key == dedupe_key,
                Task.status.in_(("queued", "running")),
            )
        ).scalar_one()
    return session.get(Task, inserted)


_CLAIM_SQL = text(
    """
    WITH candidate AS (
        SELECT t.scope_id, t.id
        FROM tasks t
        LEFT JOIN task_lane_fairness f
          ON f.lane = t.lane AND f.resource_key = t.lane_resource_key AND f.scope_id = t.scope_id
        WHERE t.lane = ANY(:lanes)
          AND ((t.status = 'queued' AND t.available_at <= now())
               OR (t.status = 'running' AND t.lease_expires_at < now()))
        ORDER BY coalesce(f.last_dispatch_sequence, 0), t.available_at, t.created_at
        LIMIT 1
        FOR UPDATE OF t SKIP LOCKED
    )
    UPDATE tasks t
    SET status = 'running',
        claim_generation = t.claim_generation + 1,
        attempt_count = t.attempt_count + 1,
        lease_owner = :owner,
        lease_expires_at = now() + make_interval(secs => :lease),
        started_at = coalesce(t.started_at, now()),
        updated_at = now()
    FROM candidate c
    WHERE t.scope_id = c.scope_id AND t.id = c.id
    RETURNING t.scope_id, t.id, t.task_type, t.lane, t.lane_resource_key, t.payload, t.processing_job_id,
              t.image_stage, t.target_meme_id, t.claim_generation, t.attempt_count, t.max_attempts
    """
)

_FAIRNESS_SQL = text(
    """
    INSERT INTO task_lane_fairness (lane, resource_key, scope_id, last_dispatch_sequence, created_at, updated_at)
    VALUES (CAST(:lane AS varchar), CAST(:resource_key AS varchar), :scope_id,
            (SELECT coalesce(max(last_dispatch_sequence), 0) + 1 FROM task_lane_fairness
             WHERE lane = CAST(:lane AS varchar) AND resource_key = CAST(:resource_key AS varchar)), now(), now())
    ON CONFLICT (lane, resource_key, scope_id)
    DO UPDATE SET last_dispatch_sequence = EXCLUDED.last_dispatch_sequence, updated_at = now()
    """
)


def claim(session: Session, *, owner: str, lanes: list[str], lease_seconds: int) -> Claim | None:
    """Claim the next runnable task in ``lanes`` (queued and due, or running with an expired lease).

    Scopes take turns (round-robin on ``task_lane_fairness.last_dispatch_sequence``). Returns None
    when nothing is runnable. Commit the session to make the claim visible.
    """
    row = session.execute(_CLAIM_SQL, {"lanes": lanes, "owner": owner, "lease": lease_seconds}).mappings().first()
    if row is None:
        return None
    session.execute(
        _FAIRNESS_SQL, {"lane": row["lane"], "resource_key": row["lane_resource_key"], "scope_id": row["scope_id"]}
    )
    return Claim(
        scope_id=row["scope_id"],
        task_id=row["id"],
        task_type=row["task_type"],
        lane=row["lane"],
        payload=row["payload"],
        processing_job_id=row["processing_job_id"],
        image_stage=row["image_stage"],
        target_meme_id=row["target_meme_id"],
        claim_generation=row["claim_generation"],
        attempt_count=row["attempt_count"],
        max_attempts=row["max_attempts"],
    )


def heartbeat(session: Session, c: Claim, lease_seconds: int) -> bool:
    """Extend the lease; False when the claim is stale (another worker owns the task now)."""
    result = session.execute(
        text(
            "UPDATE tasks SET lease_expires_at = now() + make_interval(secs => :lease), updated_at = now() "
            "WHERE scope_id = :s AND id = :i AND claim_generation = :g AND status = 'running'"
        ),
        {"lease": lease_seconds, "s": c.scope_id, "i": c.task_id, "g": c.claim_generation},
    )
    return result.rowcount == 1


def fenced(session: Session, c: Claim) -> Task:
    """Lock the task row iff ``c`` is still the current claim; raises StaleClaim otherwise.

    Call first inside the write-back transaction: everything written after it commits atomically
    with the task's new status, or not at all.
    """
    task = session.execute(
        select(Task)
        .where(Task.scope_id == c.scope_id, Task.id == c.task_id)
        .with_for_update()
    ).scalar_one_or_none()
    if task is None or task.claim_generation != c.claim_generation or task.status != "running":
        raise StaleClaim(f"task {c.task_id} generation {c.claim_generation} is stale")
    return task


def succeed(task: Task, result: Any = None, message: str | None = None) -> None:
    """Mark a fenced task succeeded."""
    task.status = "succeeded"
    task.result = result
    task.progress = 1.0
    task.message = message
    task.error = None
    task.completed_at = utcnow()
    task.lease_owner = None
    task.lease_expires_at = None


def backoff_seconds(attempt: int, base: float, cap: float) -> float:
    """Capped exponential backoff with full jitter: uniform(0.5, 1.0) × min(cap, base × 2^(attempt-1))."""
    exponent = min(max(0, attempt - 1), 62)  # 2**62 × base is past any cap; avoids float overflow
    return min(cap, base * 2**exponent) * random.uniform(0.5, 1.0)


def fail(task: Task, code: str, message: str, *, retryable: bool, base: float, cap: float) -> bool:
    """Record an error on a fenced task; requeue it with backoff while attempts remain.

    Returns True when the task failed for good (no attempts left or not retryable).
    """
    error = {"code": code, "message": message[:500], "attempt": task.attempt_count, "at": utcnow().isoformat()}
    task.error = error
    task.first_error = task.first_error or error
    task.error_history = [*task.error_history, error][-20:]
    task.lease_owner = None
    task.lease_expires_at = None
    if retryable and task.attempt_count < task.max_attempts:
        task.status = "queued"
        task.available_at = utcnow() + timedelta(seconds=backoff_seconds(task.attempt_count, base, cap))
        task.message = f"retrying after {code}"
        return False
    task.status = "failed"
    task.completed_at = utcnow()
    task.message = message[:500]
    return True


def reap_exhausted(session: Session) -> list[tuple[str, str]]:
    """Fail running tasks whose lease expired after their last allowed attempt (worker died).

    Returns the (scope_id, task_id) pairs failed, for their jobs to be updated.
    """
    rows = session.execute(
        text(
            "UPDATE tasks SET status = 'failed', completed_at = now(), updated_at = now(), lease_owner = NULL, "
            "error = jsonb_build_object('code', 'lease_expired', 'message', 'the worker stopped responding', "
            "'attempt', attempt_count), error_history = error_history || jsonb_build_array(jsonb_build_object("
            "'code', 'lease_expired', 'attempt', attempt_count)) "
            "WHERE status = 'running' AND lease_expires_at < now() AND attempt_count >= max_attempts "
            "RETURNING scope_id, id"
        )
    ).all()
    return [(r[0], r[1]) for r in rows]


def expire_orphaned_leases(session: Session, hostname: str, alive: Callable[[int], bool]) -> int:
    """Expire now the leases held by dead worker processes of this host, so their tasks are
    re-claimed at once instead of after the lease time. Lease owners are ``host:pid:suffix``."""
    rows = session.execute(
        select(Task.scope_id, Task.id, Task.lease_owner).where(
            Task.status == "running", Task.lease_owner.like(f"{hostname}:%")
        )
    ).all()
    dead = [(s, i) for s, i, owner in rows if not alive(int(owner.split(":")[1]))]
    for scope_id, task_id in dead:
        session.execute(
            text("UPDATE tasks SET lease_expires_at = now() WHERE scope_id = :s AND id = :i AND status = 'running'"),
            {"s": scope_id, "i": task_id},
        )
    return len(dead)
