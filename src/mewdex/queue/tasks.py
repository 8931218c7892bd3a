"""The durable task queue: enqueue with dedupe, claim with ``FOR UPDATE SKIP LOCKED`` (lane slot, resource
slot, fairness and attempt row in the same statement), leases, heartbeats, ``claim_generation`` fencing,
retries with capped exponential backoff and jitter, and the reaping of expired leases.

Every write-back of a claimed task goes through :func:`fenced` or :func:`complete` so a worker that lost
its lease (another worker re-claimed the task with a higher generation) can never apply its result.

Lanes: every task has a ``lane`` and a ``lane_resource_key``. A claim holds one of the lane's global
slots (``task_lane_slots``, slot numbers below the lane's concurrency) and one of the resource key's
slots (``task_lane_resource_slots``) until the task ends, is requeued, or its lease is reaped, so the
per-lane concurrency holds across every worker process. Among scopes with runnable work in a lane the
claim goes to the one whose ``task_lane_fairness.last_dispatch_sequence`` is lowest (least recently
served): round-robin across scopes, whatever their backlog. In a lane whose types use per-scope
resource keys (``scope:<id>``, :func:`scope_resource_key`), the lane's ``scope_share`` caps what one
scope runs at once: the rest of the lane stays free for the others.
"""

from __future__ import annotations

import json
import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, object_session

from mewdex import hooks
from mewdex.config import get_settings
from mewdex.db.models.base import GLOBAL_LANE_RESOURCE_KEY, utcnow
from mewdex.db.models.queue import Task, TaskAttempt

log = logging.getLogger(__name__)

MAX_LANE_SLOTS = 8
# ``available_at`` of a task a batch holds back until its lane drains (see queue.batches.feed).
PARKED_AT = datetime(9999, 1, 1, tzinfo=UTC)
ACTIVE = ("queued", "running")


@dataclass(frozen=True)
class Claim:
    """A task claimed by one worker: its identity, payload and the generation that fences it."""

    scope_id: str
    task_id: str
    task_type: str
    lane: str
    payload: dict[str, Any]
    claim_generation: int
    attempt_count: int
    max_attempts: int
    lane_resource_key: str = GLOBAL_LANE_RESOURCE_KEY
    owner: str = ""
    #: The batch the task belongs to, read by the claim (None: in none). Membership is only ever
    #: added, at enqueue, so it still holds at the write-back.
    batch_id: str | None = None


class StaleClaim(Exception):
    """The claim's generation is no longer current (lease lost); its result must be discarded."""


@dataclass(frozen=True)
class Lane:
    """A lane: ``concurrency`` running tasks at once across every process (None: the setting
    ``MEWDEX_LANE_CONCURRENCY_<LANE>``, 8 without one) and, optionally, a per-scope
    ``backpressure`` limit of queued tasks (a callable, read at each check) past which interactive
    submissions get ``queue_full`` and batches stop feeding (:mod:`mewdex.queue.backpressure`)."""

    name: str
    concurrency: Callable[[], int] | None = None
    backpressure: Callable[[], int] | None = None
    #: listed with zero counts on the tasks page and ``/health`` (False: internal lanes, shown only when busy)
    listed: bool = True
    #: running tasks at once of one scope, for the types of the lane with per-scope resource keys
    #: (:func:`scope_resource_key`; None: the lane's concurrency); a ``MEWDEX_RESOURCE_CONCURRENCY``
    #: entry for one key wins
    scope_share: Callable[[], int] | None = None

    def cap(self) -> int:
        return self.concurrency() if self.concurrency is not None else get_settings().lane_concurrency(self.name)

    def scope_cap(self) -> int | None:
        return None if self.scope_share is None else min(MAX_LANE_SLOTS, max(1, self.scope_share()))


SCOPE_RESOURCE_PREFIX = "scope:"


def scope_resource_key(scope_id: str) -> str:
    """The resource key of a type whose tasks take a per-scope share of their lane (``scope:<id>``)."""
    return SCOPE_RESOURCE_PREFIX + scope_id


#: The lanes loaded so far (the ``lanes`` hook's live mapping, :mod:`mewdex.hooks`): use :func:`lane`
#: and :func:`lane_names`, which load the plugin that declares a lane.
LANES: dict[str, Lane] = hooks.provided("lanes")
_IMPLICIT: set[str] = set()


