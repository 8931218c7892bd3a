"""Queue task commands: ``tasks list|show|retry|cancel``."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from mewdex.cli.common import ExitCode, _prepare, console, err


def _task_call(fn, *args, **kwargs):
    """Run a task service in a transaction on the default scope; errors exit 1 (not found 4, conflict 3, full 5)."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.queue import service
    from mewdex.queue.backpressure import QueueFull

    _prepare()
    try:
        with get_sessionmaker().begin() as session:
            return fn(session, default_scope(), *args, **kwargs)
    except service.TaskNotFound as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(ExitCode.NOT_FOUND) from None
    except service.TaskConflict as exc:
        err.print(f"[red]error:[/red] {exc.code}: {exc}")
        raise typer.Exit(ExitCode.CONFLICT) from None
    except QueueFull as exc:
        err.print(f"[red]error:[/red] queue_full: {exc} (retry after {exc.retry_after} s)")
        raise typer.Exit(ExitCode.UNAVAILABLE) from None
    except service.BadCursor as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(ExitCode.USAGE) from None


def tasks_list(
    status: Annotated[str | None, typer.Option(help="queued, running, succeeded or failed.")] = None,
    task_type: Annotated[str | None, typer.Option("--type", help="Task type, e.g. meme_context_generation.")] = None,
    stage: Annotated[str | None, typer.Option(help="Image stage: visual, agent, auto_rename, text_embedding.")] = None,
    batch: Annotated[str | None, typer.Option(help="Only the tasks of this batch.")] = None,
    limit: Annotated[int, typer.Option("-n", min=1, max=200, help="Page size.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON.")] = False,
) -> None:
    """Tasks of the library, newest first."""
    from mewdex.queue import service

    page = _task_call(
        service.list_tasks, status=status, task_type=task_type, stage=stage, batch_id=batch, cursor=cursor, limit=limit
    )
    if as_json:
        print(json.dumps(page, ensure_ascii=False))
        return
    table = Table(title=f"{len(page['items'])} tasks")
    for column in ("id", "type", "status", "lane", "attempts", "error", "created"):
        table.add_column(column)
    for t in page["items"]:
        table.add_row(
            t["id"],
            t["type"],
            t["status"],
            t["lane"],
            f"{t['attempts']}/{t['max_attempts']}",
            (t["error"] or {}).get("code", ""),
            t["created_at"][:19],
        )
    console.print(table)
    if page["next_cursor"]:
        console.print(f"more: --cursor {page['next_cursor']}")


def tasks_show(task_id: str, as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """One task with its attempts and error history."""
    from mewdex.queue import service

    detail = _task_call(service.task_detail, task_id)
    if as_json:
        print(json.dumps(detail, ensure_ascii=False, indent=2))
        return
    console.print(
        f"[bold]{detail['id']}[/bold] {detail['type']} · {detail['status']} · lane {detail['lane']} · "
        f"attempts {detail['attempts']}/{detail['max_attempts']}"
    )
    if detail["error"]:
        console.print(f"error: {detail['error'].get('code')}: {detail['error'].get('message')}")
    table = Table(title="attempts")
    for column in ("#", "state", "generation", "termination", "error"):
        table.add_column(column)
    for a in detail["attempt_history"]:
        table.add_row(
            str(a["attempt"]),
            a["state"],
            str(a["claim_generation"]),
            a["termination_reason"] or "",
            (a["error"] or {}).get("code", ""),
        )
    console.print(table)


def tasks_retry(task_id: str) -> None:
    """Queue a failed task again (resumes an unknown_execution one)."""
    from mewdex.queue import service

    task = _task_call(service.retry, task_id)
    console.print(f"{task.id} queued (attempts {task.attempt_count}/{task.max_attempts})")


def tasks_cancel(task_id: str) -> None:
    """Cancel a queued or running task."""
    from mewdex.queue import service

    task = _task_call(service.cancel, task_id)
    console.print(f"{task.id} cancelled")
