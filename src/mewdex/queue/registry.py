"""The registry of task types and lanes, and the context a handler runs with.

A kind of work is one :class:`TaskType` registered with :func:`register_task_type` (or the
:func:`task_type` decorator; both provide the ``task_types`` hook of :mod:`mewdex.hooks`) in the
module that owns the work: its name (``tasks.task_type``), lane,
resource key, retry policy, handler, hooks, and whether the handler makes an external call. Lanes
are declared with :func:`register_lane` (concurrency, back-pressure). The worker
(:mod:`mewdex.queue.worker`) runs every type the same way: claim → ``on_claim`` (claim transaction)
→ handler with a heartbeat (no transaction) → fenced write-back (``on_success`` or ``on_failure``)
→ batch bookkeeping. This package imports nothing above it: the plugins that register types are
declared by name in :data:`mewdex.hooks.BUILTIN_PLUGINS` and imported when a type is first used
(:func:`get`, :func:`submit`), or all at once by a worker (:func:`mewdex.hooks.load_all`).

A handler is ``handler(ctx: TaskContext) -> result`` (JSON-able); it raises :class:`TaskError` with
a stable code to fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.orm import Session, sessionmaker

from mewdex import hooks
from mewdex.config import get_settings
from mewdex.db.models.base import GLOBAL_LANE_RESOURCE_KEY, utcnow
from mewdex.db.models.queue import Task, TaskAttempt
from mewdex.queue import tasks as queue
from mewdex.queue.tasks import LANES as LANES  # lanes are declared with types: re-exported
from mewdex.queue.tasks import Lane as Lane
from mewdex.queue.tasks import lane as lane
from mewdex.queue.tasks import lane_names as lane_names
from mewdex.queue.tasks import register_lane as register_lane


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

    def __init__(self, sessions: sessionmaker[Session], claim: queue.Claim, prepared: Any = None):
        self.sessions, self.claim = sessions, claim
        #: what the type's ``on_claim`` hook returned in the claim transaction (e.g. a snapshot of what it works on)
        self.prepared = prepared

    @property
    def payload(self) -> dict[str, Any]:
        return self.claim.payload

    def _attempt(self, session: Session) -> TaskAttempt:
        c = self.claim
        attempt = session.get(TaskAttempt, (c.scope_id, c.task_id, c.attempt_count), with_for_update=True)
        if attempt is None:  # claim() writes it in the claim's transaction; gone only if the row was deleted
            raise LookupError(f"task {c.task_id} has no attempt {c.attempt_count}")
        return attempt

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Set ``tasks.progress`` (0..1) and ``message`` (≤ 500 chars)."""
        with self.sessions.begin() as session:
            task = queue.fenced(session, self.claim)
            task.progress = max(0.0, min(1.0, float(fraction)))
            if message is not None:
                task.message = message[:500]

    def external_started(self, executor_attempt_id: str | None = None) -> None:
        """Commit ``external_started`` on the attempt before a non-idempotent external call begins.
        Only types registered with ``external=True`` may (else ``TaskError("not_external")``, not retried)."""
        tt = get(self.claim.task_type)
        if tt is None or not tt.external:
            raise TaskError(
                "not_external", f"task type {self.claim.task_type!r} is not registered as external", retryable=False
            )
        with self.sessions.begin() as session:
            task = queue.fenced(session, self.claim)
            attempt = self._attempt(session)
            attempt.state = "external_started"
            attempt.executor_attempt_id = executor_attempt_id
            task.executor_attempt_id = executor_attempt_id

    def observe_cost(self, amount: float | Decimal) -> None:
        """Add ``amount`` to the task's and the attempt's ``observed_cost``, then ask the task type's
        cost budget (its ``cost_budget``, a ``cost_budgets`` hook implementation) whether the task is
        over it. The cost is recorded either way; over the budget raises
        ``TaskError("analysis_cost_limit", retryable=False)``."""
        amount = Decimal(str(amount))
        tt = get(self.claim.task_type)
        budget: CostBudget | None = None
        if tt is not None and tt.cost_budget is not None:
            budget = hooks.get("cost_budgets", tt.cost_budget)
        with self.sessions.begin() as session:
            task = queue.fenced(session, self.claim)
            attempt = self._attempt(session)
            task.observed_cost = (task.observed_cost or Decimal(0)) + amount
            attempt.observed_cost = (attempt.observed_cost or Decimal(0)) + amount
            task.usage_checked_at = attempt.usage_checked_at = utcnow()
            over = None
            if budget is not None:
                session.flush()
                over = budget(session, task)
        if over is not None:
            raise TaskError("analysis_cost_limit", over, retryable=False, termination_reason="analysis_cost_limit")


