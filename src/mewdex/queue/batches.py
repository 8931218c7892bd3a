"""Task batches: a bulk submission (an import, a retry of all, a re-submit of many) is one ``task_batch``.

Its tasks are parked (``available_at = PARKED_AT``) and :func:`feed` releases them while the scope's
pressure lane (the task type's ``pressure_lane``, e.g. the image pipeline's ``agent``) is under its
back-pressure limit, so a 100,000-image import is accepted at once and drains
without filling the lane. When the batch is sealed and its last task ends, :func:`task_ended`
writes the summary ``{"tasks", "succeeded", "failed", "failed_by_code"}`` exactly once (the batch row
is locked, and the update only applies while ``finalizer_state <> 'complete'``).
"""

from __future__ import annotations

import uuid
from typing import Any, cast

from sqlalchemy import CursorResult, select, text
from sqlalchemy.orm import Session

from mewdex.db.models.base import utcnow
from mewdex.db.models.queue import TaskBatch, TaskBatchItem
from mewdex.queue.tasks import PARKED_AT


def create(session: Session, scope_id: str) -> TaskBatch:
    """A new, unsealed batch of the scope."""
    batch = TaskBatch(scope_id=scope_id, batch_id=f"batch-{uuid.uuid4().hex}", finalizer_state="pending", sealed=False)
    session.add(batch)
    session.flush()
    return batch


def add(session: Session, scope_id: str, batch_id: str, task_id: str) -> None:
    """Make the task a member of the batch (idempotent)."""
    session.execute(
        text("INSERT INTO task_batch_items (scope_id, batch_id, task_id) VALUES (:s, :b, :t) ON CONFLICT DO NOTHING"),
        {"s": scope_id, "b": batch_id, "t": task_id},
    )


def park(session: Session, scope_id: str, task_id: str) -> None:
    """Hold a queued batch task back until :func:`feed` releases it."""
    session.execute(
        text("UPDATE tasks SET available_at = :parked WHERE scope_id = :s AND id = :t AND status = 'queued'"),
        {"parked": PARKED_AT, "s": scope_id, "t": task_id},
    )


def batches_of(session: Session, scope_id: str, task_ids: list[str]) -> set[str]:
    """The batches any of these tasks belong to."""
    return set(
        session.execute(
            select(TaskBatchItem.batch_id).where(
                TaskBatchItem.scope_id == scope_id, TaskBatchItem.task_id.in_(task_ids)
            )
        ).scalars()
    )


def batch_of(session: Session, scope_id: str, task_id: str) -> str | None:
    return (
        session.execute(
            select(TaskBatchItem.batch_id).where(TaskBatchItem.scope_id == scope_id, TaskBatchItem.task_id == task_id)
        )
        .scalars()
        .first()
    )


def seal(session: Session, scope_id: str, batch_id: str) -> None:
    """No more members will be added; the batch finalises when its last task ends (now, if none is active)."""
    session.execute(
        text(
            "UPDATE task_batches SET sealed = true, finalizer_state = 'submitted' "
            "WHERE scope_id = :s AND batch_id = :b AND finalizer_state = 'pending'"
        ),
        {"s": scope_id, "b": batch_id},
    )
    finalize_if_done(session, scope_id, batch_id)


def task_ended(session: Session, scope_id: str, task_id: str) -> None:
    """Call in the transaction that ends a task for good (succeeded or failed)."""
    batch_id = batch_of(session, scope_id, task_id)
    if batch_id is not None:
        finalize_if_done(session, scope_id, batch_id)


_SUMMARY_SQL = text(
    """
    SELECT count(*) AS tasks,
           count(*) FILTER (WHERE t.status IN ('queued', 'running')) AS active,
           count(*) FILTER (WHERE t.status = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE t.status = 'failed') AS failed
    FROM task_batch_items i JOIN tasks t ON t.scope_id = i.scope_id AND t.id = i.task_id
    WHERE i.scope_id = :s AND i.batch_id = :b
    """
)
_FAILED_BY_CODE_SQL = text(
    """
    SELECT coalesce(t.error ->> 'code', 'unknown') AS code, count(*) FROM task_batch_items i
    JOIN tasks t ON t.scope_id = i.scope_id AND t.id = i.task_id
    WHERE i.scope_id = :s AND i.batch_id = :b AND t.status = 'failed'
    GROUP BY 1
    """
)


