"""``thumbnails reconcile``."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from mewdex.cli.common import _prepare, _progress, console, get_settings


def thumbnails_reconcile(
    force: Annotated[
        bool, typer.Option("--force", help="Rebuild every thumbnail, not only missing or stale ones.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Rebuild missing, stale or failed thumbnails."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.library.thumbnails import reconcile
    from mewdex.storage import blob_store

    _prepare()
    scope_id = default_scope().scope_id
    with _progress() as progress:
        bar = progress.add_task("thumbnails", total=None)
        report = reconcile(
            get_sessionmaker(),
            blob_store(),
            scope_id,
            max_pixels=get_settings().max_pixels,
            force=force,
            progress=lambda _meme, _outcome: progress.advance(bar),
        )
    if as_json:
        print(json.dumps(report.as_dict()))
    else:
        console.print(f"{report.checked} checked · {report.rebuilt} rebuilt · {report.failed} failed")
