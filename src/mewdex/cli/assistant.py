"""``mewdex mcp``: the MCP server over stdio (for Claude Desktop and other local MCP clients)."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Annotated

import typer

from mewdex.cli.common import ExitCode, _prepare, err


def mcp(
    token: Annotated[
        bool,
        typer.Option(
            "--token",
            help="Act as a personal API token's user, with that token's scopes (read/write); the "
            "token comes from MEWDEX_TOKEN or a hidden prompt, never the command line.",
        ),
    ] = False,
) -> None:
    """Serve mewdex's tools (search_memes, search_by_image, get_meme, list_collections, add_to_collection)
    over MCP on stdin/stdout: as the local library's owner, or with --token as a token's user."""
    from mewdex import mcp_server
    from mewdex.library.scopes import default_scope

    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the protocol only
        _prepare()
        if token:
            value = os.environ.get("MEWDEX_TOKEN") or (
                typer.prompt("API token (mdx_…)", hide_input=True, default="", show_default=False, err=True)
                if sys.stdin.isatty()
                else ""
            )
            caller = mcp_server.token_caller(value) if value else None
            if caller is None:
                err.print("[red]error:[/red] the API token is missing, revoked or expired")
                raise typer.Exit(ExitCode.USAGE)
        else:
            caller = mcp_server.Caller(default_scope(), frozenset({"read", "write"}))
    mcp_server.run_stdio(caller)
