"""What the pipeline meters: each stage that runs a model writes one usage event per queue task.

* ``agent`` → an ``analysis.agent`` operation grant (idempotency key = the task id) committed with
  a ``kind="analysis"`` event; the local analyzer is reserved and committed in the stage's fenced
  write-back (it calls nothing outside the machine). A remote analyzer must reserve before its
  call (``grants.reserve`` checks the monthly analysis budget) and commit or release after.
* ``text_embedding`` → ``kind="embedding"``, units ``{"passages": n}`` per model.
Retries of a task never meter twice (keyed by the task id).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from mewdex.db.models import ImageStageTask, ScopeContext
from mewdex.platform import grants, usage


def meter_stage(session: Session, stage_task: ImageStageTask, output: Any, model_profile: str) -> None:
    """Write the usage of one applied stage (``stage_task``: the task's image-stage row; ``output``: the
    stage's; ``model_profile``: the analysis stage's version, recorded on its usage event)."""
    stage = stage_task.image_stage
    if stage == "agent":
        grant = grants.reserve(
            session,
            ScopeContext(stage_task.scope_id),
            "analysis.agent",
            f"task:{stage_task.task_id}",
            task_id=stage_task.task_id,
            resource_id=str(stage_task.target_meme_id),
            check_budget=False,
        )
        lines = (output or {}).get("ocr_lines") or []
        grants.commit(
            session,
            grant,
            kind="analysis",
            model_profile=model_profile,
            units={"images": 1, "ocr_lines": len(lines) if isinstance(lines, list) else 0},
        )
    elif stage == "text_embedding":
        usage.record_all(
            session,
            stage_task.scope_id,
            [
                usage.Usage(
                    "embedding",
                    role["model"],
                    {"passages": len(role["items"])},
                    task_id=stage_task.task_id,
                    idempotency_key=f"task:{stage_task.task_id}:{role['model']}",
                )
                for role in (output or {}).values()
            ],
        )


def meter_image_search(session: Session, scope: ScopeContext, model_profile: str) -> None:
    """One search by image (the local visual model embeds the query image)."""
    usage.record(
        session, scope_id=scope.scope_id, kind="image_search", model_profile=model_profile, units={"images": 1}
    )
