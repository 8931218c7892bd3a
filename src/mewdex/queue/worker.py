"""Worker runtime: threads (inside ``mewdex serve``) or a process (``mewdex worker``) that claim
image-stage tasks, run their handler with a heartbeat, and write back under fencing."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid

from sqlalchemy.orm import Session, sessionmaker

from mewdex.config import get_settings
from mewdex.db.models import ImageProcessingAttempt, Task
from mewdex.library.scopes import storage_namespace
from mewdex.platform import metering
from mewdex.pipeline import jobs
from mewdex.pipeline.stages import HANDLERS, MemeSnapshot, StageError, load_meme
from mewdex.queue import tasks as queue
from mewdex.storage import blob_store

log = logging.getLogger(__name__)
LANES = ["visual", "agent", "default", "embedding"]


class Worker:
    """One claim-run-write-back loop. ``run_once`` processes at most one task; ``run`` loops until stopped."""

    def __init__(self, sessions: sessionmaker[Session], *, name: str | None = None, lanes: list[str] = LANES):
        self.sessions = sessions
        self.settings = get_settings()
        self.owner = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lanes = lanes
        self.stop_event = threading.Event()

    def run(self) -> None:
        log.info("worker %s started (lanes %s)", self.owner, ",".join(self.lanes))
        while not self.stop_event.is_set():
            try:
                worked = self.run_once()
            except Exception:  # a database hiccup must not kill the thread
                log.exception("worker %s: unexpected error", self.owner)
                worked = False
            if not worked:
                self.stop_event.wait(self.settings.worker_poll_seconds)

    def run_once(self) -> bool:
        """Claim and process one task; False when there was nothing to do."""
        with self.sessions.begin() as session:
            for scope_id, task_id in queue.reap_exhausted(session):
                task = session.get(Task, (task_id,))
                if task is not None and task.processing_job_id is not None:
                    jobs.stage_failed(session, task)
            claim = queue.claim(
                session, owner=self.owner, lanes=self.lanes, lease_seconds=self.settings.worker_lease_seconds
            )
            if claim is None:
                return False
            task = session.get(Task, (claim.task_id,))
            meme = load_meme(session, claim.scope_id, claim.target_meme_id)
            snapshot = _snapshot(session, meme)
            if claim.processing_job_id is not None:
                jobs.stage_started(session, task)
            session.add(
                ImageProcessingAttempt(
                    scope_id=claim.scope_id,
                    task_id=claim.task_id,
                    attempt=claim.attempt_count,
                    attempt_id=f"{claim.task_id}:{claim.attempt_count}",
                    stage=claim.image_stage or claim.task_type,
                    state="prepared",
                    input_digest=(meme.search_metadata_hash or meme.sha256) if meme else "0" * 64,
                    target_sha256=meme.sha256 if meme else "0" * 64,
                    claim_generation=claim.claim_generation,
                )
            )
        self._execute(claim, snapshot)
        return True

    def _execute(self, claim: queue.Claim, snapshot: MemeSnapshot | None) -> None:
        beat = _Heartbeat(self.sessions, claim, self.settings)
        beat.start()
        try:
            handler = HANDLERS.get(claim.image_stage or "")
            if handler is None:
                raise StageError("unknown_stage", f"no handler for {claim.image_stage!r}", retryable=False)
            if snapshot is None:
                raise StageError("meme_missing", "the meme no longer exists", retryable=False)
            output = handler.run(snapshot)
            error = None
        except StageError as exc:
            output, error = None, exc
        except Exception as exc:  # a handler bug: recorded and retried, never fatal to the worker
            log.exception("stage %s crashed on task %s", claim.image_stage, claim.task_id)
            output, error = None, StageError("stage_crashed", f"{type(exc).__name__}: {exc}")
        finally:
            beat.stop()
        try:
            with self.sessions.begin() as session:
                task = queue.fenced(session, claim)
                attempt = session.get(ImageProcessingAttempt, (claim.scope_id, claim.task_id, claim.attempt_count))
                if error is None:
                    meme = load_meme(session, claim.scope_id, claim.target_meme_id)
                    handler.apply(session, meme, output)
                    metering.meter_stage(session, claim, output)
                    queue.succeed(task)
                    jobs.stage_succeeded(session, task)
                    attempt.state = "completed"
                else:
                    final = queue.fail(
                        task, error.code, error.message, retryable=error.retryable,
                        base=self.settings.retry_base_seconds, cap=self.settings.retry_max_seconds,
                    )
                    (jobs.stage_failed if final else jobs.stage_retrying)(session, task)
                    attempt.state = "failed"
                    attempt.error = task.error
        except queue.StaleClaim as exc:
            log.warning("discarding result of a stale claim: %s", exc)


def _snapshot(session: Session, meme) -> MemeSnapshot | None:
    if meme is None:
        return None
    namespace = storage_namespace(session, meme.scope_id)
    key = meme.storage_key
    store = blob_store()
    return MemeSnapshot(
        scope_id=meme.scope_id,
        id=meme.id,
        sha256=meme.sha256,
        display_name=meme.display_name,
        provenance=dict(meme.provenance),
        meme_context=dict(meme.meme_context),
        read_bytes=lambda: store.path(namespace, key).read_bytes(),
    )


class _Heartbeat:
    """Extends the claim's lease every ``worker_heartbeat_seconds`` while its handler runs."""

    def __init__(self, sessions, claim, settings):
        self.sessions, self.claim, self.settings = sessions, claim, settings
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"heartbeat-{claim.task_id}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()

    def _loop(self) -> None:
        while not self.done.wait(self.settings.worker_heartbeat_seconds):
            try:
                with self.sessions.begin() as session:
                    if not queue.heartbeat(session, self.claim, self.settings.worker_lease_seconds):
                        log.warning("lease lost on task %s", self.claim.task_id)
                        return
            except Exception:
                log.exception("heartbeat failed for task %s", self.claim.task_id)


class WorkerPool:
    """N worker threads sharing one process's models; ``stop`` waits for the current tasks to finish."""

    def __init__(self, sessions: sessionmaker[Session], count: int):
        self.sessions = sessions
        self.workers = [Worker(sessions, name=None) for _ in range(count)]
        self.threads = [threading.Thread(target=w.run, name=f"worker-{i}", daemon=True) for i, w in enumerate(self.workers)]

    def start(self) -> None:
        if not self.workers:
            return
        with self.sessions.begin() as session:
            expired = queue.expire_orphaned_leases(session, socket.gethostname(), _pid_alive)
        if expired:
            log.info("re-queued %d tasks of dead worker processes on this host", expired)
        for t in self.threads:
            t.start()

    def stop(self, timeout: float = 30.0) -> None:
        for w in self.workers:
            w.stop_event.set()
        for t in self.threads:
            t.join(timeout)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
