"""Channel commands: ``channels release``."""

from __future__ import annotations

from typing import Annotated

import typer

from mewdex.cli.common import ExitCode, _prepare, console, err


def channels_release(
    channel: Annotated[str, typer.Argument(help="The channel: onebot, telegram, wecom, clawbot, webhook, discord.")],
    identity: Annotated[str, typer.Argument(help="The chat identity: a QQ number, a Telegram user id, …")],
) -> None:
    """Release a chat identity from the account that holds it (its binding is revoked, its queued
    sends cancelled), so that the identity's real owner can link it to their own account."""
    from mewdex.channels import bindings
    from mewdex.db.engine import get_sessionmaker

    _prepare()
    with get_sessionmaker().begin() as session:
        row = bindings.find_by_identity(session, channel, identity)
        if row is None:
            err.print(f"[red]error:[/red] no active {channel} binding holds {identity}")
            raise typer.Exit(ExitCode.NOT_FOUND)
        bindings.revoke(session, row.scope_id, channel)
        console.print(f"{channel} {identity} released (it was linked to scope {row.scope_id})")
