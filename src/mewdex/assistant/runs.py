"""A conversation's run: its owner (``host:pid:start-ticks:run-id``), start, cancel, finish, and the
reaper (task type ``conversation_run_reaping``, scheduled in ``runtime/maintenance.py``) that
finishes runs whose owner process died.

A run is owned by the process that answers the message. The reaper ends a ``running`` /
``cancelling`` run as ``error`` (``run_error`` ``run_owner_died``) when its owner on this host is no
longer alive (same pid with the same start time), or when it is older than
``MEWDEX_ASSISTANT_RUN_TIMEOUT_SECONDS`` (an owner on another host cannot be checked).
"""

from __future__ import annotations

import os
import socket
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from mewdex.assistant import conversations
from mewdex.assistant.errors import AssistantError
from mewdex.assistant.settings import settings as assistant_settings
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import Conversation, ScopeContext, utcnow
from mewdex.queue.maintenance import MAINTENANCE_LANE
from mewdex.queue.registry import RetryPolicy, TaskContext, task_type

ACTIVE = ("running", "cancelling")
REAPING_INTERVAL_SECONDS = 10


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def new_owner() -> str:
    """A fresh run owner for this process: ``host:pid:start-ticks:run-id``."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid) or '0'}:{uuid.uuid4().hex}"


def owner_alive(owner: str | None) -> bool | None:
    """Whether the owner process lives: True/False on this host, None when it cannot be told."""
    try:
        host, pid, ticks, _run = (owner or "").rsplit(":", 3)
    except ValueError:
        return None
    if host != socket.gethostname():
        return None
    return _start_ticks(int(pid)) == ticks


def start(conversation: Conversation, owner: str) -> None:
    """Mark the (locked) conversation's run as ``running`` by ``owner``; a newer run takes over."""
    conversation.run_status = "running"
    conversation.run_error = None
    conversation.run_owner = owner
    conversation.run_started_at = utcnow()


def cancel(session: Session, scope: ScopeContext, conversation_id: Any) -> Conversation:
    """Ask the running reply to stop (``cancelling``; the owner ends it ``cancelled``);
    ``run_not_active`` (409) when nothing runs."""
    conversation = conversations.get(session, scope, conversation_id, lock=True)
    if conversation.run_status == "cancelling":
        return conversation
    if conversation.run_status != "running":
        raise AssistantError("run_not_active", "no reply is being written")
    conversation.run_status = "cancelling"
    return conversation


def status(session: Session, conversation_id, owner: str) -> str:
    """The run status as ``owner`` sees it: the stored one, or ``superseded`` when another run owns it."""
    row = session.execute(
        select(Conversation.run_status, Conversation.run_owner).where(Conversation.conversation_id == conversation_id)
    ).one_or_none()
    if row is None:
        return "cancelling"
    return row.run_status if row.run_owner == owner else "superseded"


def finish(conversation: Conversation, owner: str, *, error: str | None = None) -> str:
    """End ``owner``'s run on the locked conversation: ``idle``, ``error`` (with ``error``), or
    ``cancelled`` when a stop was asked. A run another owner took over is left alone. The final status."""
    if conversation.run_owner != owner or conversation.run_status not in ACTIVE:
        return conversation.run_status
    if conversation.run_status == "cancelling":
        conversation.run_status = "cancelled"
    elif error is not None:
        conversation.run_status, conversation.run_error = "error", error
    else:
        conversation.run_status = "idle"
    return conversation.run_status


def reap(session: Session) -> int:
    """End every active run whose owner died (or that timed out) as ``error``; how many."""
    timeout = timedelta(seconds=assistant_settings().assistant_run_timeout_seconds)
    rows = (
        session.execute(
            select(Conversation).where(Conversation.run_status.in_(ACTIVE)).with_for_update(skip_locked=True)
        )
        .scalars()
        .all()
    )
    reaped = 0
    for conversation in rows:
        alive = owner_alive(conversation.run_owner)
        started = conversation.run_started_at
        stale = started is None or utcnow() - started > timeout
        if alive is False or (alive is None and stale) or (alive and stale):
            conversation.run_status = "error"
            conversation.run_error = "run_owner_died" if alive is False else "run_timed_out"
            reaped += 1
    return reaped


@task_type("conversation_run_reaping", lane=MAINTENANCE_LANE, retry=RetryPolicy(max_attempts=1))
def conversation_run_reaping(ctx: TaskContext) -> dict[str, Any]:
    with get_sessionmaker().begin() as session:
        return {"reaped": reap(session)}