# budget(session, task) -> None, or why the task is over its budget: asked after each observed cost (the
# task's ``observed_cost`` already includes it, flushed), in the transaction that records it.
CostBudget = Callable[[Session, Task], str | None]


Handler = Callable[[TaskContext], Any]
# on_claim(session, claim) -> prepared: in the claim's transaction (lock what the handler will read).
ClaimHook = Callable[[Session, queue.Claim], Any]
# on_success(session, claim, task, result, batch_id) -> True when it added a follow-up task to the batch
# (the batch stays open): in the fenced write-back transaction, before the task is marked succeeded.
SuccessHook = Callable[[Session, queue.Claim, Task, Any, str | None], bool | None]
# on_failure(session, task, outcome): in the transaction that records the failure; ``outcome`` is one of
# FAILURE_OUTCOMES. ``task`` is the locked Task row (``task.error`` holds the error).
FailureHook = Callable[[Session, Task, str], None]
# on_retry(session, task): a failed task is queued again on request (``queue.service.retry``).
RetryHook = Callable[[Session, Task], None]

#: ``retrying``: the attempt failed and the task is queued again (backoff, lease expiry, worker stop);
#: ``failed``: it failed for good; ``cancelled``: cancelled on request; ``unknown_execution``: its worker
#: died after the external call started.
FAILURE_OUTCOMES = ("retrying", "failed", "cancelled", "unknown_execution")


@dataclass(frozen=True)
class RetryPolicy:
    """How a failing task is retried: up to ``max_attempts`` attempts, each retry after a capped
    exponential backoff with jitter (:func:`mewdex.queue.tasks.backoff_seconds`). None = the settings
    (``MEWDEX_TASK_MAX_ATTEMPTS``, ``MEWDEX_RETRY_BASE_SECONDS``, ``MEWDEX_RETRY_MAX_SECONDS``)."""

    max_attempts: int | None = None
    base_seconds: float | None = None
    cap_seconds: float | None = None

    def attempts(self) -> int:
        return self.max_attempts if self.max_attempts is not None else get_settings().task_max_attempts

    def base(self) -> float:
        return self.base_seconds if self.base_seconds is not None else get_settings().retry_base_seconds

    def cap(self) -> float:
        return self.cap_seconds if self.cap_seconds is not None else get_settings().retry_max_seconds


@dataclass(frozen=True)
class TaskType:
    """One kind of work.

    - ``lane`` / ``resource_key``: where its tasks queue (:func:`mewdex.queue.tasks.enqueue` defaults);
      ``resource_per_scope``: each scope's tasks use their own resource key instead
      (:func:`mewdex.queue.tasks.scope_resource_key`), so the lane's ``scope_share`` caps what one
      scope runs at once;
    - ``pressure_lane``: the lane whose back-pressure limit its submissions count against (a type whose
      tasks hand off into that lane), None = its own lane;
    - ``external``: the handler calls something outside the machine; it must call
      ``ctx.external_started()`` before, so a worker dying during the call leaves the task
      ``unknown_execution`` instead of replaying it;
    - ``store_result``: write the handler's return value to ``tasks.result`` (False: hooks consume it);
    - ``crash_code``: the error code of an unexpected exception in the handler (retried);
    - ``columns``: the task columns besides the queue's own (:data:`QUEUE_FIELDS`) its submitters set
      through :func:`submit` (opaque to the queue: stored as given, read by the type's own hooks);
    - ``cost_budget``: the name of the ``cost_budgets`` hook implementation (a :data:`CostBudget`) the
      costs its handler observes are checked against (None: costs are recorded, never limited);
    - ``abandonable``: a stopping worker gives a running task of this type back at once instead of
      waiting up to its grace period, and exits without it. Only for handlers that mostly wait (a
      long poll) and whose every effect commits in one transaction with its cursor, so a run cut
      anywhere loses nothing: the next run fetches the same again.
    """

    name: str
    handler: Handler
    lane: str = "default"
    resource_key: str = GLOBAL_LANE_RESOURCE_KEY
    resource_per_scope: bool = False
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    external: bool = False
    on_claim: ClaimHook | None = None
    on_success: SuccessHook | None = None
    on_failure: FailureHook | None = None
    on_retry: RetryHook | None = None
    pressure_lane: str | None = None
    store_result: bool = True
    crash_code: str = "task_crashed"
    cost_budget: str | None = None
    columns: tuple[str, ...] = ()
    abandonable: bool = False