def register_lane(lane: Lane) -> Lane:
    """Declare a lane (the ``lanes`` hook; a later declaration of the same name replaces the earlier
    one). Lanes list in the plugins' order; one first declared implicitly by a task type is replaced."""
    _IMPLICIT.discard(lane.name)
    return hooks.provide("lanes", lane.name, lane, stacklevel=2)


def declare_lane_implicitly(name: str, module: str) -> None:
    """Declare ``name`` with defaults unless it is declared (a task type's lane; the plugin that declares
    it, when one does, replaces it once imported: nothing is imported here, in the middle of a module's
    import). ``module``: the module of the task type that names it (its provider in :func:`hooks.table`)."""
    if name not in LANES:  # a plugin that declares it replaces it when imported (:func:`lane`)
        hooks.provide("lanes", name, Lane(name), module=module)
        _IMPLICIT.add(name)


def lane(name: str) -> Lane | None:
    """The declared lane ``name`` (its plugin imported on first use), None when nobody declares it."""
    if name in _IMPLICIT and (module := hooks.declared("lanes").get(name)) is not None:
        hooks.load([module])  # declared implicitly by a task type of another plugin: load the real one
    found: Lane | None = hooks.get("lanes", name)
    return found


def lane_names(listed_only: bool = False) -> list[str]:
    """Every declared lane (``listed_only``: those with ``listed``), in the plugins' order (this imports
    every plugin that declares a lane)."""
    lanes: dict[str, Lane] = hooks.implementations("lanes")
    return [name for name, lane in lanes.items() if lane.listed or not listed_only]


register_lane(Lane("default"))


def new_task_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


# Rows that exist are skipped before the insert: ON CONFLICT alone waits for any transaction that has
# updated the conflicting row and not committed yet, which a claim does to its slot rows and its
# scope's fairness row. A hand-off enqueuing in its write-back (holding a row lock of its own type's)
# then waited for a claim whose on_claim waited for that row: a deadlock (seen with the pipeline's
# stages once in five `bench/ingest.py` runs).
_ENSURE_LANE_SQL = text(
    """
    WITH l AS (
        INSERT INTO task_lane_slots (lane, slot_number)
        SELECT CAST(:lane AS varchar), n FROM generate_series(0, :slots - 1) n
        WHERE NOT EXISTS (SELECT 1 FROM task_lane_slots s WHERE s.lane = CAST(:lane AS varchar) AND s.slot_number = n)
        ON CONFLICT DO NOTHING
    ), r AS (
        INSERT INTO task_lane_resource_slots (lane, resource_key, slot_number)
        SELECT CAST(:lane AS varchar), CAST(:key AS varchar), n FROM generate_series(0, :slots - 1) n
        WHERE NOT EXISTS (SELECT 1 FROM task_lane_resource_slots s
                          WHERE s.lane = CAST(:lane AS varchar) AND s.resource_key = CAST(:key AS varchar)
                            AND s.slot_number = n)
        ON CONFLICT DO NOTHING
    )
    INSERT INTO task_lane_fairness (lane, resource_key, scope_id, last_dispatch_sequence, created_at, updated_at)
    SELECT CAST(:lane AS varchar), CAST(:key AS varchar), CAST(:scope AS varchar), 0, now(), now()
    WHERE CAST(:scope AS varchar) IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM task_lane_fairness f
                      WHERE f.lane = CAST(:lane AS varchar) AND f.resource_key = CAST(:key AS varchar)
                        AND f.scope_id = CAST(:scope AS varchar))
    ON CONFLICT DO NOTHING
    """
)


def ensure_lane(
    session: Session, lane: str, resource_key: str = GLOBAL_LANE_RESOURCE_KEY, scope_id: str | None = None
) -> None:
    """Make sure the lane's slot rows, the resource key's slot rows and (with ``scope_id``) the scope's
    fairness row exist. Idempotent; slot rows are never deleted except with the scope holding them."""
    session.execute(_ENSURE_LANE_SQL, {"lane": lane, "key": resource_key, "scope": scope_id, "slots": MAX_LANE_SLOTS})


