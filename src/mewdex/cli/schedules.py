"""Schedule commands: ``schedule add|list|runs|pause|resume|delete`` (the local library's cron jobs,
acting on the local database; ``--all`` lists every owner's, as an admin)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from mewdex.cli.common import ExitCode, _prepare, console, err, exit_for


def _call(fn, *args, all_scopes: bool = False, **kwargs):
    """Run a schedules service in a transaction as the default scope (``all_scopes``: as an admin);
    a refused input exits 2, an unknown job 4."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.dto.errors import DomainError
    from mewdex.library.scopes import default_scope
    from mewdex.schedules.service import Viewer

    _prepare()
    try:
        with get_sessionmaker().begin() as session:
            return fn(session, Viewer(default_scope(), all_scopes), *args, **kwargs)
    except DomainError as exc:
        err.print(f"[red]error:[/red] {exc.code}: {exc.message}")
        raise typer.Exit(exit_for(exc.code, ExitCode.USAGE)) from None


def _resolve(session, viewer, job_id: str):
    """A job by its id or an unambiguous prefix of it (8+ characters)."""
    from mewdex.schedules import service as schedules
    from mewdex.schedules.service import ScheduleError

    if len(job_id) >= 36:
        return schedules.get(session, viewer, job_id)
    matches = [
        j for j in schedules.list_jobs(session, viewer, limit=10_000) if str(j.job_id).startswith(job_id.lower())
    ]
    if len(job_id) < 8 or len(matches) != 1:
        raise ScheduleError("not_found", f"no single schedule with id {job_id!r} (give 8+ characters of its id)")
    return matches[0]


def _job_dict(job) -> dict[str, Any]:
    from mewdex.schedules import service as schedules

    return {
        "id": str(job.job_id),
        "name": job.name,
        "prompt": job.prompt,
        "cron": job.cron,
        "tz": job.tz,
        "mode": job.mode,
        "notify": job.notify,
        "enabled": job.enabled,
        "next_run": schedules.run_view(job.next_run_at, job.tz),
        "last_status": job.last_status,
        "last_error": job.last_error,
        "run_count": job.run_count,
        "disabled_reason": job.disabled_reason,
    }


def _print_job(job: dict[str, Any]) -> None:
    state = "enabled" if job["enabled"] else f"disabled ({job['disabled_reason'] or 'paused'})"
    console.print(f"[bold]{job['name']}[/bold]  {job['id']}  {state}")
    console.print(f"  {job['cron']}  {job['tz']}  mode {job['mode']}  prompt: {job['prompt']}")