#: The task types loaded so far (the ``task_types`` hook's live mapping): use :func:`get`, which
#: imports the plugin that declares a type on first use, or :func:`task_types` for all.
TASK_TYPES: dict[str, TaskType] = hooks.provided("task_types")


def register_task_type(task_type: TaskType, *, _stacklevel: int = 2) -> TaskType:
    """Register a task type (the ``task_types`` hook; its lane is declared with defaults if nobody
    declares it)."""
    hooks.provide("task_types", task_type.name, task_type, stacklevel=_stacklevel)
    queue.declare_lane_implicitly(task_type.lane, hooks.provider_of("task_types", task_type.name))
    return task_type


def task_type(name: str, **options: Any) -> Callable[[Handler], Handler]:
    """Decorator: ``@task_type("noop")`` registers the function as the handler of a :class:`TaskType`
    built from ``options`` (its other fields)."""

    def wrap(fn: Handler) -> Handler:
        register_task_type(TaskType(name=name, handler=fn, **options), _stacklevel=3)
        return fn

    return wrap


def get(name: str) -> TaskType | None:
    """The task type ``name``, its plugin imported on first use; None when no plugin has it."""
    found: TaskType | None = hooks.get("task_types", name)
    return found


def task_types() -> dict[str, TaskType]:
    """Every task type (every plugin that declares one is imported)."""
    found: dict[str, TaskType] = hooks.implementations("task_types")
    return found


#: The task columns of the queue's own a submitter may set (:func:`submit`); a type declares any other.
QUEUE_FIELDS = frozenset({"lane", "lane_resource_key", "max_attempts", "available_at", "submission_mode"})


def submit(
    session: Session,
    *,
    scope_id: str,
    task_type: str,
    payload: dict[str, Any] | None = None,
    dedupe_key: str | None = None,
    **fields: Any,
) -> Task:
    """The one way a task is submitted: enqueue a task of a registered type with the type's lane,
    resource key and ``max_attempts``, in the caller's transaction; returns the active task with the
    same dedupe key instead when there is one. ``fields``: the queue's own (:data:`QUEUE_FIELDS`,
    overriding the type's defaults) and the extra columns the type declares (``TaskType.columns``),
    stored as given. KeyError for an unknown type; TypeError for a column the type does not declare."""
    tt = get(task_type)
    if tt is None:
        raise KeyError(task_type)
    undeclared = set(fields) - QUEUE_FIELDS - set(tt.columns)
    if undeclared:
        raise TypeError(f"task type {task_type!r} declares no column {', '.join(sorted(undeclared))}")
    fields.setdefault("lane", tt.lane)
    fields.setdefault(
        "lane_resource_key", queue.scope_resource_key(scope_id) if tt.resource_per_scope else tt.resource_key
    )
    fields.setdefault("max_attempts", tt.retry.attempts())
    return queue.enqueue(
        session, scope_id=scope_id, task_type=task_type, dedupe_key=dedupe_key, payload=payload, **fields
    )


# decorate(session, tasks) -> {task id: {field: value}}: the fields a plugin adds to the rows of its
# tasks (only those it knows; any other task is left out of the mapping).
RowDecorator = Callable[[Session, Sequence[Task]], Mapping[str, Mapping[str, Any]]]
# attempts(session, task) -> {attempt number: {field: value}}: what a plugin records of the attempts of
# a task of its own besides the queue's attempt rows (an empty mapping for any other task).
AttemptDecorator = Callable[[Session, Task], Mapping[int, Mapping[str, Any]]]