def enqueue(
    session: Session,
    *,
    scope_id: str,
    task_type: str,
    lane: str = "default",
    dedupe_key: str | None = None,
    payload: dict[str, Any] | None = None,
    max_attempts: int = 3,
    lane_resource_key: str = GLOBAL_LANE_RESOURCE_KEY,
    **fields: Any,
) -> Task:
    """Insert a queued task, or return the active (queued/running) one with the same dedupe key: the
    one INSERT of a task. Code submits through :func:`mewdex.queue.registry.submit` (the type's
    defaults, and only the columns it declares); the queue's own tests call this directly. No
    back-pressure here: interactive submissions check it first (:func:`mewdex.queue.backpressure.check`).
    """
    ensure_lane(session, lane, lane_resource_key, scope_id)
    values = dict(
        id=new_task_id(task_type),
        scope_id=scope_id,
        task_type=task_type,
        lane=lane,
        lane_resource_key=lane_resource_key,
        dedupe_key=dedupe_key,
        payload=payload or {},
        max_attempts=max_attempts,
        status="queued",
        available_at=utcnow(),
    )
    values.update(fields)
    stmt = insert(Task).values(**values)
    if dedupe_key is not None:
        stmt = stmt.on_conflict_do_nothing(
            index_elements=["scope_id", "task_type", "dedupe_key"],
            index_where=text("status IN ('queued','running') AND dedupe_key IS NOT NULL"),
        )
    inserted = session.execute(stmt.returning(Task)).scalar_one_or_none()
    if inserted is None:
        return session.execute(
            select(Task).where(
                Task.scope_id == scope_id,
                Task.task_type == task_type,
                Task.dedupe_key == dedupe_key,
                Task.status.in_(ACTIVE),
            )
        ).scalar_one()
    return inserted


