"""What every command group shares: the consoles, logging, start-up through :mod:`mewdex.runtime`,
progress bars, meme ids and calls to a remote server."""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from mewdex.config import Settings

console = Console()
# Errors are never broken into lines by the console (the terminal wraps them): a path or a command in
# one stays whole, to copy or to grep.
err = Console(stderr=True, soft_wrap=True)


class ExitCode(IntEnum):
    """What a command's exit status means, the same in every command (:data:`EXIT_MEANINGS`, which
    ``mewdex --help`` and the README's "Exit status" list). Every command ends through one of these."""

    OK = 0
    FAILED = 1
    USAGE = 2
    CONFLICT = 3
    NOT_FOUND = 4
    UNAVAILABLE = 5


EXIT_MEANINGS = {
    ExitCode.OK: "done",
    ExitCode.FAILED: "it ran and did not succeed: an error came back, a check found problems, some files "
    "were not stored, a confirmation was declined",
    ExitCode.USAGE: "a bad argument, option or setting; nothing was done",
    ExitCode.CONFLICT: "refused by the library's state as it is now: changed meanwhile, in use, not ready, not allowed",
    ExitCode.NOT_FOUND: "what it names does not exist (a meme, task, account, schedule)",
    ExitCode.UNAVAILABLE: "something it needs does not answer or is full (a server, the database, a model, "
    "the queue, the disk): try again later",
}
#: The line under every command's ``--help``.
EXIT_HELP = "Exit status: " + ", ".join(f"{c.value} {c.name.lower().replace('_', ' ')}" for c in ExitCode) + "."
#: Under ``mewdex --help``: each status with its meaning (paragraphs: rich help joins single lines).
EXIT_HELP_LONG = "Exit status, the same in every command:\n\n" + "\n\n".join(
    f"{c.value} {c.name.lower().replace('_', ' ')}: {EXIT_MEANINGS[c]}" for c in ExitCode
)

_CONFLICT_CODES = {
    "last_admin",
    "too_many_tokens",
    "user_disabled",
    "account_disabled",
    "signup_failed",
    "signup_disabled",
    "grant_not_acquired",
    "task_not_retryable",
    "task_not_cancellable",
    "schedule_limit_reached",
}
_USAGE_CODES = {"ambiguous_id", "invalid_request", "invalid_cursor", "invalid_id", "cron_invalid"}
_UNAVAILABLE_CODES = {"queue_full", "rate_limited", "insufficient_storage"}


def exit_for(code: str, default: ExitCode = ExitCode.FAILED) -> ExitCode:
    """The exit status of a domain error ``code`` (``not_found`` / ``*_not_found`` → NOT_FOUND,
    ``*_conflict`` / ``*_taken`` / ``*_in_progress`` / ``*_not_ready`` and refusals by state →
    CONFLICT, ``*_invalid`` / ``*_required`` / ``*_too_long`` → USAGE, ``*_unavailable`` / full → UNAVAILABLE);
    ``default`` for any other."""
    if code == "not_found" or code.endswith("_not_found"):
        return ExitCode.NOT_FOUND
    if code in _CONFLICT_CODES or code.endswith(("_conflict", "_taken", "_in_progress", "_not_ready", "_busy")):
        return ExitCode.CONFLICT
    if code in _USAGE_CODES or code.endswith(("_invalid", "_required", "_too_long", "_too_short")):
        return ExitCode.USAGE
    if code in _UNAVAILABLE_CODES or code.endswith("_unavailable"):
        return ExitCode.UNAVAILABLE
    return default


def exit_for_status(status: int) -> ExitCode:
    """The exit status of a server's HTTP error ``status`` (404 → NOT_FOUND, 409/412 → CONFLICT,
    400/413/415/422 → USAGE, 429/502/503/504 → UNAVAILABLE, any other → FAILED)."""
    if status == 404:
        return ExitCode.NOT_FOUND
    if status in (409, 412, 423):
        return ExitCode.CONFLICT
    if status in (400, 413, 415, 422):
        return ExitCode.USAGE
    if status in (429, 502, 503, 504):
        return ExitCode.UNAVAILABLE
    return ExitCode.FAILED


def get_settings() -> Settings:
    """:func:`mewdex.config.get_settings`, imported on first use (pydantic-settings costs a few hundred
    ms: ``mewdex --help`` and ``--version`` never load it)."""
    from mewdex.config import get_settings as settings

    return settings()


def _setup_logging() -> None:
    from mewdex.runtime import setup_logging

    setup_logging()


