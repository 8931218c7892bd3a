"""Task services for the API and the CLI: list (filters, cursor paging), detail with attempts and error
history, retry (resume of an ``unknown_execution`` attempt included) and cancel. Every function takes
the caller's :class:`ScopeContext`; another scope's task is :class:`TaskNotFound` like a missing one.

The tasks pages' reads: :func:`recent_tasks` (with what each task's type adds to its row), :func:`page_task` (with its
attempts), :func:`task_types`, :func:`lane_depths`, :func:`batch_progress`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, false, func, or_, select, text
from sqlalchemy.orm import Session, object_session

from mewdex.config import get_settings
from mewdex.db.models.base import ScopeContext, utcnow
from mewdex.db.models.queue import Task, TaskAttempt, TaskBatch, TaskBatchItem
from mewdex.dto.cursor import CursorInvalid, decode_cursor, encode_cursor
from mewdex.dto.errors import DomainError
from mewdex.dto.tasks import Batch as BatchDto
from mewdex.dto.tasks import Task as TaskDto
from mewdex.queue import backpressure, batches, registry
from mewdex.queue import tasks as queue

TASK_STATUSES = ("queued", "running", "succeeded", "failed")
MAX_PAGE = 200


class TaskNotFound(DomainError):
    """``not_found``: no such task/batch/job in the scope."""

    def __init__(self, message: str):
        super().__init__("not_found", message)


class TaskConflict(DomainError):
    """The task is not in a state that allows the operation; ``code`` says which."""


BadCursor = CursorInvalid  # the one cursor error (422 ``invalid_cursor``)


def task_dict(task: Task, *, batch_id: str | None = None, fields: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The public shape of a task (:class:`mewdex.dto.tasks.Task`: no ``analysis_policy``, no payload
    internals beyond the payload itself). ``fields``: what its task type adds (the ``task_rows`` hook,
    :func:`mewdex.queue.registry.row_fields`; read for this one task when not given)."""
    if fields is None:
        session = object_session(task)
        fields = registry.row_fields(session, [task])[task.id] if session is not None else {}
    parked = task.status == "queued" and task.available_at >= queue.PARKED_AT
    return TaskDto(
        **{
            "id": task.id,
            "type": task.task_type,
            "status": task.status,
            "lane": task.lane,
            "resource_key": task.lane_resource_key,
            "submission_mode": task.submission_mode,
            **{k: v for k, v in fields.items() if k in TaskDto.model_fields},
            "batch_id": batch_id,
            "progress": task.progress,
            "message": task.message,
            "error": task.error,
            "attempts": task.attempt_count,
            "max_attempts": task.max_attempts,
            "termination_reason": task.termination_reason,
            "resume_available": task.resume_available,
            "observed_cost": float(task.observed_cost) if task.observed_cost is not None else None,
            "parked": parked,
            "available_at": None if parked else task.available_at.isoformat(),
            "lease_expires_at": task.lease_expires_at.isoformat() if task.lease_expires_at else None,
            "created_at": task.created_at.isoformat(),
            "started_at": task.started_at.isoformat() if task.started_at else None,
            "completed_at": task.completed_at.isoformat() if task.completed_at else None,
        }
    ).model_dump()


