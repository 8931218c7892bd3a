"""Processing status: counts of memes and of each planned stage's state, over each meme's latest job."""

from __future__ import annotations

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from mewdex.db.models import Meme, ScopeContext
from mewdex.library.listing import live
from mewdex.pipeline.jobs import IMPLEMENTED_STAGES

STATUS_KEYS = ("queued", "running", "succeeded", "failed")

_STAGE_COUNTS = text(
    """
    WITH latest AS (
        SELECT DISTINCT ON (meme_id) id FROM image_processing_jobs
        WHERE scope_id = :scope ORDER BY meme_id, created_at DESC
    )
    SELECT s.stage, s.status, count(*) FROM image_processing_stages s
    JOIN latest ON latest.id = s.job_id
    WHERE s.scope_id = :scope AND s.planned
    GROUP BY s.stage, s.status
    """
)

# The scope's queued and running tasks only (index ix_tasks_claimable), each with its stage row (by
# its key): as cheap in a library of a million memes as in one of a hundred. A meme's next stage is
# queued in the transaction that ends its last one, so a meme in processing always has an active task.
_PENDING_MEMES = text(
    """
    SELECT count(DISTINCT s.target_meme_id) FROM tasks t
    JOIN image_stage_tasks s ON s.task_id = t.id
    WHERE t.scope_id = :scope AND t.status IN ('queued', 'running') AND s.processing_job_id IS NOT NULL
    """
)


def pending_memes(session: Session, scope: ScopeContext) -> int:
    """Memes with an image stage queued or running (reads only the scope's active tasks)."""
    return session.execute(_PENDING_MEMES, {"scope": scope.scope_id}).scalar_one()


def status(session: Session, scope: ScopeContext) -> dict:
    """``{"memes": N, "stages": {stage: {"queued", "running", "succeeded", "failed"[, other states]}}}``."""
    memes = session.execute(
        select(func.count()).select_from(Meme).where(Meme.scope_id == scope.scope_id, live())
    ).scalar_one()
    # auto_rename is optional (jobs with auto_name only): listed when some job planned it.
    stages = {stage: dict.fromkeys(STATUS_KEYS, 0) for stage in IMPLEMENTED_STAGES if stage != "auto_rename"}
    for stage, state, count in session.execute(_STAGE_COUNTS, {"scope": scope.scope_id}):
        counts = stages.setdefault(stage, dict.fromkeys(STATUS_KEYS, 0))
        counts[state] = counts.get(state, 0) + count
    return {"memes": memes, "stages": stages}


def pending(counts: dict) -> int:
    """Stages still to run (queued or running) in a :func:`status` result."""
    return sum(c.get("queued", 0) + c.get("running", 0) for c in counts["stages"].values())