def _prepare():
    """Start (or reach) the database and bring it to the current schema; a command that finds no library
    where ``MEWDEX_DATA_DIR`` points says it made a new, empty one there (run from another folder, the
    relative default ``./.mewdex`` is another library)."""
    from mewdex.config import get_settings
    from mewdex.db.embedded import EmbeddedDatabaseError
    from mewdex.runtime import prepare_database

    settings = get_settings()
    new_library = settings.database_url is None and not settings.pgdata.exists()
    try:
        prepare_database()
    except EmbeddedDatabaseError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(ExitCode.FAILED) from None
    if new_library:
        err.print(
            f"[yellow]note:[/yellow] no library was at {settings.data_dir.resolve()}: made a new, empty one there "
            "(MEWDEX_DATA_DIR says where mewdex keeps its data; by default ./.mewdex of the folder you run it in)",
            soft_wrap=True,
        )


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=False,
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
    """The meme of the default scope that ``meme_id`` names: a full id or a prefix of 8+ characters
    (:func:`mewdex.library.memes.resolve_meme_id`); exits 1 with the reason otherwise."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.memes import MemeError, resolve_meme_id
    from mewdex.library.scopes import default_scope

    try:
        with get_sessionmaker().begin() as session:
            return resolve_meme_id(session, default_scope(), meme_id)
    except MemeError as exc:
        err.print(f"[red]error:[/red] {exc.code}: {exc.message}")
        raise typer.Exit(exit_for(exc.code)) from None


SERVER_FILE = "serve.json"  # in the data dir while `mewdex serve` runs: {"url", "pid"}, 0600, held open by it


def announce_server(url: str) -> Callable[[], None]:
    """Record that this process serves ``url`` on the data dir (:data:`SERVER_FILE`, readable by this
    user only) and keep the record open while it serves: holding it open is part of the proof that a
    client checks before it sends a credential (:func:`mewdex.cli.remote.serve_record_problem`). Returns
    the function that closes and removes the record again (only while it is still this process's)."""
    import json
    import os

    path = get_settings().data_dir / SERVER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{SERVER_FILE}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"url": url, "pid": os.getpid()}, out)
    os.replace(temporary, path)
    held = open(path, "rb")  # noqa: SIM115 - held until remove(): not inherited by child processes

    def remove() -> None:
        try:
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()
        except (OSError, ValueError):
            pass
        held.close()

    return remove


SERVER_RECORD_BYTES = 4096  # a record is a URL and a pid; anything longer is not one


def read_server_record(path: Path) -> dict[str, Any]:
    """The JSON object in the :data:`SERVER_FILE` at ``path``, read as untrusted input (the data dir may be
    a folder someone else wrote): the file itself, never what a symbolic link names; a regular file
    only (a named pipe would block the reader); at most :data:`SERVER_RECORD_BYTES`. Raises
    FileNotFoundError when there is none, ValueError (or OSError) when it is not such a record."""
    import json
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise FileNotFoundError(exc.errno, exc.strerror, str(path)) from None
        raise ValueError(f"{path} cannot be opened as a record ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as record:
        if not stat.S_ISREG(os.fstat(record.fileno()).st_mode):
            raise ValueError(f"{path} is not a regular file")
        data = record.read(SERVER_RECORD_BYTES + 1)
    if len(data) > SERVER_RECORD_BYTES:
        raise ValueError(f"{path} is longer than a record")
    found = json.loads(data)
    if not isinstance(found, dict):
        raise ValueError(f"{path} holds no JSON object")
    return found


def running_server() -> str | None:
    """The URL of a `mewdex serve` running on this data dir (its :data:`SERVER_FILE`, whose process is
    alive), or None: commands that can ask it (search) do, instead of starting the models themselves."""
    import os

    try:
        record = read_server_record(get_settings().data_dir / SERVER_FILE)
        os.kill(int(record["pid"]), 0)
        return str(record["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def print_import_summary(summary, skipped: list[tuple[Path, str, str, str]], remote: bool = False) -> None:
    """The one summary of a folder import, local or into a server: counts, then each file skipped or
    failed with its code; exits 1 when some were not stored (running the same import again adds them)."""
    console.print(
        f"[green]{summary.created} created[/green] · {summary.duplicates} duplicates · "
        f"[yellow]{summary.skipped} skipped[/yellow]"
        + (f" · {summary.ignored} ignored (not images, clips or stickers)" if summary.ignored else "")
        + (f" · [red]{summary.failed} failed[/red]" if summary.failed else "")
    )
    for path, status, code, message in skipped:
        console.print(f"  {status} {path}: [yellow]{code}[/yellow] {message}")
    if summary.failed:
        reason = "the server could not store them" if remote else "the disk is full"
        err.print(
            f"[red]error:[/red] {summary.failed} files were not stored ({reason}); "
            + ("" if remote else "free some space and ")
            + "run the same import again: files already stored are recognised and skipped"
        )
        raise typer.Exit(ExitCode.FAILED)


def emit_import_json(item, result) -> None:
    """``--json``: one line per file, local or remote."""
    print(
        json.dumps(
            {"path": str(item.path), "status": result.status, "meme_id": result.meme_id, "error": result.error},
            ensure_ascii=False,
        ),
        flush=True,
    )


def watched_folders(entries: list[str], source: str) -> list:
    """The watched folders of ``entries`` (:func:`mewdex.library.watch.resolve`); a bad one ends the command
    with one line naming ``source`` (the setting or the argument) and exit 2."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.watch import WatchError, resolve

    try:
        with get_sessionmaker().begin() as session:
            return resolve(session, entries)
    except WatchError as exc:
        err.print(f"[red]error:[/red] {source}: {exc.message}", soft_wrap=True)
        raise typer.Exit(ExitCode.USAGE) from None