@dataclass(frozen=True)
class BatchUnits:
    """A batch's progress in a plugin's own units: ``done`` (ended, failed or not) of ``total``,
    ``failed`` of them, counted in ``unit`` (a word of the tasks page)."""

    done: int
    total: int
    failed: int
    unit: str


# units(session, scope_id, batch_ids) -> {batch id: BatchUnits}: the batches whose work the plugin counts.
BatchCounter = Callable[[Session, str, Sequence[str]], Mapping[str, BatchUnits]]


@dataclass(frozen=True)
class TaskRows:
    """What a plugin's task types add to their tasks on the tasks pages and API (the ``task_rows`` hook,
    by plugin): ``decorate`` gives each of its tasks its fields (the API's keys of
    :class:`mewdex.dto.tasks.Task` it fills, and any the page shows, e.g. a target's name); ``filters``:
    by filter name, ``value -> where clause over tasks`` (a list filter only a plugin understands);
    ``batch_units``: the progress of the batches its work is counted in units of its own (None: in tasks);
    ``attempts``: the fields it adds to each attempt of a task's detail (None: none)."""

    decorate: RowDecorator
    filters: Mapping[str, Callable[[str], ColumnElement[bool]]] = field(default_factory=dict)
    batch_units: BatchCounter | None = None
    attempts: AttemptDecorator | None = None


def register_cost_budget(name: str, budget: CostBudget) -> CostBudget:
    """Provide the ``cost_budgets`` hook's implementation ``name`` (a task type names it as its
    ``cost_budget``)."""
    return hooks.provide("cost_budgets", name, budget, stacklevel=2)


def register_task_rows(name: str, rows: TaskRows) -> TaskRows:
    """Provide the ``task_rows`` hook's implementation ``name``."""
    return hooks.provide("task_rows", name, rows, stacklevel=2)


def row_fields(session: Session, tasks: Sequence[Task]) -> dict[str, dict[str, Any]]:
    """Every task's fields from every ``task_rows`` implementation: ``{task id: {field: value}}`` (an
    empty mapping for a task no plugin decorates). One call per implementation for all the tasks."""
    out: dict[str, dict[str, Any]] = {t.id: {} for t in tasks}
    if not tasks:
        return out
    decorators: dict[str, TaskRows] = hooks.implementations("task_rows")
    for rows in decorators.values():
        for task_id, fields in rows.decorate(session, tasks).items():
            out.setdefault(task_id, {}).update(fields)
    return out


def attempt_fields(session: Session, task: Task) -> dict[int, dict[str, Any]]:
    """What every ``task_rows`` implementation adds to the task's attempts: ``{attempt: {field: value}}``."""
    out: dict[int, dict[str, Any]] = {}
    decorators: dict[str, TaskRows] = hooks.implementations("task_rows")
    for rows in decorators.values():
        if rows.attempts is not None:
            for attempt, fields in rows.attempts(session, task).items():
                out.setdefault(attempt, {}).update(fields)
    return out


def batch_units(session: Session, scope_id: str, batch_ids: Sequence[str]) -> dict[str, BatchUnits]:
    """The batches a ``task_rows`` implementation counts in its own units, by batch id (the others
    are counted in tasks by the caller)."""
    out: dict[str, BatchUnits] = {}
    if not batch_ids:
        return out
    decorators: dict[str, TaskRows] = hooks.implementations("task_rows")
    for rows in decorators.values():
        if rows.batch_units is not None:
            out.update(rows.batch_units(session, scope_id, batch_ids))
    return out


def row_filter(name: str, value: str) -> ColumnElement[bool] | None:
    """The where clause of the list filter ``name`` (None: no plugin declares it)."""
    decorators: dict[str, TaskRows] = hooks.implementations("task_rows")
    for rows in decorators.values():
        if name in rows.filters:
            return rows.filters[name](value)
    return None


def load(modules: Iterable[str]) -> None:
    """Import the modules that register task types and lanes (once each; :func:`mewdex.hooks.load`)."""
    hooks.load(list(modules))


def failure_outcome(session: Session, task: Task, outcome: str) -> None:
    """Run the task type's ``on_failure`` hook, if it has one (``outcome``: one of FAILURE_OUTCOMES)."""
    tt = get(task.task_type)
    if tt is not None and tt.on_failure is not None:
        tt.on_failure(session, task, outcome)