def schedule_add(
    name: Annotated[str, typer.Argument(help="A name for the job, e.g. 上班.")],
    cron_expr: Annotated[str, typer.Option("--cron", help='5-field cron expression, e.g. "0 9 * * 1-5".')],
    prompt: Annotated[str, typer.Option(help="What meme to send: the assistant's query, e.g. 上班.")],
    tz: Annotated[str, typer.Option(help="IANA time zone.")] = "Asia/Shanghai",
    mode: Annotated[str, typer.Option(help="isolated (a conversation per run) or persistent (one).")] = "isolated",
    webhook: Annotated[str | None, typer.Option(help="Deliver to this webhook connector (definition id) too.")] = None,
    channel: Annotated[str | None, typer.Option(help="Deliver to your binding of this channel, e.g. telegram.")] = None,
    expires: Annotated[str | None, typer.Option(help="End the job at this instant (ISO with offset).")] = None,
    max_runs: Annotated[int | None, typer.Option(min=1, help="End the job after this many runs.")] = None,
    timeout: Annotated[int, typer.Option(min=0, max=3600, help="Seconds a run may take (0: no limit).")] = 0,
    cost_cap: Annotated[float | None, typer.Option(help="End the job when its runs cost this much (CNY).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Add a cron job that sends a meme, and show its next five runs."""
    from mewdex.schedules import service as schedules
    from mewdex.schedules.service import ScheduleError

    if webhook and channel:
        err.print("[red]error:[/red] give --webhook or --channel, not both")
        raise typer.Exit(ExitCode.USAGE)
    notify = {"type": "webhook", "definition_id": webhook} if webhook else None
    notify = {"type": "channel", "channel": channel} if channel else notify
    try:
        expires_at = datetime.fromisoformat(expires.replace("Z", "+00:00")) if expires else None
    except ValueError:
        err.print(f"[red]error:[/red] schedule_invalid: --expires is not an ISO instant: {expires!r}")
        raise typer.Exit(ExitCode.USAGE) from None
    values = {
        "name": name,
        "prompt": prompt,
        "cron": cron_expr,
        "tz": tz,
        "mode": mode,
        "notify": notify,
        "timeout_seconds": timeout,
        "expires_at": expires_at,
        "max_runs": max_runs,
        "cost_cap_cny": cost_cap,
    }
    job = _call(lambda s, v: _job_dict(schedules.create(s, v, values)))
    try:
        runs = schedules.next_runs(job["cron"], job["tz"], schedules.now(), 5)
    except ScheduleError:
        runs = []
    next_five = [schedules.run_view(r, job["tz"]) for r in runs]
    if as_json:
        print(json.dumps({**job, "next_runs": next_five}, ensure_ascii=False))
        return
    _print_job(job)
    console.print(schedules.explain(job["cron"]))
    for r in next_five:
        console.print(f"  next: {r['local_display']} {job['tz']} ({r['utc'][:16].replace('T', ' ')} UTC)")


def schedule_list(
    all_scopes: Annotated[bool, typer.Option("--all", help="Every owner's jobs (admin).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The cron jobs, newest first, with their next run and last outcome."""
    from mewdex.schedules import service as schedules

    items = _call(lambda s, v: [_job_dict(j) for j in schedules.list_jobs(s, v)], all_scopes=all_scopes)
    if as_json:
        print(json.dumps({"items": items}, ensure_ascii=False))
        return
    table = Table(title=f"{len(items)} schedules")
    for column in ("id", "name", "cron", "tz", "next run (local)", "state", "last", "runs"):
        table.add_column(column)
    for j in items:
        state = "enabled" if j["enabled"] else (j["disabled_reason"] or "paused")
        table.add_row(
            j["id"][:8],
            j["name"],
            j["cron"],
            j["tz"],
            j["next_run"]["local_display"],
            state,
            j["last_status"] or "",
            str(j["run_count"]),
        )
    console.print(table)


def schedule_runs(
    job_id: Annotated[str, typer.Argument(help="The job's id (or 8+ characters of it).")],
    limit: Annotated[int, typer.Option("-n", min=1, max=200, help="How many runs.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """A job's runs, the latest slot first (skipped slots too)."""
    from mewdex.schedules import service as schedules

    def runs(session, viewer):
        job = _resolve(session, viewer, job_id)
        return job.tz, [
            {
                "id": str(r.run_id),
                "slot": schedules.run_view(r.slot, job.tz),
                "status": r.status,
                "reason": r.reason,
                "coalesced": r.coalesced,
                "delivery_status": r.delivery_status,
                "error_code": r.error_code,
                "error": r.error,
                "meme_id": str(r.meme_id) if r.meme_id else None,
            }
            for r in schedules.runs(session, viewer, job.job_id, limit=limit)
        ]

    tz, items = _call(runs, all_scopes=True)
    if as_json:
        print(json.dumps({"items": items}, ensure_ascii=False))
        return
    table = Table(title=f"{len(items)} runs ({tz})")
    for column in ("slot (local)", "UTC", "status", "delivery", "detail"):
        table.add_column(column)
    for r in items:
        detail = r["reason"] or (f"{r['error_code']}: {r['error']}" if r["error_code"] else "")
        if r["coalesced"]:
            detail = f"coalesced {r['coalesced']} missed slots " + detail
        table.add_row(r["slot"]["local_display"], r["slot"]["utc"][:16], r["status"], r["delivery_status"], detail)
    console.print(table)


def _state_change(action: str, job_id: str) -> None:
    from mewdex.schedules import service as schedules

    fn = {"pause": schedules.pause, "resume": schedules.resume, "delete": schedules.delete}[action]
    job = _call(lambda s, v: _job_dict(fn(s, v, _resolve(s, v, job_id).job_id)), all_scopes=True)
    if action == "delete":
        console.print(f"deleted {job['name']} ({job['id']})")
        return
    _print_job(job)
    if job["enabled"]:
        console.print(f"  next: {job['next_run']['local_display']} {job['tz']} ({job['next_run']['utc'][:16]} UTC)")


def schedule_pause(job_id: Annotated[str, typer.Argument(help="The job's id (or 8+ characters of it).")]) -> None:
    """Pause a job (its queued run is skipped)."""
    _state_change("pause", job_id)


def schedule_resume(job_id: Annotated[str, typer.Argument(help="The job's id (or 8+ characters of it).")]) -> None:
    """Enable a job again (also one disabled by failures, expiry or its cost cap); the next run is after now."""
    _state_change("resume", job_id)


def schedule_delete(job_id: Annotated[str, typer.Argument(help="The job's id (or 8+ characters of it).")]) -> None:
    """Delete a job (its runs and conversations stay)."""
    _state_change("delete", job_id)
