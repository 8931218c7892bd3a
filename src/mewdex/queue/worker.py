"""Worker runtime: threads (:class:`WorkerPool`, inside one process, e.g. ``mewdex worker``) or child
processes (:class:`WorkerProcesses`, what ``mewdex serve`` and ``import --wait`` start by default) that
claim tasks, run their handler with a heartbeat, and write back under fencing.

Every task runs the same path, whatever its type (:mod:`mewdex.queue.registry`): claim (+ the type's
``on_claim`` hook, same transaction) → handler with a heartbeat, no transaction held → fenced
write-back (+ ``on_success`` / ``on_failure``) → batch bookkeeping. A maintenance pass (once a second
per pool) reaps expired leases, re-creates lane slot rows and feeds parked batch tasks: inline
(:func:`mewdex.queue.maintenance.maintain`), or, in a pool given a :class:`Scheduler` (``mewdex
worker``, ``serve``), by ticking the scheduler, which enqueues that work as tasks once per interval
across every process.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from mewdex.config import Settings, get_settings
from mewdex.db.supervisor import is_connection_lost, log_loop_error
from mewdex.queue import batches, registry
from mewdex.queue import tasks as queue
from mewdex.queue.maintenance import maintain
from mewdex.queue.reconnect import hand_back
from mewdex.queue.registry import TaskError, TaskType
from mewdex.queue.scheduler import Scheduler

log = logging.getLogger(__name__)
MAINTENANCE_SECONDS = 1.0
#: How long a stopping pool waits, past its grace period, for its workers' write-backs in flight.
WRITE_BACK_GRACE_SECONDS = 10.0


def serving_lanes(lanes: list[str] | None) -> list[str]:
    """The lanes a worker claims from: ``lanes`` (default: every declared lane) plus the internal lanes
    (``listed=False``, e.g. ``maintenance``), which every worker serves so the queue's upkeep runs
    wherever workers run."""
    every = registry.lane_names()
    chosen = list(lanes or every)
    return chosen + [lane for lane in every if lane not in chosen and not registry.LANES[lane].listed]


class Worker:
    """One claim-run-write-back loop. ``run_once`` processes at most one task; ``run`` loops until stopped.

    Under ``run`` the success write-back of a task type with an ``on_success`` hook (e.g. the pipeline's)
    is handed to the worker's writer thread, and the loop claims and runs the next task meanwhile: the
    write-back (its statements, the database's work, the commit; about a fifth of a pipeline worker's
    time, ``bench/ingest.py``) overlaps the next handler instead of idling the models. At most one
    write-back is in flight: the next one, and every claim's failure path, waits for it. ``run_once``
    called on its own writes back before it returns.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        name: str | None = None,
        lanes: list[str] | None = None,
        maintenance: bool = True,
    ):
        self.sessions = sessions
        self.settings = get_settings()
        self.owner = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lanes = serving_lanes(lanes)
        self.maintenance = maintenance
        self.stop_event = threading.Event()
        self.current: queue.Claim | None = None
        self.last_beat = time.monotonic()
        self._next_maintenance = 0.0
        # The success of a task type without an on_success hook, written in the same transaction as the
        # next claim (one commit per task instead of two; both are fenced, so committing them together is safe).
        self._pending: tuple[queue.Claim, object] | None = None
        # The writer thread of ``run`` (None: write-backs are inline) and its write-back in flight.
        self._writer: ThreadPoolExecutor | None = None
        self._in_flight: Future[None] | None = None
        # Checking stop_event and handing a write-back over is one step for a stopping pool's thread.
        self._hand_over = threading.Lock()

    def run(self) -> None:
        log.info("worker %s started (lanes %s)", self.owner, ",".join(self.lanes))
        self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"{threading.current_thread().name}-write-back")
        try:
            while not self.stop_event.is_set():
                self.last_beat = time.monotonic()
                try:
                    worked = self.run_once()
                except Exception as exc:  # a database hiccup must not kill the thread
                    log_loop_error(log, f"worker {self.owner}: unexpected error", exc)
                    worked = False
                if not worked:
                    if self._in_flight is not None:  # its lane slot may be what the claim lacked
                        self._wait_write_back()
                        continue
                    self.stop_event.wait(self.settings.worker_poll_seconds)
        finally:
            writer = self._writer
            try:
                self.flush()
            finally:
                self._writer = None
                writer.shutdown(wait=True)

    def _wait_write_back(self) -> None:
        """Wait for the write-back in flight, if any (it handles its own errors). Worker thread only."""
        in_flight = self._in_flight
        if in_flight is not None:
            in_flight.result()
            self._in_flight = None

    def finish_write_back(self, timeout: float) -> bool:
        """From another thread (a stopping pool): wait up to ``timeout`` seconds for the write-back in
        flight; True when none is left (a process that exits at once would roll it back)."""
        with self._hand_over:  # after stop_event is set: no write-back is handed over later than this
            in_flight = self._in_flight
        if in_flight is None:
            return True
        done, _ = wait([in_flight], timeout=timeout)
        return bool(done)

    def flush(self) -> None:
        """Finish the write-back in flight, then write back a completed task still waiting for the next
        claim's transaction."""
        self._wait_write_back()
        if self._pending is not None:
            with self.sessions.begin() as session:
                self._write_pending(session)

    def _write_pending(self, session: Session) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        claim, result = pending
        try:
            with session.begin_nested():  # a failing write-back must not take the next claim down with it
                if not queue.try_complete(session, claim, result):
                    log.warning(
                        "discarding result of a stale claim: task %s generation %s",
                        claim.task_id,
                        claim.claim_generation,
                    )
                elif claim.batch_id is not None:
                    batches.finalize_if_done(session, claim.scope_id, claim.batch_id)
        except Exception as exc:
            tt = registry.get(claim.task_type)
            error = self._write_back_error(claim, tt, exc)
            try:
                with session.begin_nested():
                    self._fail(session, claim, tt, error)
            except queue.StaleClaim as stale:
                log.warning("discarding result of a stale claim: %s", stale)

    def run_once(self) -> bool:
        """Claim and process one task; False when there was nothing to do."""
        if self.maintenance and time.monotonic() >= self._next_maintenance:
            self._next_maintenance = time.monotonic() + MAINTENANCE_SECONDS
            with self.sessions.begin() as session:
                maintain(session)
        prepared = None
        pending = self._pending
        try:
            for _ in range(5):  # a slot raced away to another claimer: try again at once
                contended: list[bool] = []
                with self.sessions.begin() as session:
                    if self._pending is not None:
                        self._write_pending(session)
                    claim = queue.claim(
                        session,
                        owner=self.owner,
                        lanes=self.lanes,
                        lease_seconds=self.settings.worker_lease_seconds,
                        contended=contended,
                    )
                    if claim is not None:
                        tt = registry.get(claim.task_type)
                        if tt is not None and tt.on_claim is not None:
                            prepared = tt.on_claim(session, claim)
                if claim is not None or not contended:
                    break
        except Exception as exc:
            if pending is not None and is_connection_lost(exc):  # its result was not written: hand it back
                self._pending = None
                self._hand_back(pending[0])
            raise
        if claim is None:
            return False
        self.current = claim
        try:
            self._execute(claim, registry.get(claim.task_type), prepared)
        except Exception as exc:
            if is_connection_lost(exc):  # once the database is back, the task goes back to the queue at once
                self._hand_back(claim)
            raise
        finally:
            self.current = None
        return True

    def _execute(self, claim: queue.Claim, tt: TaskType | None, prepared: Any) -> None:
        error: TaskError | None = None
        result = None
        with _Heartbeat(self.sessions, claim, self.settings):
            try:
                if tt is None:
                    raise TaskError("unknown_task_type", f"no handler for {claim.task_type!r}", retryable=False)
                result = tt.handler(registry.TaskContext(self.sessions, claim, prepared))
            except TaskError as exc:
                error = exc
            except queue.StaleClaim as exc:
                log.warning("task %s lost its claim while running: %s", claim.task_id, exc)
                return
            except Exception as exc:  # a handler bug: recorded and retried, never fatal to the worker
                log.exception("task %s (%s) crashed", claim.task_id, claim.task_type)
                # Stored and shown to users: the kind only (exception text can hold paths or SQL); details in the log.
                error = TaskError(
                    tt.crash_code if tt else "task_crashed",
                    f"the task failed unexpectedly ({type(exc).__name__}); the server log has the details",
                )
            # One write-back in flight at most, written in claim order; this task's lease is still
            # extended while it waits for the last one.
            self._wait_write_back()
        writer = self._writer
        if writer is not None and error is None and tt is not None and tt.on_success is not None:
            with self._hand_over:
                if not self.stop_event.is_set():  # a stopping worker writes back inline (see WorkerPool.stop)
                    self._in_flight = writer.submit(self._write_back_in_background, claim, tt, result)
                    return
        self._write_back(claim, tt, result, error)

    def _write_back(self, claim: queue.Claim, tt: TaskType | None, result: Any, error: TaskError | None) -> None:
        """The fenced write-back of a task whose handler returned ``result`` or raised ``error``:
        ``on_success`` and completion (a failing one takes the failure path), the failure path, or, for a
        type without ``on_success``, completion in the next claim's transaction. A lost database
        connection is raised (the caller hands the task back)."""
        try:
            if error is None and tt is not None and tt.on_success is not None:
                try:
                    with self.sessions.begin() as session:
                        self._succeed(session, claim, tt, result)
                except queue.StaleClaim:
                    raise
                except Exception as exc:  # between the handler's end and its commit: the failure path
                    error = self._write_back_error(claim, tt, exc)
            if error is not None:
                with self.sessions.begin() as session:
                    self._fail(session, claim, tt, error)
            elif tt is None or tt.on_success is None:
                self._pending = (claim, result if tt is None or tt.store_result else None)
                if self.stop_event.is_set():
                    self.flush()
        except queue.StaleClaim as exc:
            log.warning("discarding result of a stale claim: %s", exc)

    def _write_back_in_background(self, claim: queue.Claim, tt: TaskType, result: Any) -> None:
        """:meth:`_write_back` on the writer thread: a lost connection hands the task back once the
        database answers (as ``run_once`` does for an inline one); nothing escapes."""
        try:
            self._write_back(claim, tt, result, None)
        except Exception as exc:
            if not is_connection_lost(exc):
                log.exception("task %s (%s): its write-back failed unexpectedly", claim.task_id, claim.task_type)
                return
            try:
                self._hand_back(claim)
            except Exception as again:  # the lease reaper takes the task back instead
                log_loop_error(log, f"task {claim.task_id}: handing it back failed", again)

    def _hand_back(self, claim: queue.Claim) -> None:
        """After a lost connection: once the database answers, the claimed task goes back to the queue at
        once (its type's failure hook sees ``retrying``); see :func:`~mewdex.queue.reconnect.hand_back`."""
        hand_back(
            self.sessions,
            claim,
            wait_seconds=self.settings.worker_lease_seconds,
            on_released=lambda session, task: registry.failure_outcome(session, task, "retrying"),
        )

    @staticmethod
    def _write_back_error(claim: queue.Claim, tt: TaskType | None, exc: Exception) -> TaskError:
        """The failure of a write-back that raised ``exc`` (the task then takes its failure path: retried
        with backoff while attempts remain, slots freed at once). Retryable: a full disk
        (``insufficient_storage``), anything else (``write_back_failed``); a lost database connection
        is raised again (``run_once`` hands the task back once the database answers)."""
        if is_connection_lost(exc):
            raise exc
        log.error(
            "task %s (%s): its write-back failed; the task takes its failure path",
            claim.task_id,
            claim.task_type,
            exc_info=exc,
        )
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return TaskError("insufficient_storage", "the disk was full while the task wrote its result")
        return TaskError(
            "write_back_failed",
            f"writing the task's result failed ({type(exc).__name__}); the server log has the details",
        )

    def _succeed(self, session: Session, claim: queue.Claim, tt: TaskType, result: Any) -> None:
        """Fenced write-back: lock the task (StaleClaim when the claim is stale), run the type's
        ``on_success`` hook, mark it succeeded, and end its batch membership unless the hook handed off."""
        task = queue.fenced(session, claim)
        batch_id = claim.batch_id
        assert tt.on_success is not None
        handed_off = tt.on_success(session, claim, task, result, batch_id)
        queue.complete(session, claim, result if tt.store_result else None)
        if batch_id is not None and not handed_off:  # a hand-off keeps the batch open
            batches.finalize_if_done(session, claim.scope_id, batch_id)

    def _fail(self, session: Session, claim: queue.Claim, tt: TaskType | None, error: TaskError) -> None:
        task = queue.fenced(session, claim)
        policy = tt.retry if tt is not None else registry.RetryPolicy()
        final = queue.fail(
            task,
            error.code,
            error.message,
            retryable=error.retryable,
            base=policy.base(),
            cap=policy.cap(),
            termination_reason=error.termination_reason,
        )
        assert task.error is not None  # queue.fail recorded it
        queue.end_attempt(
            session,
            claim.scope_id,
            claim.task_id,
            claim.attempt_count,
            task.error,
            state="failed",
            termination_reason=error.termination_reason,
        )
        registry.failure_outcome(session, task, "failed" if final else "retrying")
        if final:
            batches.task_ended(session, claim.scope_id, claim.task_id)

    def running_abandonable(self) -> bool:
        """Whether the running task's type is ``abandonable`` (a stopping pool need not wait for it)."""
        claim = self.current
        tt = registry.get(claim.task_type) if claim is not None else None
        return tt is not None and tt.abandonable

    def release_current(self, signal_name: str = "SIGTERM") -> bool:
        """Give the running task back to the queue (shutdown past the grace period); True if one was released."""
        claim = self.current
        if claim is None:
            return False
        try:
            with self.sessions.begin() as session:
                task = queue.fenced(session, claim)
                queue.release(task, f"released by a stopping worker ({signal_name})")
                queue.end_attempt(
                    session,
                    claim.scope_id,
                    claim.task_id,
                    claim.attempt_count,
                    queue.error_record(
                        "worker_stopped", "the worker stopped before the task ended", claim.attempt_count
                    ),
                    termination_signal=signal_name,
                )
                registry.failure_outcome(session, task, "retrying")
        except queue.StaleClaim:
            return False
        return True


