"""Operations commands: ``backup``, ``restore``, ``doctor`` (README "Backups and upgrades")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from mewdex.cli.common import ExitCode, _logs_above, _prepare, _progress, _setup_logging, console, err


class _Bars:
    """:class:`mewdex.backups.service.Progress` on a rich progress display (one bar per phase)."""

    def __init__(self, progress) -> None:
        self.progress, self.task = progress, None

    def phase(self, name: str, total: int | None) -> None:
        self.close()
        self.task = self.progress.add_task(name, total=total)

    def advance(self, steps: int = 1) -> None:
        if self.task is not None:
            self.progress.advance(self.task, steps)

    def close(self) -> None:
        """Show the current phase as done."""
        if self.task is not None:
            bar = self.progress.tasks[-1]
            done = bar.total if bar.total is not None else max(bar.completed, 1)
            self.progress.update(self.task, total=done, completed=done)


def _run(fn, as_json: bool) -> dict[str, Any]:
    from mewdex.backups.service import BackupError

    try:
        if as_json:
            return fn(None)
        with _progress() as progress, _logs_above(progress):
            bars = _Bars(progress)
            result = fn(bars)
            bars.close()
            return result
    except BackupError as exc:
        if as_json:
            print(json.dumps({"error": {"code": exc.code, "message": exc.message}}, ensure_ascii=False))
        else:
            err.print(f"[red]error:[/red] {exc.code}: {exc.message}")
        raise typer.Exit(ExitCode.FAILED) from None


def backup(
    dest: Annotated[str, typer.Argument(help="A directory or s3://bucket/prefix (the S3 store's settings).")],
    keep: Annotated[
        int | None, typer.Option(min=1, help="Then keep only the newest KEEP snapshots (and the blobs they use).")
    ] = None,
    no_encrypt: Annotated[
        bool, typer.Option("--no-encrypt", help="Store the files unencrypted (the manifest is still MAC'd).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Back up the database, every blob it references, the key ring and the signing keys to DEST,
    encrypted with the backup key, while serve and workers keep running; a second backup to DEST
    copies only new blobs. The first backup without a configured key makes one and prints it once."""
    from rich.markup import escape

    from mewdex.backups.service import backup as run_backup
    from mewdex.backups.service import key_from_file, missing_message

    _setup_logging()
    _prepare()
    summary = _run(lambda bars: run_backup(dest, keep=keep, progress=bars, encrypt=not no_encrypt), as_json)
    summary.pop("copied_keys", None)
    if summary.get("key_generated"):
        made = Path(summary["key_generated"])
        err.print(
            f"new backup key (kept in {made}; shown this once):\n\n    {key_from_file(made).text()}\n\n"
            "Copy it somewhere safe, away from this machine (a password manager, paper): without it these "
            "backups cannot be restored. Restore with `mewdex restore SRC --key-file FILE`.",
            soft_wrap=True,
            highlight=False,
            markup=False,
        )
    if as_json:
        print(json.dumps(summary, ensure_ascii=False))
        if summary["missing_blobs"]:
            raise typer.Exit(ExitCode.FAILED)
        return
    blobs = summary["blobs"]
    console.print(
        f"backup {summary['snapshot']} written to {summary['dest']}: {summary['counts'].get('memes', 0)} memes, "
        f"{blobs['total']} blobs ({blobs['copied']} copied, {blobs['reused']} already there), "
        f"schema {summary['schema_revision']}, {summary['seconds']:.1f} s"
    )
    if summary["removed_snapshots"]:
        console.print(f"removed older snapshots: {', '.join(summary['removed_snapshots'])}")
    if summary["missing_blobs"]:
        err.print(f"[yellow]incomplete:[/yellow] {escape(missing_message(summary['missing_blobs']))}", soft_wrap=True)
        raise typer.Exit(ExitCode.FAILED)


def restore(
    src: Annotated[str, typer.Argument(help="A backup destination (its newest snapshot) or one snapshot in it.")],
    force: Annotated[
        bool, typer.Option("--force", help="Replace what the target data dir / database / store holds.")
    ] = False,
    key_file: Annotated[
        Path | None, typer.Option("--key-file", help="The backup key (else the settings, or asked for).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Restore a backup into the data dir MEWDEX_DATA_DIR names (new or empty) or the empty external
    database and store the settings name, with its backup key (--key-file, MEWDEX_BACKUP_KEY_FILE,
    MEWDEX_BACKUP_PASSPHRASE, else asked for on a terminal); the whole backup is authenticated and
    checked first, migrations run when the backup is older. Stop serve and workers of the target first."""
    import sys

    from mewdex.backups.service import restore as run_restore
    from mewdex.db.embedded import EmbeddedDatabaseError

    def ask(what: str) -> str | None:
        return typer.prompt(what, hide_input=True) if sys.stdin.isatty() else None

    _setup_logging()
    try:
        summary = _run(
            lambda bars: run_restore(src, force=force, progress=bars, key_file=key_file, prompt=ask), as_json
        )
    except EmbeddedDatabaseError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(ExitCode.FAILED) from None
    _prepare()  # default scopes, storage recovery, search-model check: what serve would do next
    if as_json:
        print(json.dumps(summary, ensure_ascii=False))
        return
    console.print(
        f"restored {summary['snapshot']} from {summary['source']} (mewdex {summary['mewdex_version']}, schema "
        f"{summary['schema_revision']} → {summary['migrated_to']}): {summary['counts'].get('memes', 0)} memes, "
        f"{summary['blobs']['total']} blobs, {summary['seconds']:.1f} s"
    )
    if summary["missing_blobs"]:
        err.print(
            f"[yellow]warning:[/yellow] the backup lacked {len(summary['missing_blobs'])} file(s) its database "
            "references (they were missing when it was made): `mewdex thumbnails reconcile` remakes thumbnails"
        )


def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
) -> None:
    """Check what a self-hoster would ask: the database and its migrations, disk space, every sealed
    secret readable with the present key ring, the models load, the egress settings, recent backups.
    Each problem comes with the command that fixes it; exits 1 when there is one."""
    from mewdex.runtime.doctor import run_checks

    _setup_logging()
    checks = run_checks()
    problems = [c for c in checks if c["status"] == "problem"]
    if as_json:
        print(json.dumps({"ok": not problems, "checks": checks}, ensure_ascii=False))
    else:
        colours = {"ok": "green", "warning": "yellow", "problem": "red"}
        for check in checks:
            colour = colours[check["status"]]
            console.print(
                f"[{colour}]{check['status']:<8}[/{colour}] {check['name']}: {check['message']}", highlight=False
            )
            if check.get("fix"):
                console.print(f"{'':9}fix: {check['fix']}", highlight=False)
        console.print("no problems found" if not problems else f"{len(problems)} problem(s) found")
    if problems:
        raise typer.Exit(ExitCode.FAILED)