# One statement per claim: pick the least recently served scope of an open lane, lock its oldest due
# task, a free lane slot and a free resource slot (all SKIP LOCKED), then mark the task running, take
# both slots, advance the scope's dispatch sequence and write the attempt row (``task_attempts``:
# every task type's attempts are recorded there; ``external_started`` and ``unknown_execution`` live
# on it; what a type records of an attempt besides, its ``on_claim`` hook writes in its own table).
# Any missing piece (e.g. a slot taken by a concurrent claimer) leaves everything untouched.
_CLAIM_SQL = text(
    """
    WITH caps AS MATERIALIZED (
        SELECT c.lane, c.cap, c.rcap
        FROM unnest(CAST(:lanes AS varchar[]), CAST(:caps AS int[]), CAST(:rdefaults AS int[])) AS c(lane, cap, rcap)
        WHERE EXISTS (SELECT 1 FROM task_lane_slots s
                      WHERE s.lane = c.lane AND s.slot_number < c.cap AND s.task_id IS NULL)
    ),
    cand AS MATERIALIZED (
        SELECT t.scope_id, t.id, t.resume_available, f.lane, f.resource_key, f.cap, f.rcap
        FROM (
            SELECT f.lane, f.resource_key, f.scope_id, f.created_at, k.cap, k.rcap
            FROM task_lane_fairness f
            JOIN caps ON caps.lane = f.lane
            CROSS JOIN LATERAL (
                SELECT caps.cap, coalesce(CAST(CAST(:rcaps AS jsonb) ->> (f.lane || '/' || f.resource_key) AS int),
                                          CASE WHEN f.resource_key LIKE 'scope:%' THEN caps.rcap END,
                                          caps.cap) AS rcap
            ) k
            WHERE EXISTS (SELECT 1 FROM task_lane_resource_slots r
                          WHERE r.lane = f.lane AND r.resource_key = f.resource_key
                            AND r.slot_number < k.rcap AND r.task_id IS NULL)
            ORDER BY f.last_dispatch_sequence, f.created_at, f.scope_id
        ) f
        CROSS JOIN LATERAL (
            SELECT t.scope_id, t.id, t.resume_available FROM tasks t
            WHERE t.scope_id = f.scope_id AND t.lane = f.lane AND t.lane_resource_key = f.resource_key
              AND t.status = 'queued' AND t.available_at <= now()
            ORDER BY t.available_at, t.created_at
            LIMIT 1
            FOR UPDATE SKIP LOCKED
        ) t
        LIMIT 1
    ),
    lslot AS MATERIALIZED (
        SELECT s.lane, s.slot_number FROM task_lane_slots s JOIN cand ON s.lane = cand.lane
        WHERE s.slot_number < cand.cap AND s.task_id IS NULL
        ORDER BY s.slot_number LIMIT 1
        FOR UPDATE OF s SKIP LOCKED
    ),
    rslot AS MATERIALIZED (
        SELECT r.lane, r.resource_key, r.slot_number FROM task_lane_resource_slots r
        JOIN cand ON r.lane = cand.lane AND r.resource_key = cand.resource_key
        WHERE r.slot_number < cand.rcap AND r.task_id IS NULL
        ORDER BY r.slot_number LIMIT 1
        FOR UPDATE OF r SKIP LOCKED
    ),
    upd AS (
        UPDATE tasks t
        SET status = 'running',
            claim_generation = t.claim_generation + 1,
            attempt_count = t.attempt_count + 1,
            lease_owner = :owner,
            lease_expires_at = now() + make_interval(secs => :lease),
            started_at = coalesce(t.started_at, now()),
            resume_available = false,
            updated_at = now()
        FROM cand, lslot, rslot
        WHERE t.scope_id = cand.scope_id AND t.id = cand.id
        RETURNING t.scope_id, t.id, t.task_type, t.lane, t.lane_resource_key, t.payload, t.claim_generation,
                  t.attempt_count, t.max_attempts, t.lease_expires_at
    ),
    ls AS (
        UPDATE task_lane_slots s
        SET task_scope_id = upd.scope_id, task_id = upd.id, lease_owner = :owner,
            claim_generation = upd.claim_generation, lease_expires_at = upd.lease_expires_at
        FROM upd, lslot
        WHERE s.lane = lslot.lane AND s.slot_number = lslot.slot_number
    ),
    rs AS (
        UPDATE task_lane_resource_slots r
        SET task_scope_id = upd.scope_id, task_id = upd.id, lease_owner = :owner,
            claim_generation = upd.claim_generation, lease_expires_at = upd.lease_expires_at
        FROM upd, rslot
        WHERE r.lane = rslot.lane AND r.resource_key = rslot.resource_key AND r.slot_number = rslot.slot_number
    ),
    fair AS (
        UPDATE task_lane_fairness f
        SET last_dispatch_sequence = nextval('task_dispatch_sequence'), updated_at = now()
        FROM upd
        WHERE f.lane = upd.lane AND f.resource_key = upd.lane_resource_key AND f.scope_id = upd.scope_id
    ),
    att AS (
        INSERT INTO task_attempts (
            scope_id, task_id, attempt, attempt_id, state, claim_generation, lease_owner, resume_available,
            resume_of_attempt_id, created_at, updated_at)
        SELECT upd.scope_id, upd.id, upd.attempt_count, upd.id || ':' || upd.attempt_count, 'prepared',
               upd.claim_generation, :owner, false,
               CASE WHEN cand.resume_available THEN upd.id || ':' || (upd.attempt_count - 1) END, now(), now()
        FROM upd
        JOIN cand ON cand.scope_id = upd.scope_id AND cand.id = upd.id
    )
    SELECT (SELECT count(*) FROM cand) AS candidates, upd.*,
           (SELECT i.batch_id FROM task_batch_items i WHERE i.scope_id = upd.scope_id AND i.task_id = upd.id
            LIMIT 1) AS batch_id
    FROM (VALUES (1)) AS one(x) LEFT JOIN upd ON true
    """
)


def lane_caps(lanes: list[str]) -> tuple[list[int], dict[str, int], list[int | None]]:
    """Concurrency of each lane (its :class:`Lane` declaration, by default the setting
    ``MEWDEX_LANE_CONCURRENCY_<LANE>``), the resource-key overrides and each lane's default
    per-scope share (None: the lane's concurrency)."""
    settings = get_settings()
    caps = [
        min(MAX_LANE_SLOTS, declared.cap()) if (declared := lane(name)) else settings.lane_concurrency(name)
        for name in lanes
    ]
    rdefaults = [declared.scope_cap() if (declared := lane(name)) else None for name in lanes]
    return caps, dict(settings.resource_concurrency), rdefaults


