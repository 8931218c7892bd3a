"""The ``mewdex`` command line (typer), one module per command group: :mod:`.server` (serve, worker,
migrate, db), :mod:`.library` (import, export, rename, delete, status), :mod:`.search` (search,
similar, reindex), :mod:`.thumbnails`, :mod:`.users` (user), :mod:`.tasks`. The console script is
``mewdex = "mewdex.cli:app"``; commands are registered here, in the order ``--help`` lists them.
Every command starts through :mod:`mewdex.runtime` (never the web layer, except ``serve``)."""

from __future__ import annotations

import typer

from mewdex.cli import assistant, library, search, server, tasks, thumbnails, users
from mewdex.cli.common import console, err

app = typer.Typer(help="mewdex — a self-hosted meme library searched in natural language.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
db_app = typer.Typer(help="The embedded database.", no_args_is_help=True)
app.add_typer(db_app, name="db")
thumbnails_app = typer.Typer(help="Thumbnails.", no_args_is_help=True)
app.add_typer(thumbnails_app, name="thumbnails")
user_app = typer.Typer(help="Accounts (acts on the local database as its admin).", no_args_is_help=True)
app.add_typer(user_app, name="user")
tasks_app = typer.Typer(help="Queue tasks: list, show, retry, cancel.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")

app.command()(server.serve)
app.command()(server.worker)
app.command()(server.migrate)
app.command("import")(library.import_)
app.command("export")(library.export_)
app.command()(search.search)
app.command()(search.similar)
app.command()(library.rename)
app.command()(library.delete)
thumbnails_app.command("reconcile")(thumbnails.thumbnails_reconcile)
app.command("status")(library.status_)
app.command()(search.reindex)
app.command()(assistant.mcp)
user_app.command("create")(users.user_create)
user_app.command("promote")(users.user_promote)
user_app.command("disable")(users.user_disable)
user_app.command("reset-password")(users.user_reset_password)
user_app.command("list")(users.user_list)
db_app.command("stop")(server.db_stop)
tasks_app.command("list")(tasks.tasks_list)
tasks_app.command("show")(tasks.tasks_show)
tasks_app.command("retry")(tasks.tasks_retry)
tasks_app.command("cancel")(tasks.tasks_cancel)

worker = server.worker  # the ``mewdex worker`` command

__all__ = ["app", "console", "err", "worker"]