class _Heartbeat:
    """Extends the claim's lease every ``worker_heartbeat_seconds`` while its handler runs (a context manager)."""

    def __init__(self, sessions: sessionmaker[Session], claim: queue.Claim, settings: Settings):
        self.sessions, self.claim, self.settings = sessions, claim, settings
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"heartbeat-{claim.task_id}", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def _loop(self) -> None:
        while not self.done.wait(self.settings.worker_heartbeat_seconds):
            try:
                with self.sessions.begin() as session:
                    if not queue.heartbeat(session, self.claim, self.settings.worker_lease_seconds):
                        log.warning("lease lost on task %s", self.claim.task_id)
                        return
            except Exception as exc:
                log_loop_error(log, f"heartbeat failed for task {self.claim.task_id}", exc)


class WorkerPool:
    """N worker threads sharing one process's models, plus one maintenance thread.

    ``stop(grace)`` stops claiming, waits up to ``grace`` seconds for running tasks to finish, then
    releases the ones still running back to the queue (their late results are fenced)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        count: int,
        lanes: list[str] | None = None,
        scheduler: Scheduler | None = None,
    ):
        self.sessions = sessions
        self.scheduler = scheduler
        self.workers = [Worker(sessions, lanes=lanes, maintenance=False) for _ in range(count)]
        self.threads = [
            threading.Thread(target=w.run, name=f"worker-{i}", daemon=True) for i, w in enumerate(self.workers)
        ]
        self.stop_event = threading.Event()
        self.maintenance_thread = threading.Thread(target=self._maintain, name="queue-maintenance", daemon=True)
        self.started_at: float | None = None

    def start(self) -> None:
        if not self.workers:
            return
        with self.sessions.begin() as session:
            expired = queue.expire_orphaned_leases(session, socket.gethostname(), _pid_alive)
        if expired:
            log.info("expired %d leases of dead worker processes on this host", expired)
        self.started_at = time.time()
        self.maintenance_thread.start()
        for t in self.threads:
            t.start()

    def _maintain(self) -> None:
        while not self.stop_event.wait(MAINTENANCE_SECONDS):
            try:
                if self.scheduler is not None:
                    self.scheduler.tick()
                    continue
                with self.sessions.begin() as session:
                    maintain(session)
            except Exception as exc:
                log_loop_error(log, "queue maintenance failed", exc)

    def status(self) -> dict[str, Any]:
        """``{"threads", "alive", "busy", "lanes"}`` of this process's workers (for ``/health``)."""
        alive = sum(t.is_alive() for t in self.threads)
        busy = sum(w.current is not None for w in self.workers)
        lanes = self.workers[0].lanes if self.workers else []
        return {"threads": len(self.threads), "alive": alive, "busy": busy, "lanes": lanes}

    def stop(self, grace: float | None = None) -> int:
        """Stop; returns how many running tasks had to be released after the grace period."""
        grace = get_settings().worker_grace_seconds if grace is None else grace
        self.stop_event.set()
        for w in self.workers:
            w.stop_event.set()
        deadline = time.monotonic() + grace
        for t, w in zip(self.threads, self.workers, strict=True):
            # A thread in an abandonable task (a long poll) is not waited for: its task is given back below.
            while t.ident is not None and t.is_alive() and not w.running_abandonable():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                t.join(min(0.1, left))
        released = sum(w.release_current() for w in self.workers if w.current is not None)
        # A write-back in flight past the grace period is a finished task's result: let it commit (its
        # statements take milliseconds) rather than roll it back with the process (`mewdex worker` exits
        # with os._exit) and leave the task running until its lease expires. After the release: the
        # running tasks are handed back first, within the time the parent process allows.
        until = time.monotonic() + WRITE_BACK_GRACE_SECONDS
        for w in self.workers:
            if not w.finish_write_back(max(0.0, until - time.monotonic())):
                log.warning("worker %s: a write-back was still in flight at exit; the lease reaper retries it", w.owner)
        if released:
            log.warning("released %d running tasks back to the queue", released)
        return released


