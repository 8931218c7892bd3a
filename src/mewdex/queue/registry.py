"""Standalone task types (tasks without a processing job) and the context their handlers run with.

A handler is ``run(ctx: TaskContext) -> result`` (JSON-able); it raises :class:`TaskError` with a
stable code to fail. Image-stage tasks are not here: they run through ``pipeline.stages.HANDLERS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.db.models import ImageProcessingAttempt, Task, utcnow
from mewdex.queue import tasks as queue


@dataclass
class TaskError(Exception):
    """A task failure with a stable code; ``retryable`` failures are retried with backoff while attempts remain.
    ``termination_reason`` (one of the seed's) is recorded on the task and its attempt."""

    code: str
    message: str
    retryable: bool = True
    termination_reason: str | None = None

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class TaskContext:
    """What a running handler may do besides computing: report progress, mark the start of an external
    call (after which a crash leaves the attempt ``unknown_execution``), and report the cost it observed.
    Every write is fenced: a handler whose claim went stale gets :class:`queue.StaleClaim`."""

    def __init__(self, sessions: sessionmaker[Session], claim: queue.Claim):
        self.sessions, self.claim = sessions, claim

    @property
    def payload(self) -> dict[str, Any]:
        return self.claim.payload

    def _attempt(self, session: Session) -> ImageProcessingAttempt:
        c = self.claim
        return session.get(ImageProcessingAttempt, (c.scope_id, c.task_id, c.attempt_count), with_for_update=True)

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Set ``tasks.progress`` (0..1) and ``message`` (≤ 500 chars)."""
        with self.sessions.begin() as session:
            task = queue.fenced(session, self.claim)
            task.progress = max(0.0, min(1.0, float(fraction)))
            if message is not None:
                task.message = message[:500]

    def external_started(self, executor_attempt_id: str | None = None) -> None:
        """Commit ``external_started`` on the attempt before a non-idempotent external call begins."""
        with self.sessions.begin() as session:
            task = queue.fenced(session, self.claim)
            attempt = self._attempt(session)
            attempt.state = "external_started"
            attempt.executor_attempt_id = executor_attempt_id
            task.executor_attempt_id = executor_attempt_id

    def observe_cost(self, amount: float | Decimal) -> None:
        """Add ``amount`` to the task's and the attempt's ``observed_cost`` and check the frozen
        ``analysis_policy`` (``max_cost_per_image``, ``max_cost_per_scope_day``). The cost is recorded
        either way; past a limit raises ``TaskError("analysis_cost_limit", retryable=False)``."""
        amount = Decimal(str(amount))
        with self.sessions.begin() as session:
            task = queue.fenced(session, self.claim)
            attempt = self._attempt(session)
            task.observed_cost = (task.observed_cost or Decimal(0)) + amount
            attempt.observed_cost = (attempt.observed_cost or Decimal(0)) + amount
            task.usage_checked_at = attempt.usage_checked_at = utcnow()
            policy = task.analysis_policy or {}
            over = None
            per_image = policy.get("max_cost_per_image")
            if per_image is not None and task.observed_cost > Decimal(str(per_image)):
                over = f"observed cost {task.observed_cost} is over the per-image limit {per_image}"
            per_day = policy.get("max_cost_per_scope_day")
            if over is None and per_day is not None:
                session.flush()
                spent = session.execute(
                    select(func.coalesce(func.sum(Task.observed_cost), 0)).where(
                        Task.scope_id == task.scope_id,
                        Task.updated_at >= func.date_trunc("day", func.now()),
                    )
                ).scalar_one()
                if Decimal(spent) > Decimal(str(per_day)):
                    over = f"the scope spent {spent} today, over its daily limit {per_day}"
        if over is not None:
            raise TaskError("analysis_cost_limit", over, retryable=False, termination_reason="analysis_cost_limit")


Handler = Callable[[TaskContext], Any]
FailureHook = Callable[[Session, Any], None]  # (session, the Claim or Task: has task_type and payload)
HANDLERS: dict[str, Handler] = {}
FAILURE_HOOKS: dict[str, FailureHook] = {}


def register(task_type: str, *, on_failure: FailureHook | None = None) -> Callable[[Handler], Handler]:
    """Decorator: ``@register("noop")`` makes the function the handler of that task type;
    ``on_failure(session, claim_or_task)`` runs in the transaction that fails the task for good
    (last attempt failed, lease expired with no attempt left, or cancelled)."""

    def wrap(fn: Handler) -> Handler:
        HANDLERS[task_type] = fn
        if on_failure is not None:
            FAILURE_HOOKS[task_type] = on_failure
        return fn

    return wrap


def failed_for_good(session: Session, task) -> None:
    """Run the task type's failure hook, if it has one (``task``: a Claim or a Task)."""
    hook = FAILURE_HOOKS.get(task.task_type)
    if hook is not None:
        hook(session, task)


@register("noop")
def noop(ctx: TaskContext) -> dict[str, Any]:
    """A task that does nothing (queue tests and ``bench/queue.py``). Payload, all optional:
    ``sleep`` seconds (only on attempts ≤ ``sleep_attempts`` when given; ``progress`` reports it),
    ``fail`` an error code to raise on every attempt (``retryable`` default true), ``external`` mark an
    external call as started first, ``cost`` to observe."""
    import time

    p = ctx.payload
    if p.get("external"):
        ctx.external_started(executor_attempt_id=f"noop-{ctx.claim.task_id}-{ctx.claim.attempt_count}")
    if p.get("cost") is not None:
        ctx.observe_cost(p["cost"])
    sleep = float(p.get("sleep") or 0)
    if p.get("sleep_attempts") is not None and ctx.claim.attempt_count > int(p["sleep_attempts"]):
        sleep = 0.0
    if sleep:
        steps = max(1, int(sleep / 0.5))
        for i in range(steps):
            time.sleep(sleep / steps)
            if p.get("progress"):
                ctx.progress((i + 1) / steps, f"step {i + 1}/{steps}")
    if p.get("fail"):
        raise TaskError(str(p["fail"]), str(p.get("message") or "the task failed on purpose"),
                        retryable=bool(p.get("retryable", True)))
    return {"ok": True}
