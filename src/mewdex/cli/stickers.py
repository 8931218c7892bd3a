"""Sticker-set commands: ``stickers import NAME`` (a Telegram sticker set into a collection)."""

from __future__ import annotations

from typing import Annotated

import typer

from mewdex.cli.common import ExitCode, _prepare, console, err


def stickers_import(
    name: Annotated[str, typer.Argument(help="The set's name or its https://t.me/addstickers/NAME link.")],
    collection: Annotated[
        str | None, typer.Option("--collection", "-c", help="Into this collection (name or id); else a new one.")
    ] = None,
) -> None:
    """Import a Telegram sticker set into the default library's collection through the linked Telegram
    bot (the library must have a linked Telegram chat). Prints the collection and the counts."""
    from mewdex.channels.telegram import service as telegram
    from mewdex.db.engine import get_sessionmaker
    from mewdex.dto.errors import DomainError
    from mewdex.library.collections import find_by_name_or_id
    from mewdex.library.scopes import default_scope

    _prepare()
    sessions, scope = get_sessionmaker(), default_scope()
    try:
        collection_id = None
        if collection:
            with sessions.begin() as session:
                collection_id = find_by_name_or_id(session, scope, collection).id
        done = telegram.import_set(sessions, scope, name, collection_id)
    except DomainError as exc:
        err.print(f"[red]error:[/red] {exc.code}: {exc.message}")
        codes = {"not_found": ExitCode.NOT_FOUND, "sticker_set_not_found": ExitCode.NOT_FOUND}
        codes |= {"telegram_not_linked": ExitCode.CONFLICT, "channel_not_configured": ExitCode.CONFLICT}
        codes["channel_platform_error"] = ExitCode.UNAVAILABLE
        raise typer.Exit(codes.get(exc.code, ExitCode.USAGE)) from None
    console.print(
        f"{done['set']} → collection {done['collection_name']!r} ({done['collection_id']}): "
        f"{done['imported']} imported, {done['already_there']} already there, {done['failed']} failed"
    )
    if done["failed"]:
        raise typer.Exit(ExitCode.FAILED)