def claim(
    session: Session, *, owner: str, lanes: list[str], lease_seconds: int, contended: list[bool] | None = None
) -> Claim | None:
    """Claim the next runnable task in ``lanes`` (queued and due) with a lane slot and a resource slot.

    Scopes take turns (round-robin on ``task_lane_fairness.last_dispatch_sequence``). Returns None
    when nothing is runnable; when a task was runnable but its slot went to a concurrent claimer,
    ``contended`` (if given) gets ``True`` appended so the caller can try again at once. The attempt
    row (state ``prepared``) is written in the same statement. Commit the session to make the claim
    visible.
    """
    caps, rcaps, rdefaults = lane_caps(lanes)
    row = (
        session.execute(
            _CLAIM_SQL,
            {
                "lanes": list(lanes),
                "caps": caps,
                "rcaps": json.dumps(rcaps),
                "rdefaults": rdefaults,
                "owner": owner,
                "lease": lease_seconds,
            },
        )
        .mappings()
        .one()
    )
    if row["id"] is None:
        if contended is not None and row["candidates"]:
            contended.append(True)
        return None
    return Claim(
        scope_id=row["scope_id"],
        task_id=row["id"],
        task_type=row["task_type"],
        lane=row["lane"],
        payload=row["payload"],
        claim_generation=row["claim_generation"],
        attempt_count=row["attempt_count"],
        max_attempts=row["max_attempts"],
        lane_resource_key=row["lane_resource_key"],
        owner=owner,
        batch_id=row["batch_id"],
    )


_HEARTBEAT_SQL = text(
    """
    WITH t AS (
        UPDATE tasks SET lease_expires_at = now() + make_interval(secs => :lease), updated_at = now()
        WHERE scope_id = :s AND id = :i AND claim_generation = :g AND status = 'running'
        RETURNING scope_id, id, lease_expires_at
    ), l AS (
        UPDATE task_lane_slots s SET lease_expires_at = t.lease_expires_at FROM t
        WHERE s.task_scope_id = t.scope_id AND s.task_id = t.id
    ), r AS (
        UPDATE task_lane_resource_slots s SET lease_expires_at = t.lease_expires_at FROM t
        WHERE s.task_scope_id = t.scope_id AND s.task_id = t.id
    )
    SELECT count(*) FROM t
    """
)


def heartbeat(session: Session, c: Claim, lease_seconds: int) -> bool:
    """Extend the lease (task and its slots); False when the claim is stale (another worker owns the task now)."""
    return bool(
        session.execute(
            _HEARTBEAT_SQL, {"lease": lease_seconds, "s": c.scope_id, "i": c.task_id, "g": c.claim_generation}
        ).scalar_one()
        == 1
    )


def fenced(session: Session, c: Claim) -> Task:
    """Lock the task row iff ``c`` is still the current claim; raises StaleClaim otherwise.

    Call first inside the write-back transaction: everything written after it commits atomically
    with the task's new status, or not at all.
    """
    task = session.execute(
        select(Task).where(Task.scope_id == c.scope_id, Task.id == c.task_id).with_for_update()
    ).scalar_one_or_none()
    if task is None or task.claim_generation != c.claim_generation or task.status != "running":
        raise StaleClaim(f"task {c.task_id} generation {c.claim_generation} is stale")
    return task


_RELEASE_SQL = text(
    """
    WITH l AS (
        UPDATE task_lane_slots
        SET task_scope_id = NULL, task_id = NULL, lease_owner = NULL, claim_generation = NULL, lease_expires_at = NULL
        WHERE task_scope_id = :s AND task_id = :i
    )
    UPDATE task_lane_resource_slots
    SET task_scope_id = NULL, task_id = NULL, lease_owner = NULL, claim_generation = NULL, lease_expires_at = NULL
    WHERE task_scope_id = :s AND task_id = :i
    """
)


def release_slots(session: Session, scope_id: str, task_id: str) -> None:
    """Free the lane slot and the resource slot the task holds (no-op when it holds none)."""
    session.execute(_RELEASE_SQL, {"s": scope_id, "i": task_id})


def _release(task: Task) -> None:
    session = object_session(task)
    if session is not None:
        session.flush()
        release_slots(session, task.scope_id, task.id)


