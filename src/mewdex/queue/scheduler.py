"""The periodic scheduler: a :class:`Schedule` enqueues one task of its type per interval ("slot"),
however many processes run a scheduler against the same database.

Slots are aligned on the epoch (slot ``k`` of an interval ``s`` starts at ``k × s`` seconds). Each
process keeps its own next due time; when it is due, :func:`enqueue_slot` takes a transaction-scoped
advisory lock on the slot's dedupe key (``schedule:<name>:<slot>``), checks whether a task with that
key exists in any status, and enqueues one if not, so N processes never enqueue a slot twice, even
when the first one's task already finished. A schedule's first slot is due one interval after its
scheduler started (start-up work runs in ``mewdex.runtime`` instead). Finished tasks of a schedule
older than ``keep_intervals`` intervals are deleted when a later slot is enqueued (at every
:func:`prune_every`-th slot). A scheduler reads in one statement which of its due slots are taken
(:func:`slots_taken`) before it takes the lock of each other one, and skips a slot while a task of an
earlier slot of its schedule is still queued (one waiting task per schedule, not one per slot, when no
worker runs).

Built-in maintenance schedules live in :mod:`mewdex.runtime.maintenance`; one of them
(``scheduled_job_dispatch``) dispatches users' cron jobs (:mod:`mewdex.schedules.dispatch`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, text
from sqlalchemy.orm import Session, sessionmaker

from mewdex.db.models.queue import Task
from mewdex.db.supervisor import log_loop_error
from mewdex.queue import registry

log = logging.getLogger(__name__)
TICK_SECONDS = 0.5


@dataclass(frozen=True)
class Schedule:
    """Enqueue a ``task_type`` task (a registered type) into ``scope_id`` every ``interval`` seconds (a
    number, or a callable read at each tick, e.g. a setting). ``payload`` is the task's payload (plus
    ``slot``); the task's lane and retry policy are its type's."""

    name: str
    task_type: str
    interval: float | Callable[[], float]
    scope_id: str
    payload: dict[str, Any] = field(default_factory=dict)
    keep_intervals: int = 10

    def seconds(self) -> float:
        value = self.interval() if callable(self.interval) else self.interval
        if value <= 0:
            raise ValueError(f"schedule {self.name}: interval must be positive, got {value}")
        return float(value)

    def slot(self, now: datetime) -> int:
        """The slot ``now`` falls in."""
        return math.floor(now.timestamp() / self.seconds())

    def dedupe_key(self, slot: int) -> str:
        return f"schedule:{self.name}:{slot}"


def enqueue_slot(session: Session, schedule: Schedule, slot: int) -> Task | None:
    """Enqueue the schedule's task of ``slot`` unless a task for it exists already (any status);
    returns the new task, or None. Safe against concurrent callers in other processes (an advisory
    lock on the slot key, held to the end of the caller's transaction). Finished tasks of the schedule
    past what it keeps are deleted at every :func:`prune_every`-th slot."""
    key = schedule.dedupe_key(slot)
    session.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": key})
    if slot_taken(session, schedule, slot):
        return None
    task = registry.submit(
        session,
        scope_id=schedule.scope_id,
        task_type=schedule.task_type,
        dedupe_key=key,
        payload=dict(schedule.payload, slot=slot),
        submission_mode="standalone",
    )
    if slot % prune_every(schedule) == 0:
        _prune(session, schedule)
    return task


def slot_taken(session: Session, schedule: Schedule, slot: int) -> bool:
    """Whether a task of the schedule's ``slot`` exists (any status)."""
    return (
        session.execute(
            select(Task.id)
            .where(
                Task.scope_id == schedule.scope_id,
                Task.task_type == schedule.task_type,
                Task.dedupe_key == schedule.dedupe_key(slot),
                Task.submission_mode == "standalone",  # ix_tasks_standalone_dedupe: no scan of all tasks
            )
            .limit(1)
        ).first()
        is not None
    )


def slots_taken(session: Session, due: Iterable[tuple[Schedule, int]]) -> set[str]:
    """The dedupe keys of ``due`` (schedule, slot) pairs that need no task: one exists for the slot (any
    status), or one of the schedule's earlier slots is still queued and due (no worker took it yet: the one task
    that will run does the work, so a server whose workers are elsewhere and down does not pile one up per
    slot). One statement for them all, through ``ix_tasks_standalone_dedupe`` (a schedule's own tasks:
    the ones it keeps, and at most one queued)."""
    due = list(due)
    rows = session.execute(
        select(Task.scope_id, Task.task_type, Task.dedupe_key, Task.status).where(
            Task.scope_id.in_({s.scope_id for s, _ in due}),
            Task.task_type.in_({s.task_type for s, _ in due}),
            Task.submission_mode == "standalone",
            or_(
                Task.dedupe_key.in_([s.dedupe_key(slot) for s, slot in due]),
                # Waiting for a worker, not out a retry's back-off (then the next slots come as before).
                and_(Task.status == "queued", Task.available_at <= func.now(), Task.dedupe_key.like("schedule:%")),
            ),
        )
    ).all()
    taken = set()
    for schedule, slot in due:
        key, prefix = schedule.dedupe_key(slot), f"schedule:{schedule.name}:"
        for scope_id, task_type, dedupe_key, status in rows:
            if (scope_id, task_type) != (schedule.scope_id, schedule.task_type) or dedupe_key is None:
                continue
            if dedupe_key == key or (status == "queued" and dedupe_key.startswith(prefix)):
                taken.add(key)
                break
    return taken


def prune_every(schedule: Schedule) -> int:
    """Prune a schedule's finished tasks at every this many slots (a sixth of what it keeps: a one-second
    schedule keeping 60 prunes every 10 s, not at every tick of every process)."""
    return max(1, schedule.keep_intervals // 6)


def _prune(session: Session, schedule: Schedule) -> None:
    before = datetime.now(UTC) - timedelta(seconds=schedule.seconds() * max(1, schedule.keep_intervals))
    session.execute(
        delete(Task).where(
            Task.scope_id == schedule.scope_id,
            Task.task_type == schedule.task_type,
            Task.submission_mode == "standalone",  # ix_tasks_standalone_dedupe
            Task.dedupe_key.like(f"schedule:{schedule.name}:%"),
            Task.status.in_(("succeeded", "failed")),
            # An expression, not the bare column: retention's index on finished tasks' completed_at
            # (ix_tasks_finished_completed) would otherwise tempt the planner to walk every finished
            # task older than the cutoff (nearly all of them) instead of this schedule's few.
            func.coalesce(Task.completed_at, before) < before,
        )
    )


class Scheduler:
    """Enqueues the due slots of ``schedules`` when :meth:`tick` is called (one transaction per due
    schedule). ``started`` (epoch seconds, default now) starts every schedule's first interval."""

    def __init__(self, sessions: sessionmaker[Session], schedules: Iterable[Schedule], started: float | None = None):
        self.sessions = sessions
        self.schedules = list(schedules)
        start = time.time() if started is None else started
        self._next_due = {s.name: start + s.seconds() for s in self.schedules}

    def tick(self, now: float | None = None) -> list[Task]:
        """Enqueue the slot of every schedule that is due at ``now`` (epoch seconds); returns the tasks
        this call enqueued (a slot another process enqueued first is not returned)."""
        now = time.time() if now is None else now
        due: list[tuple[Schedule, int]] = []
        for schedule in self.schedules:
            if now < self._next_due[schedule.name]:
                continue
            seconds = schedule.seconds()
            slot = math.floor(now / seconds)
            self._next_due[schedule.name] = (slot + 1) * seconds
            due.append((schedule, slot))
        if not due:
            return []
        try:
            # Every process's scheduler is due at the same moment: the ones that come after the slots were
            # enqueued learn it from one read for all of them, without the lock and its transaction (an idle
            # server spent most of its CPU on the one-second schedules' ticks, a read per schedule); a slot
            # whose schedule still has a task waiting for a worker is not enqueued at all.
            with self.sessions() as session:
                taken = slots_taken(session, due)
        except Exception as exc:
            log_loop_error(log, f"schedules {', '.join(s.name for s, _ in due)}: could not read their slots", exc)
            return []
        out = []
        for schedule, slot in due:
            if schedule.dedupe_key(slot) in taken:
                continue
            try:
                with self.sessions.begin() as session:
                    task = enqueue_slot(session, schedule, slot)
            except Exception as exc:
                log_loop_error(log, f"schedule {schedule.name}: could not enqueue slot {slot}", exc)
                continue
            if task is not None:
                out.append(task)
        return out


class SchedulerThread(Scheduler):
    """A :class:`Scheduler` ticking on a daemon thread every ``TICK_SECONDS`` until :meth:`stop`."""

    def __init__(self, sessions: sessionmaker[Session], schedules: Iterable[Schedule]):
        super().__init__(sessions, schedules)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self) -> None:
        if self.schedules:
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            self.tick()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(5)
