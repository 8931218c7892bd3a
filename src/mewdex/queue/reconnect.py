"""After a database outage: reconnect and hand back the task a worker held, instead of waiting out its lease.

When the database goes away while a worker runs a task, the worker's write-back fails. The claim is
still ``running`` in the database with a lease of ``MEWDEX_WORKER_LEASE_SECONDS``; without this,
nobody could claim the task until that lease expired. :func:`hand_back` waits until the database
answers again, then gives the task back to the queue at once (as a stopping worker does). Fencing
keeps it safe: when the lease already moved on (expired and re-claimed), nothing is written.

The worker calls it where an exception of a claimed task's run or write-back is a lost connection
(:func:`mewdex.db.supervisor.is_connection_lost`), see ``Worker.run_once``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from mewdex.db.models.queue import Task
from mewdex.db.supervisor import is_connection_lost
from mewdex.queue import tasks as queue

log = logging.getLogger(__name__)
REASON = "database_unavailable"


def hand_back(
    sessions: sessionmaker[Session],
    claim: queue.Claim,
    *,
    wait_seconds: float,
    on_released: Callable[[Session, Task], None] | None = None,
    poll_seconds: float = 0.5,
) -> bool:
    """Wait up to ``wait_seconds`` for the database, then release ``claim``'s task back to the queue
    (its attempt is recorded failed with ``database_unavailable`` and does not use up a retry).

    ``on_released(session, task)`` runs in the same transaction (e.g. the task type's failure hook
    sees ``retrying``). Returns True when released; False when the claim is stale (the lease moved on) or the
    database did not come back in time. Errors other than a lost connection are raised.
    """
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            with sessions.begin() as session:
                task = queue.fenced(session, claim)
                queue.release(task, "handed back after the database connection was lost")
                queue.end_attempt(
                    session,
                    claim.scope_id,
                    claim.task_id,
                    claim.attempt_count,
                    queue.error_record(REASON, "the database connection was lost during the task", claim.attempt_count),
                    state="failed",
                )
                if on_released is not None:
                    on_released(session, task)
            log.warning("task %s handed back to the queue after a database outage", claim.task_id)
            return True
        except queue.StaleClaim:
            return False
        except Exception as exc:
            if not is_connection_lost(exc):
                raise
            if time.monotonic() >= deadline:
                log.warning(
                    "task %s: the database did not come back within %.0f s; its lease will expire",
                    claim.task_id,
                    wait_seconds,
                )
                return False
            time.sleep(poll_seconds)