class WorkerProcesses:
    """N ``mewdex worker`` child processes of one worker thread each: the models run without sharing
    one interpreter lock, which on the corpus processes ~8 % more images per second than threads
    (``bench/ingest.py``) for ~0.5 GB more memory per process. Same interface as :class:`WorkerPool`.

    The children inherit the environment (data dir, database, settings, so also the grace period) and
    get SIGTERM when this process dies (Linux; see :func:`die_with_parent`), so they never outlive it.
    A supervisor thread restarts a child that died (the log says how: exit code or signal) after a
    backoff of :data:`RESTART_BACKOFF` seconds, doubling while restarts keep failing within
    :data:`STABLE_SECONDS`; the new child expires the dead one's leases when it starts, so the task it
    held runs again at once. ``stop()`` sends SIGTERM (each child lets its task finish within the grace
    period, then releases it) and kills what is left a little after."""

    RESTART_BACKOFF = (2.0, 60.0)  # first delay, cap (seconds)
    STABLE_SECONDS = 60.0  # a child that ran this long restarts after the first delay again
    SUPERVISE_SECONDS = 0.5

    def __init__(self, count: int, lanes: list[str] | None = None):
        self.count = count
        self.lanes = list(lanes or registry.lane_names())
        self.children: list[subprocess.Popen[bytes]] = []
        self.restarts = 0
        self.last_exit: str | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._supervisor = threading.Thread(target=self._supervise, name="worker-supervisor", daemon=True)

    def _spawn(self) -> subprocess.Popen[bytes]:
        command = [
            sys.executable,
            "-m",
            "mewdex",
            "worker",
            "--concurrency",
            "1",
            "--lanes",
            ",".join(self.lanes),
            "--parent-pid",
            str(os.getpid()),
        ]
        from mewdex import telemetry

        # its own series stay its own (never in serve's /metrics), as with one web process
        environment = telemetry.child_environment()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environment)
        threading.Thread(target=_relay_stderr, args=(child,), name=f"worker-{child.pid}-stderr", daemon=True).start()
        return child

    def start(self) -> None:
        self.children = [self._spawn() for _ in range(self.count)]
        self._started = [time.monotonic()] * self.count
        self._delay = [0.0] * self.count
        self._due: list[float | None] = [None] * self.count
        self._supervisor.start()

    def _supervise(self) -> None:
        while not self._stopping.wait(self.SUPERVISE_SECONDS):
            try:
                self._check()
            except Exception:  # e.g. fork failing for lack of memory: try again at the next check
                log.exception("worker supervisor: restarting a worker process failed")

    def _check(self) -> None:
        with self._lock:
            for i, child in enumerate(self.children):
                code = child.poll()
                if code is None or self._stopping.is_set():
                    continue
                now = time.monotonic()
                if self._due[i] is None:
                    first, cap = self.RESTART_BACKOFF
                    ran = now - self._started[i]
                    self._delay[i] = first if ran >= self.STABLE_SECONDS else min(cap, max(first, 2 * self._delay[i]))
                    self._due[i] = now + self._delay[i]
                    self.last_exit = exit_reason(code)
                    # A clean exit is a stop this process shares: a terminal's Ctrl-C or a service manager
                    # signals the whole process group, and the child may end before this process has set
                    # `_stopping`. It is said only if the restart happens (the pool did not stop meanwhile).
                    if code != 0:
                        log.error(
                            "worker process %d %s after %.0f s; restarting it in %.0f s",
                            child.pid,
                            self.last_exit,
                            ran,
                            self._delay[i],
                        )
                elif now >= (self._due[i] or now):
                    self.children[i] = self._spawn()
                    self._started[i], self._due[i] = now, None
                    self.restarts += 1
                    log.warning(
                        "worker process restarted: pid %d (was %d, %s)", self.children[i].pid, child.pid, self.last_exit
                    )

    def status(self) -> dict[str, Any]:
        """``{"processes", "alive", "pids", "lanes", "restarts", "last_exit"}`` of the child workers (for
        ``/health``): ``processes`` configured, ``alive`` running, ``restarts`` so far, ``last_exit``
        how the last dead one ended (``"killed by SIGKILL"``, ``"exited with code 1"``) or None."""
        alive = [c.pid for c in self.children if c.poll() is None]
        return {
            "processes": self.count,
            "alive": len(alive),
            "pids": alive,
            "lanes": self.lanes,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
        }

    def stop(self) -> int:
        """Stop the children; returns how many had to be killed after their grace period."""
        self._stopping.set()
        if self._supervisor.ident is not None:
            self._supervisor.join()
        grace = get_settings().worker_grace_seconds
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        # the child releases its task after `grace`, then lets a write-back in flight commit
        deadline = time.monotonic() + grace + WRITE_BACK_GRACE_SECONDS + 10
        killed = 0
        for child in self.children:
            try:
                child.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
                killed += 1
        return killed


