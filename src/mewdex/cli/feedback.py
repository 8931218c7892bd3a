"""Feedback commands (issue 33): ``feedback list|export|clear|learning`` — what mewdex learned from an
account's choices, on the local database (``--user EMAIL``: that account's; default: the local library)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from mewdex.cli.common import ExitCode, _prepare, console, err

UserOption = Annotated[
    str | None, typer.Option("--user", help="The account's email (default: the local library of single-user mode).")
]


def _scope(session, email: str | None):
    """The scope of ``email``'s account, or the default scope; exits 4 for an unknown account."""
    from mewdex.db.models import ScopeContext
    from mewdex.library.scopes import default_scope
    from mewdex.platform.users import find_by_email

    if email is None:
        return default_scope()
    user = find_by_email(session, email)
    if user is None:
        err.print(f"[red]error:[/red] no account {email}")
        raise typer.Exit(ExitCode.NOT_FOUND)
    return ScopeContext(user.scope_id)


def feedback_list(
    user: UserOption = None,
    n: Annotated[int, typer.Option("-n", min=1, max=500, help="How many of the newest events.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON: the summary and the events.")] = False,
) -> None:
    """What was learned: counts per kind, whether learning is on, and the newest events."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.search import feedback

    _prepare()
    with get_sessionmaker().begin() as session:
        scope = _scope(session, user)
        summary = feedback.summary(session, scope)
        events = [feedback.event_dict(e, name) for e, name in feedback.list_entries(session, scope, limit=n)[0]]
    if as_json:
        print(json.dumps({"summary": summary, "events": events}, ensure_ascii=False, indent=2))
        return
    state = "on" if summary["learning_enabled"] else "off"
    kinds = ", ".join(f"{k} {v}" for k, v in summary["by_kind"].items() if v) or "none"
    console.print(f"learning {state} · {summary['events']} events for {summary['queries']} queries ({kinds})")
    if not events:
        return
    table = Table()
    for column in ("when", "kind", "query", "meme", "source", "id"):
        table.add_column(column, overflow="fold")
    for e in events:
        table.add_row(
            e["created_at"][:19].replace("T", " "), e["kind"], e["query"], e["display_name"], e["source"], e["id"]
        )
    console.print(table)


def feedback_export(
    user: UserOption = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write to this file (default: standard output).")
    ] = None,
) -> None:
    """Every event, oldest first, as JSON lines (one event per line)."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.search import feedback

    _prepare()
    count = 0
    out = output.open("w", encoding="utf-8") if output else sys.stdout
    try:
        with get_sessionmaker().begin() as session:
            scope = _scope(session, user)
            for event in feedback.export(session, scope):
                out.write(json.dumps(event, ensure_ascii=False) + "\n")
                count += 1
    finally:
        if output:
            out.close()
    if output:
        console.print(f"exported {count} events to {output}")


def feedback_clear(
    user: UserOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Forget everything learned (events and their query embeddings); searches stop using it at once."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.search import feedback

    _prepare()
    if not yes and not typer.confirm("Forget every choice learned for this library?", default=False):
        raise typer.Exit(ExitCode.FAILED)
    with get_sessionmaker().begin() as session:
        deleted = feedback.clear(session, _scope(session, user))
    console.print(f"forgot {deleted} events")


def feedback_learning(
    state: Annotated[str | None, typer.Argument(help="on | off (omit to show the current state).")] = None,
    user: UserOption = None,
) -> None:
    """Show, or turn on or off, learning from this account's choices (off: nothing is recorded and
    search uses none of it; what was learned stays until `mewdex feedback clear`)."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.search import feedback

    if state is not None and state not in ("on", "off"):
        err.print("[red]error:[/red] say on or off")
        raise typer.Exit(ExitCode.USAGE)
    _prepare()
    with get_sessionmaker().begin() as session:
        scope = _scope(session, user)
        enabled = (
            feedback.learning_enabled(session, scope.scope_id)
            if state is None
            else feedback.set_learning(session, scope, state == "on")
        )
    console.print(f"learning {'on' if enabled else 'off'}")
