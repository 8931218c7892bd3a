"""Retention: finished work is deleted after a while, so the tables stop growing with history
(README "Monitoring" → "Retention"). Run by the periodic scheduler as the ``retention`` task
(:mod:`mewdex.runtime.maintenance`, every :data:`INTERVAL_SECONDS`), oldest rows first, in batches of
``MEWDEX_RETENTION_BATCH_ROWS`` rows, one short transaction each (``FOR UPDATE SKIP LOCKED``: a row
something else holds is left for the next run).

======================== ================================================ =====================================
rule                     what is deleted                                  kept
======================== ================================================ =====================================
``tasks``                succeeded tasks ended ``MEWDEX_RETENTION_TASK_   failed tasks; members of a batch not
                         DAYS`` ago, with their attempts, grants and      yet complete; tasks whose reverse image
                         batch links (cascade); the meme's stage row      results are the search cache; a task
                         keeps its status, its task link is cleared       holding a lane slot
``deliveries``           sent and cancelled channel deliveries older     failed, unknown, queued, retrying
                         than ``MEWDEX_RETENTION_DELIVERY_DAYS``
``audits``               connector audit rows of successful calls older  failed calls and refusals
                         than ``MEWDEX_RETENTION_AUDIT_DAYS``
``trash``                memes trashed ``MEWDEX_TRASH_DAYS`` ago, for     memes restored meanwhile
                         good: each through the storage journal
                         (``library.trash.purge_expired``)
``schedule_conversations`` conversations of isolated schedule runs whose  a persistent job's conversation; runs
                         every run succeeded, unchanged for               that failed; a conversation in a run;
                         ``MEWDEX_RETENTION_SCHEDULE_CONVERSATION_DAYS``  the run rows themselves (the history)
``attempt_counts``       sign-up and public-link counts per address       the sign-in counters
                         (``login_failures`` ``signup:``/``share:``)
                         whose window began a day ago
======================== ================================================ =====================================

Billing rows (``usage_events``), live memes and what the pages list are never deleted here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from mewdex.config import get_settings

log = logging.getLogger(__name__)
INTERVAL_SECONDS = 600
#: One run stops after this long (the rest waits for the next run), so it never holds its slot for long.
RUN_BUDGET_SECONDS = 60.0
DAY = 86400.0


def _tasks(session: Session, limit: int) -> int:
    ids = session.execute(
        text(
            "SELECT t.scope_id, t.id FROM tasks t "
            "WHERE t.status = 'succeeded' AND t.completed_at < now() - make_interval(secs => :age) "
            "AND NOT EXISTS (SELECT 1 FROM task_batch_items i JOIN task_batches b "
            "  ON b.scope_id = i.scope_id AND b.batch_id = i.batch_id "
            "  WHERE i.scope_id = t.scope_id AND i.task_id = t.id AND b.finalizer_state <> 'complete') "
            "AND NOT EXISTS (SELECT 1 FROM reverse_image_usage_events r WHERE r.scope_id = t.scope_id "
            "  AND r.task_id = t.id) "
            "AND NOT EXISTS (SELECT 1 FROM task_lane_slots s WHERE s.task_scope_id = t.scope_id AND s.task_id = t.id) "
            "ORDER BY t.completed_at LIMIT :n FOR UPDATE OF t SKIP LOCKED"
        ),
        {"age": get_settings().retention_task_days * DAY, "n": limit},
    ).all()
    if not ids:
        return 0
    keys = {"scopes": [s for s, _ in ids], "ids": [i for _, i in ids]}
    pairs = "SELECT * FROM unnest(CAST(:scopes AS text[]), CAST(:ids AS text[])) AS d(scope_id, id)"
    # The stage rows reference their task with ON DELETE CASCADE: keep them (the meme page shows them).
    session.execute(
        text(
            f"UPDATE image_processing_stages g SET task_id = NULL FROM ({pairs}) d "
            "WHERE g.scope_id = d.scope_id AND g.task_id = d.id"
        ),
        keys,
    )
    result = session.execute(
        text(f"DELETE FROM tasks t USING ({pairs}) d WHERE t.scope_id = d.scope_id AND t.id = d.id"), keys
    )
    return int(getattr(result, "rowcount", 0) or 0)


def _deliveries(session: Session, limit: int) -> int:
    return _delete(
        session,
        "channel_deliveries",
        "delivery_id",
        "status IN ('sent','cancelled') AND created_at < now() - make_interval(secs => :age) ORDER BY created_at",
        get_settings().retention_delivery_days * DAY,
        limit,
    )


def _audits(session: Session, limit: int) -> int:
    from mewdex.providers.connectors import connector_settings

    return _delete(
        session,
        "external_system_audits",
        "audit_id",
        "outcome = 'ok' AND created_at < now() - make_interval(secs => :age) ORDER BY created_at",
        connector_settings().retention_audit_days * DAY,
        limit,
    )


def _schedule_conversations(session: Session, limit: int) -> int:
    from mewdex.schedules.service import settings as schedule_settings

    return _delete(
        session,
        "conversations",
        "conversation_id",
        "scheduled_job_id IS NOT NULL AND updated_at < now() - make_interval(secs => :age) "
        "AND run_status IN ('idle','error','cancelled') "
        "AND NOT EXISTS (SELECT 1 FROM scheduled_jobs j WHERE j.bound_task_id = conversations.conversation_id) "
        "AND NOT EXISTS (SELECT 1 FROM scheduled_job_runs r WHERE r.conversation_id = conversations.conversation_id "
        "  AND r.status <> 'ok') "
        "ORDER BY updated_at",
        schedule_settings().retention_schedule_conversation_days * DAY,
        limit,
    )


def _attempt_counts(session: Session, limit: int) -> int:
    """Sign-up and public-link counts per address (``platform.sessions.count_attempt``) whose window
    ended a day ago: one row per address that ever asked, else."""
    return _delete(
        session,
        "login_failures",
        "key",
        "(key LIKE 'signup:%' OR key LIKE 'share:%') AND window_started_at < now() - make_interval(secs => :age) "
        "ORDER BY window_started_at",
        DAY,
        limit,
    )


def _delete(session: Session, table: str, key: str, where: str, age_seconds: float, limit: int) -> int:
    """Delete up to ``limit`` rows of ``table`` matching ``where`` (which ends with its ORDER BY)."""
    result = session.execute(
        text(
            f"DELETE FROM {table} WHERE {key} IN "
            f"(SELECT {key} FROM {table} WHERE {where} LIMIT :n FOR UPDATE SKIP LOCKED)"
        ),
        {"age": age_seconds, "n": limit},
    )
    return int(getattr(result, "rowcount", 0) or 0)


def _trash(sessions: sessionmaker[Session], limit: int) -> int:
    """Purge up to ``limit`` memes trashed ``MEWDEX_TRASH_DAYS`` ago (each its own journaled delete)."""
    from mewdex.library import trash
    from mewdex.storage import blob_store

    return trash.purge_expired(sessions, blob_store(), limit=limit)


#: Rules that run their own transactions (a journaled delete is several).
SESSION_RULES: dict[str, Callable[[sessionmaker[Session], int], int]] = {"trash": _trash}

RULES: dict[str, Callable[[Session, int], int]] = {
    "tasks": _tasks,
    "deliveries": _deliveries,
    "audits": _audits,
    "schedule_conversations": _schedule_conversations,
    "attempt_counts": _attempt_counts,
}


def run(sessions: sessionmaker[Session], *, budget_seconds: float = RUN_BUDGET_SECONDS) -> dict[str, Any]:
    """Apply every rule until it finds nothing old enough or the run's time is up.

    Returns ``{"deleted": {rule: rows}, "batches": n, "seconds": s, "complete": bool}``; ``complete``
    is False when the budget ran out first (the next run goes on)."""
    limit = get_settings().retention_batch_rows
    started = time.monotonic()
    deleted = dict.fromkeys([*RULES, *SESSION_RULES], 0)
    batches = 0
    pending = list(deleted)
    while pending:
        for name in list(pending):
            if time.monotonic() - started > budget_seconds:
                return _summary(deleted, batches, started, complete=False)
            if name in SESSION_RULES:
                n = SESSION_RULES[name](sessions, limit)
            else:
                with sessions.begin() as session:
                    n = RULES[name](session, limit)
            batches += 1
            deleted[name] += n
            if n < limit:
                pending.remove(name)
    return _summary(deleted, batches, started, complete=True)


def _summary(deleted: dict[str, int], batches: int, started: float, *, complete: bool) -> dict[str, Any]:
    summary = {"deleted": deleted, "batches": batches, "seconds": round(time.monotonic() - started, 3)}
    if any(deleted.values()):
        log.info("retention: %s", summary)
    return {**summary, "complete": complete}