_child_log = logging.getLogger("mewdex.worker.child")


#: A child's log line (``cli.common``'s format: date, time, level, …): relayed at its own level.
_CHILD_LEVEL = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def _relay_stderr(child: subprocess.Popen[bytes]) -> None:
    """Pass a child worker's stderr lines to this process's logging, so they go where this process's
    logs go (above a progress bar, never through it): a log line at its level and without its own
    date, time and level, which this process's format adds again (an ``import --wait`` at WARNING
    hides the children's INFO lines), anything else (a traceback's lines) as WARNING, as it is."""
    assert child.stderr is not None
    for raw in child.stderr:
        line = raw.decode("utf-8", "replace").rstrip()
        if line:
            level = _CHILD_LEVEL.match(line)
            if level is None:
                _child_log.warning("[worker %s] %s", child.pid, line)
            else:
                _child_log.log(getattr(logging, level.group(1)), "[worker %s] %s", child.pid, line[level.end() :])


def exit_reason(returncode: int) -> str:
    """How a child process ended, for the log: ``killed by SIGKILL`` or ``exited with code 1``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


def start_workers(
    sessions: sessionmaker[Session], count: int, scheduler: Scheduler | None = None
) -> WorkerPool | WorkerProcesses:
    """Start ``count`` workers the configured way (``MEWDEX_WORKER_MODE``): child processes (each
    runs its own scheduler), or threads of this process (whose maintenance thread ticks
    ``scheduler``; without one it maintains the queue inline). No workers (``count`` 0) is an empty
    thread pool."""
    mode = get_settings().worker_mode
    pool = WorkerProcesses(count) if count and mode == "process" else WorkerPool(sessions, count, scheduler=scheduler)
    pool.start()
    return pool


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to send this process SIGTERM when its parent dies, and exit now if ``parent_pid`` is
    already gone (a worker started by ``serve`` or ``import --wait``). A no-op where prctl is missing."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
