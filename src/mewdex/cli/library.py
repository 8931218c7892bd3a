"""Library commands: ``import``, ``export``, ``rename``, ``recaption``, ``delete``, ``status``."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from mewdex.cli.common import (
    ExitCode,
    _logs_above,
    _meme_uuid,
    _prepare,
    _progress,
    console,
    emit_import_json,
    err,
    exit_for,
    get_settings,
    print_import_summary,
    running_server,
    watched_folders,
)


def import_(
    paths: Annotated[list[Path], typer.Argument(help="Files, folders or collection ZIPs (.zip) to import.")],
    collection: Annotated[
        str | None,
        typer.Option(help="Also add every imported meme to this collection (for a .zip: the new collection's name)."),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Process the queue here and wait until all is done.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON result per file.")] = False,
    min_collection: Annotated[
        int,
        typer.Option(
            "--min-collection",
            min=1,
            help=(
                "A folder holding at least this many memes becomes a collection, named by its path "
                "(memegen/drake); folder names are searchable either way."
            ),
        ),
    ] = 3,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="MEWDEX_SERVER",
            help=(
                "Upload into your library on this mewdex server (URL; token from `mewdex login --server URL` or "
                "MEWDEX_TOKEN). Default: the `mewdex serve` of this data dir when you are logged in to it, "
                "else the local database."
            ),
        ),
    ] = None,
) -> None:
    """Import memes (images, GIFs, MP4/WebM clips, TGS stickers, AVIF, HEIC) and folders of them (folders
    of --min-collection memes become collections) and collection ZIPs (each becomes a new collection;
    see `mewdex export`). Logged in to a server (`mewdex
    login`, or MEWDEX_TOKEN with --server), the files go into your account's library there, through its
    API: their hashes first, so files the library holds are never sent (running it again after an
    interruption sends only the rest)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.collections import normalize_collection_name
    from mewdex.library.importer import collect
    from mewdex.library.scopes import default_scope

    if collection is not None:
        try:
            collection = normalize_collection_name(collection)
        except ValueError:
            err.print("[red]error:[/red] --collection needs a name with visible characters (≤ 100)")
            raise typer.Exit(ExitCode.USAGE) from None
    packages = [p for p in paths if p.suffix.lower() == ".zip" and p.is_file()]
    paths = [p for p in paths if p not in packages]
    try:
        items = collect(paths)
    except FileNotFoundError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(ExitCode.USAGE) from None
    target = _import_target(server)
    if target is not None:
        from mewdex.cli import import_remote

        import_remote.run(target[0], target[1], items, packages, collection, as_json, min_collection, wait)
        return
    _prepare()
    scope = default_scope()
    sessions = get_sessionmaker()
    pool = None
    if wait:  # workers process while the import goes on
        from mewdex.runtime import start_workers

        pool = start_workers(get_settings().workers or 1)
    try:
        failed = any([_import_package(sessions, scope, p, collection, as_json) for p in packages])
        if items or not packages:
            _import_items(sessions, scope, items, collection, as_json, min_collection)
        if pool is not None:
            _wait_for_processing(as_json)
        elif not as_json:
            _say_who_processes(sessions)
    except Exception as exc:
        from mewdex.db.supervisor import first_line, is_connection_lost

        if not is_connection_lost(exc):
            raise
        err.print(
            f"[red]error:[/red] the database became unavailable during the import ({first_line(exc)}); "
            "what was imported is kept: run the same import again to add the rest"
        )
        raise typer.Exit(ExitCode.UNAVAILABLE) from None
    finally:
        if pool is not None:
            pool.stop()
    if failed:
        raise typer.Exit(ExitCode.FAILED)