def summary(session: Session, scope_id: str, batch_id: str) -> dict[str, Any]:
    """``{"tasks", "active", "succeeded", "failed", "failed_by_code": {code: n}}`` from the members now."""
    row = session.execute(_SUMMARY_SQL, {"s": scope_id, "b": batch_id}).mappings().one()
    by_code = {code: n for code, n in session.execute(_FAILED_BY_CODE_SQL, {"s": scope_id, "b": batch_id})}
    return {
        "tasks": row["tasks"],
        "active": row["active"],
        "succeeded": row["succeeded"],
        "failed": row["failed"],
        "failed_by_code": by_code,
    }


#: How many of the scope's queued (and of its running) tasks :func:`has_active_member` reads before it
#: falls back to reading the batch's members.
ACTIVE_PROBE = 256

# The scope's first ACTIVE_PROBE running and first ACTIVE_PROBE queued tasks, read in the order of
# ix_tasks_claimable (scope_id, status, available_at; with that ORDER BY … LIMIT an index scan stops
# after ACTIVE_PROBE rows, where any other plan sorts the scope's active tasks; parked tasks sort
# last), checked against the batch's members: (found, the larger of the two counts read).
_ACTIVE_PROBE_SQL = text(
    """
    WITH a AS MATERIALIZED (
        (SELECT t.id, t.status FROM tasks t WHERE t.scope_id = :s AND t.status = 'running'
         ORDER BY t.available_at LIMIT :k)
        UNION ALL
        (SELECT t.id, t.status FROM tasks t WHERE t.scope_id = :s AND t.status = 'queued'
         ORDER BY t.available_at LIMIT :k)
    )
    SELECT EXISTS (SELECT 1 FROM a JOIN task_batch_items i
                   ON i.scope_id = :s AND i.batch_id = :b AND i.task_id = a.id),
           (SELECT greatest(count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status = 'queued'))
            FROM a)
    """
)
_ACTIVE_SQL = text(
    """
    SELECT EXISTS (SELECT 1 FROM task_batch_items i JOIN tasks t ON t.scope_id = i.scope_id AND t.id = i.task_id
                   WHERE i.scope_id = :s AND i.batch_id = :b AND t.status IN ('queued', 'running'))
    """
)


def has_active_member(session: Session, scope_id: str, batch_id: str) -> bool:
    """Whether a task of the batch is queued or running.

    Reads at most :data:`ACTIVE_PROBE` of the scope's running and queued tasks first: at the end of a
    large batch almost none are, and the planner, with statistics from the middle of the import
    (many tasks active), chose a sequential scan of every task of every scope for the join of
    members and tasks, in the write-back of each of the batch's last tasks (bench/task_queue.py
    --batch-tail 300000: 3.8–5.8 ms p50 per check, growing with the tasks table, against 0.9–1.5;
    bench/ingest.py: 3.0 → 0.6 ms per call). Only a scope with more running or more
    unparked queued tasks than that, none of those read in the batch (e.g. a second import's), is
    answered from the join, as before."""
    found, most = session.execute(_ACTIVE_PROBE_SQL, {"s": scope_id, "b": batch_id, "k": ACTIVE_PROBE}).one()
    if found or most < ACTIVE_PROBE:  # every running and queued task of the scope was read
        return bool(found)
    return _members_active(session, scope_id, batch_id)


def _members_active(session: Session, scope_id: str, batch_id: str) -> bool:
    """The join of the batch's members with their tasks (the planner picks the side to start from)."""
    return bool(session.execute(_ACTIVE_SQL, {"s": scope_id, "b": batch_id}).scalar_one())