def attempt_dict(a: TaskAttempt, fields: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The public shape of an attempt (:class:`mewdex.dto.tasks.Attempt`); ``fields``: what its task
    type records of it besides (the ``task_rows`` hook's ``attempts``)."""
    return {
        **(fields or {}),
        "attempt": a.attempt,
        "attempt_id": a.attempt_id,
        "state": a.state,
        "claim_generation": a.claim_generation,
        "executor_attempt_id": a.executor_attempt_id,
        "resume_of_attempt_id": a.resume_of_attempt_id,
        "resume_available": a.resume_available,
        "termination_reason": a.termination_reason,
        "termination_signal": a.termination_signal,
        "observed_cost": float(a.observed_cost) if a.observed_cost is not None else None,
        "error": a.error,
        "created_at": a.created_at.isoformat(),
        "updated_at": a.updated_at.isoformat(),
        "finished_at": a.finished_at.isoformat() if a.finished_at else None,
    }


def task_dicts(session: Session, tasks: Sequence[Task]) -> list[dict[str, Any]]:
    """:func:`task_dict` of each task, their task types' fields read once for all."""
    fields = registry.row_fields(session, tasks)
    return [task_dict(t, fields=fields[t.id]) for t in tasks]


def _row_filter(name: str, value: str) -> ColumnElement[bool]:
    """A list filter a task type's plugin declares (``task_rows``); nothing matches one nobody declares."""
    clause = registry.row_filter(name, value)
    return false() if clause is None else clause


def _encode_cursor(task: Task) -> str:
    return encode_cursor([task.created_at, task.id])


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    created, task_id = decode_cursor(cursor, (datetime, str))
    return created, task_id


def list_tasks(
    session: Session,
    scope: ScopeContext,
    *,
    status: str | None = None,
    task_type: str | None = None,
    stage: str | None = None,
    batch_id: str | None = None,
    lane: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> dict[str, Any]:
    """``{"items": [task], "next_cursor": str | None}``, newest first. Raises :class:`BadCursor`."""
    limit = max(1, min(MAX_PAGE, limit))
    query = select(Task).where(Task.scope_id == scope.scope_id)
    if status:
        query = query.where(Task.status == status)
    if task_type:
        query = query.where(Task.task_type == task_type)
    if stage:
        query = query.where(_row_filter("stage", stage))
    if lane:
        query = query.where(Task.lane == lane)
    if batch_id:
        query = query.join(
            TaskBatchItem, and_(TaskBatchItem.scope_id == Task.scope_id, TaskBatchItem.task_id == Task.id)
        ).where(TaskBatchItem.batch_id == batch_id)
    if cursor:
        created, task_id = _decode_cursor(cursor)
        query = query.where(or_(Task.created_at < created, and_(Task.created_at == created, Task.id < task_id)))
    rows = session.execute(query.order_by(Task.created_at.desc(), Task.id.desc()).limit(limit + 1)).scalars().all()
    items = rows[:limit]
    return {
        "items": task_dicts(session, items),
        "next_cursor": _encode_cursor(items[-1]) if len(rows) > limit else None,
    }


#: The shortest task id prefix :func:`get_task` accepts.
MIN_ID_PREFIX = 8


def get_task(session: Session, scope: ScopeContext, task_id: str, *, lock: bool = False) -> Task:
    """The scope's task by its id, or by an id prefix of at least :data:`MIN_ID_PREFIX` characters that
    only one task has. Raises TaskNotFound."""
    query = select(Task).where(Task.scope_id == scope.scope_id, Task.id == task_id)
    task = session.execute(query.with_for_update() if lock else query).scalar_one_or_none()
    if task is None and isinstance(task_id, str) and len(task_id) >= MIN_ID_PREFIX:
        escaped = task_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        ids = (
            session.execute(
                select(Task.id)
                .where(Task.scope_id == scope.scope_id, Task.id.like(escaped + "%", escape="\\"))
                .limit(2)
            )
            .scalars()
            .all()
        )
        if len(ids) > 1:
            raise TaskNotFound(f"several tasks have ids starting {task_id}; give more characters")
        if ids:
            return get_task(session, scope, ids[0], lock=lock)
    if task is None:
        raise TaskNotFound(f"task {task_id} not found")
    return task


def _attempts(session: Session, scope: ScopeContext, task_id: str) -> list[TaskAttempt]:
    """The task's attempts, oldest first."""
    return list(
        session.execute(
            select(TaskAttempt)
            .where(TaskAttempt.scope_id == scope.scope_id, TaskAttempt.task_id == task_id)
            .order_by(TaskAttempt.attempt)
        ).scalars()
    )


def task_detail(session: Session, scope: ScopeContext, task_id: str) -> dict[str, Any]:
    """The task with ``attempts`` (oldest first), ``error_history`` and ``first_error``."""
    task = get_task(session, scope, task_id)
    task_id = task.id  # the full id when a prefix named it
    attempts = _attempts(session, scope, task_id)
    fields = registry.attempt_fields(session, task)
    return {
        **task_dict(task, batch_id=batches.batch_of(session, scope.scope_id, task_id)),
        "payload": task.payload,
        "result": task.result,
        "first_error": task.first_error,
        "error_history": task.error_history,
        "attempt_history": [attempt_dict(a, fields.get(a.attempt)) for a in attempts],
    }


def retry(session: Session, scope: ScopeContext, task_id: str, *, check_backpressure: bool = True) -> Task:
    """Queue a failed task again now with a fresh set of attempts (``MEWDEX_TASK_MAX_ATTEMPTS`` more).

    A task that ended ``unknown_execution`` is resumed: its next attempt records ``resume_of_attempt_id``.
    Raises :class:`TaskNotFound`, :class:`TaskConflict` (``task_not_retryable`` unless failed;
    ``task_active`` when an active task with the same dedupe key exists), or
    :class:`backpressure.QueueFull` for the agent lane.
    """
    task = get_task(session, scope, task_id, lock=True)
    if task.status != "failed":
        raise TaskConflict("task_not_retryable", f"only failed tasks can be retried (this one is {task.status})")
    if (
        task.dedupe_key is not None
        and session.execute(
            select(Task.id).where(
                Task.scope_id == scope.scope_id,
                Task.task_type == task.task_type,
                Task.dedupe_key == task.dedupe_key,
                Task.status.in_(queue.ACTIVE),
            )
        ).first()
    ):
        raise TaskConflict("task_active", "another task for the same work is already active")
    if check_backpressure:
        backpressure.check(session, scope, task.lane)
    queue.ensure_lane(session, task.lane, task.lane_resource_key, task.scope_id)
    if task.resume_available:
        task.resume_attempt_count += 1
        task.resume_started_at = utcnow()
        task.resume_reason = "requested"
    task.status = "queued"
    task.available_at = utcnow()
    task.max_attempts = task.attempt_count + get_settings().task_max_attempts
    task.termination_reason = None
    task.completed_at = None
    task.progress = 0.0
    task.message = "retry requested"
    tt = registry.get(task.task_type)
    if tt is not None and tt.on_retry is not None:
        tt.on_retry(session, task)
    _reopen_batch(session, task)
    session.flush()
    return task


def _reopen_batch(session: Session, task: Task) -> None:
    """A retried member of a finalised batch: the batch is not complete any more (its summary is re-finalised
    when the task ends)."""
    batch_id = batches.batch_of(session, task.scope_id, task.id)
    if batch_id is not None:
        session.execute(
            text(
                "UPDATE task_batches SET finalizer_state = 'submitted', summary = NULL, finalized_at = NULL "
                "WHERE scope_id = :s AND batch_id = :b AND finalizer_state = 'complete'"
            ),
            {"s": task.scope_id, "b": batch_id},
        )


def cancel(session: Session, scope: ScopeContext, task_id: str) -> Task:
    """Cancel a queued or running task: it fails with ``cancelled`` (termination reason ``cancelled``), its
    slots are freed, and a running worker's late result is fenced out (the generation moves on).
    Raises :class:`TaskNotFound` or :class:`TaskConflict` ``task_not_cancellable`` when it already ended."""
    task = get_task(session, scope, task_id, lock=True)
    if task.status not in queue.ACTIVE:
        raise TaskConflict("task_not_cancellable", f"the task already ended ({task.status})")
    was_running = task.status == "running"
    error = queue.error_record("cancelled", "cancelled on request", task.attempt_count)
    task.error = error
    task.first_error = task.first_error or error
    task.error_history = [*task.error_history, error][-20:]
    task.status = "failed"
    task.termination_reason = "cancelled"
    task.claim_generation += 1
    task.lease_owner = None
    task.lease_expires_at = None
    task.completed_at = utcnow()
    task.message = "cancelled"
    session.flush()
    queue.release_slots(session, task.scope_id, task.id)
    if was_running:
        queue.end_attempt(session, task.scope_id, task.id, task.attempt_count, error, termination_reason="cancelled")
    registry.failure_outcome(session, task, "cancelled")
    batches.task_ended(session, task.scope_id, task.id)
    return task


def batch_detail(session: Session, scope: ScopeContext, batch_id: str) -> dict[str, Any]:
    """``{"id", "state", "sealed", "created_at", "finalized_at", "summary", "progress"}``; ``summary`` is the
    one written at finalisation (None before), ``progress`` the live counts."""
    batch = session.execute(
        select(TaskBatch).where(TaskBatch.scope_id == scope.scope_id, TaskBatch.batch_id == batch_id)
    ).scalar_one_or_none()
    if batch is None:
        raise TaskNotFound(f"batch {batch_id} not found")
    return BatchDto(
        id=batch.batch_id,
        state=batch.finalizer_state,
        sealed=batch.sealed,
        created_at=batch.created_at.isoformat(),
        finalized_at=batch.finalized_at.isoformat() if batch.finalized_at else None,
        summary=batch.summary,
        progress=batches.summary(session, scope.scope_id, batch_id),
    ).model_dump()


def queue_depth(session: Session) -> dict[str, dict[str, int]]:
    """Per lane: ``{"queued", "running", "parked"}`` across all scopes (for ``/health``)."""
    rows = session.execute(
        text(
            "SELECT lane, count(*) FILTER (WHERE status = 'queued' AND available_at < :p), "
            "count(*) FILTER (WHERE status = 'running'), "
            "count(*) FILTER (WHERE status = 'queued' AND available_at >= :p) "
            "FROM tasks WHERE status IN ('queued', 'running') GROUP BY lane"
        ),
        {"p": queue.PARKED_AT},
    ).all()
    depth = {lane: {"queued": 0, "running": 0, "parked": 0} for lane in registry.lane_names(listed_only=True)}
    for lane, queued, running, parked in rows:
        depth[lane] = {"queued": queued, "running": running, "parked": parked}
    return depth


def stalled_lanes(session: Session, seconds: float) -> list[str]:
    """The listed lanes whose work has had no consumer for ``seconds``: a task there has been due
    (queued, not parked) for that long, none runs and none ended since (for ``/health``)."""
    return list(
        session.execute(
            text(
                "SELECT q.lane FROM tasks q WHERE q.status = 'queued' AND q.lane = ANY(:lanes) "
                "AND q.available_at < now() - make_interval(secs => :s) AND q.available_at < :p "
                "GROUP BY q.lane HAVING NOT EXISTS (SELECT 1 FROM tasks c WHERE c.lane = q.lane "
                "AND (c.status = 'running' OR (c.status <> 'queued' "
                "AND c.updated_at > now() - make_interval(secs => :s)))) ORDER BY q.lane"
            ),
            {"lanes": registry.lane_names(listed_only=True), "s": seconds, "p": queue.PARKED_AT},
        ).scalars()
    )


# ------------------------------------------------------------------ the tasks pages' reads

#: The most tasks the tasks page lists.
PAGE_TASKS = 100


def recent_tasks(
    session: Session,
    scope: ScopeContext,
    *,
    status: str = "",
    task_type: str = "",
    stage: str = "",
    limit: int = PAGE_TASKS,
) -> list[tuple[Task, dict[str, Any]]]:
    """The newest tasks (by last update), each with the fields its task type adds to its row (the
    ``task_rows`` hook: the API's fields it fills, and any the page shows), filtered by status (one of
    :data:`TASK_STATUSES`; another: all), task type and ``stage`` (a filter a plugin declares)."""
    query = select(Task).where(Task.scope_id == scope.scope_id)
    if status in TASK_STATUSES:
        query = query.where(Task.status == status)
    if task_type:
        query = query.where(Task.task_type == task_type)
    if stage:
        query = query.where(_row_filter("stage", stage))
    rows = list(session.execute(query.order_by(Task.updated_at.desc(), Task.id).limit(limit)).scalars())
    fields = registry.row_fields(session, rows)
    return [(task, fields[task.id]) for task in rows]


def page_task(session: Session, scope: ScopeContext, task_id: str) -> tuple[Task, list[TaskAttempt]] | None:
    """The task with exactly this id and its attempts (oldest first); None when not in the scope."""
    task = session.execute(select(Task).where(Task.scope_id == scope.scope_id, Task.id == task_id)).scalar_one_or_none()
    if task is None:
        return None
    return task, _attempts(session, scope, task.id)


def task_types(session: Session, scope: ScopeContext) -> list[str]:
    """The task types the scope has tasks of, by name."""
    return list(
        session.execute(
            select(Task.task_type).where(Task.scope_id == scope.scope_id).distinct().order_by(Task.task_type)
        ).scalars()
    )


def lane_depths(session: Session, scope: ScopeContext) -> list[dict[str, Any]]:
    """``[{"lane", "queued", "running"}]`` for every listed lane (zeros included) and any other lane the
    scope has active tasks in."""
    counts: dict[str, dict[str, Any]] = {
        lane: {"lane": lane, "queued": 0, "running": 0} for lane in registry.lane_names(listed_only=True)
    }
    for lane, status, n in session.execute(
        select(Task.lane, Task.status, func.count())
        .where(Task.scope_id == scope.scope_id, Task.status.in_(("queued", "running")))
        .group_by(Task.lane, Task.status)
    ):
        counts.setdefault(lane, {"lane": lane, "queued": 0, "running": 0})[status] = n
    return list(counts.values())


@dataclass
class BatchProgress:
    """One bulk submission as the tasks page shows it: ``done`` of ``total`` ``unit`` (``tasks``, or the
    units a task type's plugin counts its batches in), ``failed`` of them."""

    batch_id: str
    created_at: datetime
    done: int
    total: int
    failed: int
    unit: str
    complete: bool


BATCHES_SHOWN = 5
# A finished batch stays on the tasks page this long, so its "x of x" is seen.
BATCH_SHOWN_AFTER_SECONDS = 600

_BATCH_PROGRESS_SQL = text(
    """
    SELECT b.batch_id, b.created_at, b.finalizer_state = 'complete' AS complete,
           count(t.id) AS tasks,
           count(t.id) FILTER (WHERE t.status NOT IN ('queued', 'running')) AS tasks_done,
           count(t.id) FILTER (WHERE t.status = 'failed') AS tasks_failed
    FROM (SELECT * FROM task_batches
          WHERE scope_id = :s
            AND (finalizer_state <> 'complete' OR finalized_at > now() - make_interval(secs => :recent))
          ORDER BY created_at DESC LIMIT :n) b
    JOIN task_batch_items i ON i.scope_id = b.scope_id AND i.batch_id = b.batch_id
    JOIN tasks t ON t.scope_id = i.scope_id AND t.id = i.task_id
    GROUP BY b.batch_id, b.created_at, b.finalizer_state
    ORDER BY b.created_at DESC
    """
)


def batch_progress(session: Session, scope: ScopeContext) -> list[BatchProgress]:
    """The scope's newest unfinished batches (and those finished in the last
    :data:`BATCH_SHOWN_AFTER_SECONDS`), newest first: a batch whose work a task type's plugin counts
    in units of its own (the ``task_rows`` hook's ``batch_units``) shows
    those; any other counts the batch's tasks."""
    rows = list(
        session.execute(
            _BATCH_PROGRESS_SQL, {"s": scope.scope_id, "recent": BATCH_SHOWN_AFTER_SECONDS, "n": BATCHES_SHOWN}
        ).mappings()
    )
    units = registry.batch_units(session, scope.scope_id, [r["batch_id"] for r in rows])
    out = []
    for r in rows:
        u = units.get(r["batch_id"]) or registry.BatchUnits(r["tasks_done"], r["tasks"], r["tasks_failed"], "tasks")
        out.append(
            BatchProgress(
                batch_id=r["batch_id"],
                created_at=r["created_at"],
                done=u.done,
                total=u.total,
                failed=u.failed,
                unit=u.unit,
                complete=r["complete"],
            )
        )
    return out