_COMPLETE_SQL = text(
    """
    WITH t AS (
        UPDATE tasks
        SET status = 'succeeded', result = CAST(:result AS jsonb), progress = 1.0, message = :message, error = NULL,
            completed_at = now(), lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
        WHERE scope_id = :s AND id = :i AND claim_generation = :g AND status = 'running'
        RETURNING scope_id, id, attempt_count
    ), a AS (
        UPDATE task_attempts a SET state = 'completed', finished_at = now(), updated_at = now() FROM t
        WHERE a.scope_id = t.scope_id AND a.task_id = t.id AND a.attempt = t.attempt_count
    ), l AS (
        UPDATE task_lane_slots s
        SET task_scope_id = NULL, task_id = NULL, lease_owner = NULL, claim_generation = NULL, lease_expires_at = NULL
        FROM t WHERE s.task_scope_id = t.scope_id AND s.task_id = t.id
    ), r AS (
        UPDATE task_lane_resource_slots s
        SET task_scope_id = NULL, task_id = NULL, lease_owner = NULL, claim_generation = NULL, lease_expires_at = NULL
        FROM t WHERE s.task_scope_id = t.scope_id AND s.task_id = t.id
    )
    SELECT count(*) FROM t
    """
)


def try_complete(session: Session, c: Claim, result: Any = None, message: str | None = None) -> bool:
    """Fenced success in one statement (task, attempt ``completed``, both slots freed). False (and
    nothing changed) when ``c`` is no longer the current claim."""
    return bool(
        session.execute(
            _COMPLETE_SQL,
            {
                "result": json.dumps(result),
                "message": message,
                "s": c.scope_id,
                "i": c.task_id,
                "g": c.claim_generation,
            },
        ).scalar_one()
        == 1
    )


def complete(session: Session, c: Claim, result: Any = None, message: str | None = None) -> None:
    """:func:`try_complete` that raises StaleClaim when the claim is stale."""
    if not try_complete(session, c, result, message):
        raise StaleClaim(f"task {c.task_id} generation {c.claim_generation} is stale")


def end_attempt(
    session: Session,
    scope_id: str,
    task_id: str,
    attempt: int,
    error: dict[str, Any],
    *,
    state: str | None = None,
    **fields: Any,
) -> TaskAttempt | None:
    """Record the end of a task's attempt that did not complete: ``state`` (None: ``unknown_execution``
    when its external call had started, else ``failed``), ``error`` (an :func:`error_record`),
    ``finished_at``, and any other :class:`TaskAttempt` column in ``fields`` (e.g.
    ``termination_reason``). Returns the row, None when the attempt has none."""
    row = session.get(TaskAttempt, (scope_id, task_id, attempt))
    if row is None:
        return None
    row.state = state or ("unknown_execution" if row.state == "external_started" else "failed")
    row.error = error
    row.finished_at = utcnow()
    for name, value in fields.items():
        setattr(row, name, value)
    return row


def backoff_seconds(attempt: int, base: float, cap: float) -> float:
    """Capped exponential backoff with full jitter: uniform(0.5, 1.0) × min(cap, base × 2^(attempt-1))."""
    exponent = min(max(0, attempt - 1), 62)  # 2**62 × base is past any cap; avoids float overflow
    return float(min(cap, base * 2**exponent) * random.uniform(0.5, 1.0))


def error_record(code: str, message: str, attempt: int) -> dict[str, Any]:
    """One entry of ``tasks.error`` / ``error_history``: ``{"code", "message", "attempt", "at"}``."""
    return {"code": code, "message": message[:500], "attempt": attempt, "at": utcnow().isoformat()}


def _record_error(task: Task, error: dict[str, Any]) -> None:
    task.error = error
    task.first_error = task.first_error or error
    task.error_history = [*task.error_history, error][-20:]


def fail(
    task: Task,
    code: str,
    message: str,
    *,
    retryable: bool,
    base: float,
    cap: float,
    termination_reason: str | None = None,
) -> bool:
    """Record an error on a fenced task, free its slots, and requeue it with backoff while attempts remain.

    Returns True when the task failed for good (no attempts left or not retryable).
    """
    _record_error(task, error_record(code, message, task.attempt_count))
    task.lease_owner = None
    task.lease_expires_at = None
    _release(task)
    if retryable and task.attempt_count < task.max_attempts:
        task.status = "queued"
        task.available_at = utcnow() + timedelta(seconds=backoff_seconds(task.attempt_count, base, cap))
        task.message = f"retrying after {code}"
        return False
    task.status = "failed"
    task.termination_reason = termination_reason
    task.completed_at = utcnow()
    task.message = message[:500]
    return True


