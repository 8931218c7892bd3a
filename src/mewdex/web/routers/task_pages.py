"""The tasks pages: ``/tasks`` (the newest tasks, filtered, with lane depths and batch progress) with
its rows fragment (``/ui/tasks``), and ``/tasks/{id}`` (one task with its meme and attempts).

Reads: the page reads of :mod:`mewdex.queue.service`, the meme of :func:`mewdex.library.memes.find`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session

from mewdex.dto.scopes import ScopeContext
from mewdex.library import memes
from mewdex.pipeline.jobs import STAGES
from mewdex.queue import registry, service
from mewdex.web.deps import current_scope, db_session
from mewdex.web.templating import not_found, render

router = APIRouter(include_in_schema=False)


def task_rows(
    status: str = "",
    type: str = "",
    stage: str = "",
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
) -> dict[str, Any]:
    """The page's and the fragment's rows: ``tasks`` (task, the fields its type adds: stage, meme),
    lane ``depths``, ``batches``, ``filters``."""
    return {
        "tasks": service.recent_tasks(session, scope, status=status, task_type=type, stage=stage),
        "depths": service.lane_depths(session, scope),
        "batches": service.batch_progress(session, scope),
        "filters": {"status": status, "type": type, "stage": stage},
    }


@router.get("/tasks")
def tasks_page(
    request: Request,
    rows: dict[str, Any] = Depends(task_rows),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    return render(
        request,
        "tasks.html",
        {
            "page": "tasks",
            **rows,
            "statuses": service.TASK_STATUSES,
            "types": service.task_types(session, scope),
            "stages": STAGES,
        },
    )


@router.get("/ui/tasks")
def tasks_fragment(request: Request, rows: dict[str, Any] = Depends(task_rows)):
    return render(request, "partials/task_rows.html", rows)


def task_detail(
    task_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
) -> dict[str, Any] | None:
    """The task, its target meme (None: none, or deleted) and its attempts; None when not in the scope."""
    found = service.page_task(session, scope, task_id)
    if found is None:
        return None
    task, attempts = found
    row = registry.row_fields(session, [task])[task.id]
    meme = memes.find(session, scope, row["meme_id"]) if row.get("meme_id") else None
    return {"task": task, "row": row, "meme": meme, "attempts": attempts}


@router.get("/tasks/{task_id}")
def task_page(request: Request, detail: dict[str, Any] | None = Depends(task_detail)):
    if detail is None:
        return not_found(request)
    return render(request, "task.html", {"page": "tasks", **detail})