def watch_(
    folders: Annotated[
        list[str],
        typer.Argument(help="Folders to watch: DIR (the default library) or DIR=email (that account's library)."),
    ],
) -> None:
    """Import the folders' memes (images, clips, stickers), then every file added or changed in them, until Ctrl-C (what
    MEWDEX_WATCH_DIRS makes `mewdex serve` do). A renamed or moved file keeps its meme; a meme whose file
    is deleted is marked missing on its page, never deleted. A running `mewdex serve` or `mewdex worker`
    processes the new memes."""
    import threading

    from mewdex.db.engine import get_sessionmaker
    from mewdex.library import watch
    from mewdex.storage import blob_store

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for entry in folders:  # a typo fails at once, before the database starts
        if not Path(watch.parse_entry(entry)[0]).expanduser().is_dir():
            err.print(f"[red]error:[/red] mewdex watch: {watch.parse_entry(entry)[0]!r} is not a folder")
            raise typer.Exit(ExitCode.USAGE)
    _prepare()
    found = watched_folders(folders, "mewdex watch")
    sessions = get_sessionmaker()

    def said(folder, path, result) -> None:
        if result.status in ("created", "skipped", "failed"):
            code = f": {result.error}" if result.error else ""
            console.print(f"{result.status} {path}{code}", soft_wrap=True)

    def missing(folder, meme_ids) -> None:
        console.print(f"{len(meme_ids)} memes marked missing (their files left {folder.root})", soft_wrap=True)

    def ready() -> None:
        console.print("watching " + ", ".join(str(f.root) for f in found) + " (Ctrl-C stops)", soft_wrap=True)
        _say_who_processes(sessions)

    try:
        watch.watch(sessions, blob_store(), found, threading.Event(), said, missing, ready)
    except KeyboardInterrupt:
        pass


def _import_target(server: str | None):
    """``(server, token)`` when the import goes to a server: the one named with --server, or this data dir's
    running `mewdex serve` when a token for it is at hand (`mewdex login`, MEWDEX_TOKEN); None: the local
    database (no server runs, or no login for it: the single-user install)."""
    from mewdex.cli import remote

    if server:
        named = remote.named_server(server)
        return named, remote.token_for(named)
    local = remote.local_server(explain=False)
    if local is not None and (token := remote.token_for(local)):
        return local, token
    return None


def _import_package(sessions, scope, path: Path, name: str | None, as_json: bool) -> bool:
    """Import one collection ZIP with progress and a summary; True when the archive was refused."""
    from mewdex.library.packages import PackageError, import_package
    from mewdex.storage import blob_store

    rejected: list = []
    with _progress() as progress, path.open("rb") as fileobj:
        bar = progress.add_task(f"checking {path.name}", total=None)

        def planned(plan):
            progress.update(bar, description=f"importing {path.name}", total=len(plan.items), completed=0)

        def advance(item):
            if as_json:
                print(json.dumps({"path": str(path), **item.as_dict()}, ensure_ascii=False), flush=True)
            if item.status == "rejected":
                rejected.append(item)
            progress.advance(bar)

        try:
            result = import_package(
                sessions,
                blob_store(),
                scope,
                fileobj,
                source_name=path.name,
                name=name,
                on_plan=planned,
                on_item=advance,
            )
        except PackageError as exc:
            progress.stop()
            err.print(f"[red]error:[/red] {path}: {exc.code}: {exc.message}")
            if exc.details:
                err.print(json.dumps(exc.details, ensure_ascii=False)[:2000])
            return True
    if not as_json:
        console.print(
            f"{path.name} → collection [bold]{result.collection['name']}[/bold]: "
            f"[green]{result.count('created')} created[/green] · {result.count('duplicate')} duplicates · "
            f"[yellow]{result.count('rejected')} rejected[/yellow]"
        )
        for item in rejected:
            console.print(
                f"  rejected {item.name}: [yellow]{item.error['code']}[/yellow] {item.error.get('message') or ''}"
            )
    return False