def release(task: Task, reason: str = "worker stopping") -> None:
    """Give a fenced task back to the queue at once (a worker shutting down); the attempt does not use
    up a retry (``max_attempts`` grows by one, attempt numbers stay unique)."""
    task.status = "queued"
    task.max_attempts += 1
    task.lease_owner = None
    task.lease_expires_at = None
    task.available_at = utcnow()
    task.message = reason
    _release(task)


@dataclass(frozen=True)
class Reaped:
    """A running task whose lease expired: ``outcome`` is ``requeued``, ``failed`` or ``unknown_execution``."""

    task: Task
    outcome: str


def reap_expired(session: Session, limit: int = 100) -> list[Reaped]:
    """Handle running tasks whose lease expired (their worker died or hung), freeing their slots.

    - the attempt had started an external call (``external_started``): the attempt becomes
      ``unknown_execution`` with ``resume_available``; the task fails with termination reason
      ``unknown_execution`` and is never replayed automatically (retry on request resumes it);
    - otherwise the attempt fails with ``lease_expired`` and the task is requeued at once while
      attempts remain, else fails with ``lease_expired``.

    A re-claim then runs with ``claim_generation + 1``, so the old worker's late writes are fenced.
    """
    tasks = (
        session.execute(
            select(Task)
            .where(Task.status == "running", Task.lease_expires_at < utcnow())
            .order_by(Task.lease_expires_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        .scalars()
        .all()
    )
    out = []
    for task in tasks:
        attempt = session.get(TaskAttempt, (task.scope_id, task.id, task.attempt_count))
        task.lease_owner = None
        task.lease_expires_at = None
        if attempt is not None and attempt.state == "external_started":
            error = error_record(
                "unknown_execution",
                "the worker died after its external call started; the result is unknown (retry to resume)",
                task.attempt_count,
            )
            end_attempt(
                session,
                task.scope_id,
                task.id,
                task.attempt_count,
                error,
                state="unknown_execution",
                termination_reason="unknown_execution",
                resume_available=True,
                resume_reason="unknown_execution",
            )
            _record_error(task, error)
            task.status = "failed"
            task.termination_reason = "unknown_execution"
            task.resume_available = True
            task.resume_reason = "unknown_execution"
            task.completed_at = utcnow()
            task.message = error["message"]
            outcome = "unknown_execution"
        else:
            error = error_record("lease_expired", "the worker stopped responding", task.attempt_count)
            end_attempt(session, task.scope_id, task.id, task.attempt_count, error, state="failed")
            _record_error(task, error)
            if task.attempt_count < task.max_attempts:
                task.status = "queued"
                task.available_at = utcnow()
                task.message = "requeued after lease_expired"
                outcome = "requeued"
            else:
                task.status = "failed"
                task.completed_at = utcnow()
                task.message = error["message"]
                outcome = "failed"
        session.flush()
        release_slots(session, task.scope_id, task.id)
        out.append(Reaped(task, outcome))
    return out


def expire_orphaned_leases(session: Session, hostname: str, alive: Callable[[int], bool]) -> int:
    """Expire now the leases held by dead worker processes of this host, so their tasks are
    re-claimed at once instead of after the lease time. Lease owners are ``host:pid:suffix``."""
    rows = session.execute(
        select(Task.scope_id, Task.id, Task.lease_owner).where(
            Task.status == "running", Task.lease_owner.like(f"{hostname}:%")
        )
    ).all()
    dead = []
    for s, i, owner in rows:
        try:
            pid = int((owner or "").split(":")[1])
        except (IndexError, ValueError):
            continue
        if not alive(pid):
            dead.append((s, i))
    for scope_id, task_id in dead:
        session.execute(
            text(
                "UPDATE tasks SET lease_expires_at = now() - interval '1 microsecond' "
                "WHERE scope_id = :s AND id = :i AND status = 'running'"
            ),
            {"s": scope_id, "i": task_id},
        )
    return len(dead)
