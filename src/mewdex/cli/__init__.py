"""The ``mewdex`` command line (typer), one module per command group: :mod:`.server` (serve, worker,
migrate, db), :mod:`.library` (import, export, rename, delete, status), :mod:`.search` (search,
similar, reindex), :mod:`.thumbnails`, :mod:`.users` (user), :mod:`.tasks`, :mod:`.ops` (backup,
restore, doctor), :mod:`.feedback`. The console script is ``mewdex = "mewdex.cli:app"``; commands are
registered here, in the order ``--help`` lists them.
Every command starts through :mod:`mewdex.runtime` (never the web layer, except ``serve``)."""

from __future__ import annotations

from typing import Annotated

import typer
import typer.core

from mewdex.cli import (
    assistant,
    channels,
    feedback,
    library,
    ops,
    providers,
    remote,
    schedules,
    search,
    server,
    stickers,
    tasks,
    thumbnails,
    users,
)
from mewdex.cli.common import EXIT_HELP, EXIT_HELP_LONG, ExitCode, console, err

# Help without type tags (<bool>, <list[Path]>): an option's name and help say what it takes; ranges stay.
for _param in (typer.core.TyperOption, typer.core.TyperArgument):
    _param.display_type_rich = lambda self, ctx: self.metavar or ""  # type: ignore[method-assign]  # typer has no option for it


class _Mewdex(typer.Typer):
    """The command group; a setting that cannot be used (:class:`mewdex.config.ConfigError`, raised by
    the first command that reads the settings) ends any command with one line per bad setting and exit
    status 2, never a traceback."""

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204 - click's signature
        try:
            return super().__call__(*args, **kwargs)
        except ValueError as exc:
            from rich.markup import escape

            from mewdex.config import ConfigError  # loaded already when it was raised

            if not isinstance(exc, ConfigError):
                raise
            for line in exc.lines:
                err.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
            raise SystemExit(ExitCode.USAGE) from None


app = _Mewdex(
    help="mewdex — a self-hosted meme library searched in natural language.",
    epilog=EXIT_HELP_LONG,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from mewdex.config import package_version

        console.print(f"mewdex {package_version()}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """mewdex — a self-hosted meme library searched in natural language."""


db_app = typer.Typer(help="The embedded database.", no_args_is_help=True)
app.add_typer(db_app, name="db")
thumbnails_app = typer.Typer(help="Thumbnails.", no_args_is_help=True)
app.add_typer(thumbnails_app, name="thumbnails")
user_app = typer.Typer(help="Accounts (acts on the local database as its admin).", no_args_is_help=True)
app.add_typer(user_app, name="user")
tasks_app = typer.Typer(help="Queue tasks: list, show, retry, cancel.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")
secrets_app = typer.Typer(help="Secrets at rest (provider API keys).", no_args_is_help=True)
app.add_typer(secrets_app, name="secrets")
connectors_app = typer.Typer(
    help="Connectors to outside systems (AI providers, reverse image search).", no_args_is_help=True
)
app.add_typer(connectors_app, name="connectors")
schedule_app = typer.Typer(
    help="Cron jobs that send memes: add, list, runs, pause, resume, delete.", no_args_is_help=True
)
app.add_typer(schedule_app, name="schedule")
feedback_app = typer.Typer(
    help="What mewdex learned from your choices: list, export, clear, learning on|off.", no_args_is_help=True
)
app.add_typer(feedback_app, name="feedback")
generations_app = typer.Typer(
    help="Search generations: the eval-gated switch, the remote embedding leg.", no_args_is_help=True
)
app.add_typer(generations_app, name="generations")
channels_app = typer.Typer(help="Chat channels: release an identity another account holds.", no_args_is_help=True)
app.add_typer(channels_app, name="channels")
stickers_app = typer.Typer(help="Telegram sticker sets: import one into a collection.", no_args_is_help=True)
app.add_typer(stickers_app, name="stickers")

app.command()(server.serve)
app.command()(server.worker)
app.command()(server.migrate)
app.command("import")(library.import_)
app.command("export")(library.export_)
app.command("watch")(library.watch_)
app.command()(search.search)
app.command()(remote.login)
app.command()(remote.logout)
app.command()(search.similar)
app.command()(library.rename)
app.command()(library.recaption)
app.command()(library.delete)
app.command("repair-names")(library.repair_names)
thumbnails_app.command("reconcile")(thumbnails.thumbnails_reconcile)
app.command("status")(library.status_)
app.command()(search.reindex)
app.command()(ops.backup)
app.command()(ops.restore)
app.command()(ops.doctor)
app.command()(assistant.mcp)
user_app.command("create")(users.user_create)
user_app.command("promote")(users.user_promote)
user_app.command("disable")(users.user_disable)
user_app.command("delete")(users.user_delete)
user_app.command("reset-password")(users.user_reset_password)
user_app.command("list")(users.user_list)
db_app.command("stop")(server.db_stop)
channels_app.command("release")(channels.channels_release)
stickers_app.command("import")(stickers.stickers_import)
tasks_app.command("list")(tasks.tasks_list)
tasks_app.command("show")(tasks.tasks_show)
tasks_app.command("retry")(tasks.tasks_retry)
tasks_app.command("cancel")(tasks.tasks_cancel)
app.command()(providers.reanalyze)
app.command("eval")(providers.eval_)
secrets_app.command("rotate")(providers.secrets_rotate)
secrets_app.command("status")(providers.secrets_status)
connectors_app.command("list")(providers.connectors_list)
connectors_app.command("create")(providers.connectors_create)
connectors_app.command("grant")(providers.connectors_grant)
connectors_app.command("revoke")(providers.connectors_revoke)
connectors_app.command("verify")(providers.connectors_verify)
connectors_app.command("audits")(providers.connectors_audits)
schedule_app.command("add")(schedules.schedule_add)
schedule_app.command("list")(schedules.schedule_list)
schedule_app.command("runs")(schedules.schedule_runs)
schedule_app.command("pause")(schedules.schedule_pause)
schedule_app.command("resume")(schedules.schedule_resume)
schedule_app.command("delete")(schedules.schedule_delete)
feedback_app.command("list")(feedback.feedback_list)
feedback_app.command("export")(feedback.feedback_export)
feedback_app.command("clear")(feedback.feedback_clear)
feedback_app.command("learning")(feedback.feedback_learning)
generations_app.command("activate")(providers.generations_activate)
generations_app.command("remote")(providers.generations_remote)


def _exit_status_in_every_help(group: typer.Typer) -> None:
    """Every command's and group's ``--help`` ends with what its exit status means (:data:`EXIT_HELP`)."""
    for command in group.registered_commands:
        command.epilog = command.epilog or EXIT_HELP
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            sub.typer_instance.info.epilog = EXIT_HELP
            _exit_status_in_every_help(sub.typer_instance)


_exit_status_in_every_help(app)

worker = server.worker  # the ``mewdex worker`` command

__all__ = ["app", "console", "err", "worker"]