def export_(
    collection: Annotated[str, typer.Argument(help="The collection's name or id.")],
    out: Annotated[Path, typer.Argument(help="The ZIP file to write (mewdex-collection v1).")],
) -> None:
    """Write a collection as a ZIP package (manifest + images) that `mewdex import` restores."""
    import os

    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.collections import CollectionError, find_by_name_or_id
    from mewdex.library.packages import PackageError, plan_export, stream_zip
    from mewdex.library.scopes import default_scope
    from mewdex.storage import blob_store

    _prepare()
    scope = default_scope()
    try:
        with get_sessionmaker().begin() as session:
            found = find_by_name_or_id(session, scope, collection)
            plan = plan_export(session, blob_store(), scope, found.id)
    except (CollectionError, PackageError) as exc:
        err.print(f"[red]error:[/red] {exc.message}")
        raise typer.Exit(exit_for(exc.code)) from None
    out = out.expanduser()
    partial = out.with_name(out.name + ".partial")
    total = len(plan.manifest) + sum(e.size for e in plan.entries)
    try:
        with _progress() as progress, partial.open("wb") as target:
            bar = progress.add_task(f"exporting {plan.collection_name}", total=total)
            for chunk in stream_zip(plan):
                target.write(chunk)
                progress.advance(bar, len(chunk))
            target.flush()
            os.fsync(target.fileno())
        partial.replace(out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        err.print(f"[red]error:[/red] cannot write {out}: {exc}")
        raise typer.Exit(ExitCode.FAILED) from None
    console.print(
        f"{len(plan.entries)} memes of [bold]{plan.collection_name}[/bold] → {out} ({out.stat().st_size / 1e6:.1f} MB)"
    )


def _say_who_processes(sessions) -> None:
    """After an import without --wait: say whether anything will process the queue, and how to start it."""
    from mewdex.runtime import queue_processors

    with sessions.begin() as session:
        processors = queue_processors(session)
    if processors:
        console.print(f"processing in the background ({', '.join(processors)}); `mewdex status` shows progress")
    else:
        err.print(
            "[yellow]nothing is processing the queue:[/yellow] the memes wait until you run "
            "`mewdex serve` (or `mewdex worker`), or import with --wait"
        )


def _import_items(sessions, scope, items, collection: str | None, as_json: bool, min_collection: int = 3) -> None:
    from mewdex.library.importer import import_paths
    from mewdex.storage import blob_store

    if as_json:
        if import_paths(
            sessions,
            blob_store(),
            scope,
            items,
            collection=collection,
            min_collection=min_collection,
            on_result=emit_import_json,
        ).failed:
            raise typer.Exit(
                ExitCode.FAILED
            )  # the failed ones said why (insufficient_storage); importing again resumes
        return
    skipped: list[tuple[Path, str, str, str]] = []
    with _progress() as progress:
        bar = progress.add_task("importing", total=len(items))

        def advance(item, result):
            if result.status in ("skipped", "failed"):
                skipped.append((item.path, result.status, result.error, result.message or ""))
            progress.advance(bar)

        summary = import_paths(
            sessions,
            blob_store(),
            scope,
            items,
            collection=collection,
            min_collection=min_collection,
            on_result=advance,
        )
    print_import_summary(summary, skipped)


def _wait_for_processing(quiet: bool) -> None:
    """Show processing progress, counted in the memes waiting when it began (and any added since),
    until no stage in the library is queued or running. Each poll reads only the active tasks, not
    the library. Worker log lines go above the bar (the bar's console is the log handler's while it
    runs)."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline.status import pending_memes, status

    sessions = get_sessionmaker()
    scope = default_scope()
    with _progress() as progress, _logs_above(progress):
        bar = progress.add_task("processing memes", total=None)
        total = left = 0
        while True:
            done = total - left
            with sessions.begin() as session:
                left = pending_memes(session, scope)
            total = max(total, done + left)  # memes added meanwhile (another import) join the total
            progress.update(bar, total=total, completed=total - left)
            if left == 0:
                break
            time.sleep(1.0)
    with sessions.begin() as session:
        counts = status(session, scope)
    failed = {s: c.get("failed", 0) for s, c in counts["stages"].items() if c.get("failed")}
    if not quiet:
        console.print("processing done" + (f"; [red]failed: {failed}[/red]" if failed else ""))


def rename(
    meme_id: Annotated[str, typer.Argument(help="The meme's id.")],
    name: Annotated[str, typer.Argument(help="The new display name (normalized under the name rules).")],
) -> None:
    """Rename a meme (a manual name: auto-naming never overwrites it)."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library import memes
    from mewdex.library.scopes import default_scope

    _prepare()
    try:
        revision = memes.rename(get_sessionmaker(), default_scope(), _meme_uuid(meme_id), name)
    except memes.MemeError as exc:
        err.print(f"[red]error:[/red] {exc.code}: {exc.message}")
        raise typer.Exit(exit_for(exc.code)) from None
    console.print(f"renamed (revision {revision})")


def recaption(
    meme_id: Annotated[str, typer.Argument(help="The meme's id (or 8+ first characters).")],
    text: Annotated[str, typer.Argument(help="The new caption (a line break: one line per text block).")],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Also write the image to this file.", dir_okay=False)
    ] = None,
    no_save: Annotated[bool, typer.Option("--no-save", help="Only write -o FILE; add nothing to the library.")] = False,
    color: Annotated[str | None, typer.Option(help="Text colour #rrggbb (default: as the old text).")] = None,
    outline: Annotated[str | None, typer.Option(help="Outline colour #rrggbb, or none (default: as the old).")] = None,
    font_size: Annotated[int | None, typer.Option(help="Font size in pixels (default: auto-fit).")] = None,
) -> None:
    """Re-caption a meme (改字): its text erased and TEXT drawn in its place, on every frame, as a new meme
    of the library (processed like an upload; the original is not changed). Prints the new meme's id."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline import recaption as service
    from mewdex.storage import blob_store

    if no_save and output is None:
        err.print("[red]error:[/red] --no-save needs -o FILE")
        raise typer.Exit(ExitCode.USAGE)
    _prepare()
    uid = _meme_uuid(meme_id)
    style = service.CaptionStyle(color=color, outline=outline, font_size=font_size)
    try:
        made = service.recaption(
            get_sessionmaker(), blob_store(), default_scope(), uid, text, style=style, save=not no_save, all_frames=True
        )
    except service.RecaptionError as exc:
        err.print(f"[red]error:[/red] {exc.code}: {exc.message}")
        raise typer.Exit(exit_for(exc.code, ExitCode.USAGE)) from None
    if output is not None and made.rendered is not None:
        output.write_bytes(made.rendered.data)
        console.print(f"wrote {output}")
    if made.meme_id is not None:
        console.print(f"{made.status}: {made.meme_id} (template {made.template_id})")


def delete(
    meme_id: Annotated[str, typer.Argument(help="The meme's id.")],
    forever: Annotated[
        bool, typer.Option("--forever", help="Delete it for good at once (else: to the trash).")
    ] = False,
) -> None:
    """Move a meme to the trash (restore it on the Trash page or with the API; purged after
    MEWDEX_TRASH_DAYS); ``--forever`` deletes it for good with its files (unless shared)."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library import memes, trash
    from mewdex.library.scopes import default_scope
    from mewdex.storage import blob_store

    _prepare()
    uid = _meme_uuid(meme_id)
    try:
        if forever:  # from the library or from the trash: purge takes what is in the trash
            try:
                trash.move_to_trash(get_sessionmaker(), default_scope(), uid)
            except memes.MemeError as exc:
                if exc.code != "not_found":  # not found in the library: perhaps in the trash already
                    raise
            trash.purge(get_sessionmaker(), blob_store(), default_scope(), uid)
        else:
            trash.move_to_trash(get_sessionmaker(), default_scope(), uid)
    except memes.MemeError as exc:
        err.print(f"[red]error:[/red] {exc.code}: {exc.message}")
        raise typer.Exit(exit_for(exc.code)) from None
    console.print("deleted for good" if forever else "moved to the trash")