def finalize_if_done(session: Session, scope_id: str, batch_id: str) -> None:
    """Write the batch's summary once, when it is sealed and none of its tasks is queued or running."""
    # FOR NO KEY UPDATE: the ending transaction may already hold KEY SHARE on the batch row (the FK
    # check of a hand-off task it added to the batch); FOR UPDATE would deadlock two such enders.
    # The lock orders concurrent enders, so the last one sees all the others committed.
    batch = session.execute(
        select(TaskBatch)
        .where(TaskBatch.scope_id == scope_id, TaskBatch.batch_id == batch_id)
        .with_for_update(key_share=True)
    ).scalar_one_or_none()
    if batch is None or not batch.sealed or batch.finalizer_state == "complete":
        return
    session.flush()
    if has_active_member(session, scope_id, batch_id):
        return
    counts = summary(session, scope_id, batch_id)
    counts.pop("active")
    batch.summary = counts
    batch.finalizer_state = "complete"
    batch.finalized_at = utcnow()
    session.flush()


_FEED_SQL = text(
    """
    WITH scopes AS (
        SELECT DISTINCT b.scope_id FROM task_batches b WHERE b.finalizer_state <> 'complete'
    ), room AS (
        SELECT s.scope_id,
               :limit - (SELECT count(*) FROM tasks t WHERE t.scope_id = s.scope_id AND t.lane = :lane
                         AND t.status = 'queued' AND t.available_at < :parked)
                      - (SELECT count(*) FROM tasks t WHERE t.scope_id = s.scope_id AND t.lane <> :lane
                         AND t.status IN ('queued', 'running') AND t.available_at < :parked
                         AND t.task_type = ANY(CAST(:types AS varchar[]))) AS n
        FROM scopes s
    ), pick AS (
        SELECT t.scope_id, t.id FROM room
        CROSS JOIN LATERAL (
            SELECT t.scope_id, t.id FROM tasks t
            WHERE t.scope_id = room.scope_id AND t.status = 'queued' AND t.available_at = :parked
              AND (CAST(:others AS boolean) OR t.task_type = ANY(CAST(:types AS varchar[])))
            ORDER BY t.created_at LIMIT greatest(room.n, 0)
            FOR UPDATE SKIP LOCKED
        ) t
    )
    UPDATE tasks t SET available_at = now(), updated_at = now() FROM pick
    WHERE t.scope_id = pick.scope_id AND t.id = pick.id
    """
)
_FEED_FREE_SQL = text(
    """
    UPDATE tasks t SET available_at = now(), updated_at = now()
    WHERE t.status = 'queued' AND t.available_at = :parked AND t.task_type = ANY(CAST(:types AS varchar[]))
      AND EXISTS (SELECT 1 FROM task_batch_items i JOIN task_batches b
                  ON b.scope_id = i.scope_id AND b.batch_id = i.batch_id
                  WHERE i.scope_id = t.scope_id AND i.task_id = t.id AND b.finalizer_state <> 'complete')
    """
)


def feed(session: Session) -> int:
    """Release parked batch tasks of every scope while its pipeline is under the back-pressure limit of
    their pressure lane (tasks queued in that lane + tasks of the types that hand off into it in
    flight elsewhere). Tasks of registered types without a limited pressure lane are released at
    once; tasks of types this process does not know stay parked. Returns how many were released."""
    from mewdex.queue import backpressure, registry

    by_lane: dict[str, list[str]] = {}
    known = registry.task_types()
    for tt in known.values():
        lane = tt.pressure_lane or tt.lane
        if backpressure.limit(lane) is not None:
            by_lane.setdefault(lane, []).append(tt.name)
    free = [name for name in known if not any(name in names for names in by_lane.values())]
    fed = 0
    for lane, types in by_lane.items():
        # With one limited lane (the image pipeline's), every other parked task waits for its room too, as
        # before task types declared their lanes.
        others = len(by_lane) == 1
        fed += cast(
            CursorResult[Any],
            session.execute(
                _FEED_SQL,
                {
                    "limit": backpressure.limit(lane),
                    "parked": PARKED_AT,
                    "lane": lane,
                    "types": types,
                    "others": others,
                },
            ),
        ).rowcount
    if len(by_lane) != 1:
        fed += cast(CursorResult[Any], session.execute(_FEED_FREE_SQL, {"parked": PARKED_AT, "types": free})).rowcount
    return fed