def status_(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Counts of memes and of each processing stage by status."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline.status import status

    if running_server() is None:  # a running server has prepared the database already: read it directly
        _prepare()
    with get_sessionmaker().begin() as session:
        counts = status(session, default_scope())
    if as_json:
        print(json.dumps(counts))
        return
    table = Table(title=f"{counts['memes']} memes")
    standard = ["queued", "running", "succeeded", "failed"]
    keys = standard + sorted({k for c in counts["stages"].values() for k in c} - set(standard))
    table.add_column("stage")
    for key in keys:
        table.add_column(key, justify="right")
    for stage, c in counts["stages"].items():
        table.add_row(stage, *(str(c.get(k, 0)) for k in keys))
    console.print(table)


def repair_names(
    background: Annotated[
        bool,
        typer.Option(
            "--background",
            help="Queue the repair as a task (a running "
            "`mewdex serve`/`mewdex worker` does it) instead of doing it now.",
        ),
    ] = False,
    every_library: Annotated[
        bool, typer.Option("--all", help="Every account's library, not only the default one.")
    ] = False,
) -> None:
    """Rename memes named by a generic file stem (default, IMG_2034, a UUID…) from their folder or context
    title, and serial names from their caption; manual names are never touched."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library import listing
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline import name_repair

    _prepare()
    sessions = get_sessionmaker()
    if every_library:
        with sessions.begin() as session:
            scopes = listing.library_scopes(session)
    else:
        scopes = [default_scope().scope_id]
    for scope_id in scopes:
        label = f"{scope_id}: " if every_library else ""
        if background:
            with sessions.begin() as session:
                task = name_repair.submit_name_repair(session, scope_id)
                console.print(f"{label}queued task {task.id} ({name_repair.TASK_TYPE})")
            continue
        result = name_repair.repair_names(sessions, scope_id)
        console.print(f"{label}renamed {result['renamed']} of {result['checked']} memes")
