"""Search commands: ``search``, ``similar``, ``reindex``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from mewdex.cli.common import ExitCode, _meme_uuid, _prepare, _progress, console, err, get_settings


def search(
    query: Annotated[str, typer.Argument(help="Natural-language query (Chinese or English).")],
    n: Annotated[int, typer.Option("-n", min=1, max=50, help="Number of results.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON response (full ids).")] = False,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="MEWDEX_SERVER",
            help=(
                "Search a mewdex server (URL). Default: the `mewdex serve` running on this data dir, if any, "
                "else the local database."
            ),
        ),
    ] = None,
) -> None:
    """Search the library: rank, name, a snippet of its text and a link per result. Asks the server
    running on this data dir when there is one (fast; links point at it), with the API token of
    `mewdex login` or MEWDEX_TOKEN; only when no server runs, the local database as its admin (the models
    load here). With --server URL a server elsewhere (its token from `mewdex login --server URL`,
    MEWDEX_TOKEN or a hidden prompt, never from the command line where other local users could read it)."""
    from mewdex.cli import remote
    from mewdex.dto.search import MAX_QUERY_CHARS

    query = query.strip()
    if not query or len(query) > MAX_QUERY_CHARS:
        err.print(f"[red]error:[/red] the query must be 1–{MAX_QUERY_CHARS} characters (it has {len(query)})")
        raise typer.Exit(ExitCode.USAGE)
    body = {"query": query, "n_results": n}
    if server:
        target = remote.named_server(server)
        token = remote.token_for(target) or (
            typer.prompt("API token (mdx_…)", hide_input=True, default="", show_default=False)
            if sys.stdin.isatty()
            else None
        )
        try:
            answer = remote.call(target, token or None, "POST", "/api/v1/search", json=body)
        except remote.Unreachable:
            err.print(f"[red]error:[/red] nothing answers at {target.url}")
            raise typer.Exit(ExitCode.UNAVAILABLE) from None
        _print_results(answer, as_json, target.url)
        return
    local = remote.local_server()
    if local is not None:  # the running server has the models loaded: no start-up here
        try:
            answer = remote.call(local, remote.token_for(local), "POST", "/api/v1/search", json=body)
        except remote.Unreachable:  # its record outlived it (killed): nothing runs, search here
            err.print(f"note: the server recorded at {local.url} does not answer; searching here")
        else:
            _print_results(answer, as_json, local.url)
            pending = remote.call(
                local, remote.token_for(local), "GET", "/api/v1/memes?status=pending&limit=1", quiet=True
            )
            _note_processing(bool(isinstance(pending, dict) and pending.get("items")))
            return
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline.status import pending_memes
    from mewdex.search import service

    _prepare()
    with get_sessionmaker().begin() as session:
        response = service.search(session, default_scope(), query, n)
        still = pending_memes(session, default_scope())
    settings = get_settings()
    _print_results(
        response.as_dict(), as_json, remote.connectable(f"http://{_url_host(settings.host)}:{settings.port}")
    )
    _note_processing(still > 0)


def _note_processing(pending: bool) -> None:
    """Right after an import, memes still being processed cannot be found yet: say so (on stderr, so
    ``--json`` output stays JSON), as the search page does."""
    if pending:
        err.print(
            "note: some memes are still being processed and cannot be found yet; `mewdex status` shows how far",
            soft_wrap=True,
        )


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _print_results(response: dict, as_json: bool, base_url: str | None = None) -> None:
    """A search response (``{"results", "took_ms"}``) as JSON (full ids), or as a table of rank, name,
    snippet and link (``base_url``/memes/<id>; the full id without a base URL) — never raw scores.

    A link is never cut or folded (a folded URL cannot be clicked or copied): its column is as wide
    as the longest link; on a terminal too narrow for that beside a readable name and text (80
    columns), the results are a list with each link whole on a line of its own. On a terminal that
    supports them, links are hyperlinks too."""
    if as_json:
        print(json.dumps(response, ensure_ascii=False, indent=2))
        return
    rows: list[tuple[str, str, str, str]] = []
    for n, r in enumerate(response["results"], 1):
        snippet = " ".join((r.get("snippet") or "").split())
        link = f"{base_url.rstrip('/')}/memes/{r['id']}" if base_url else r["id"]
        rows.append((str(n), r["display_name"], snippet, link))
    longest = max((len(row[3]) for row in rows), default=0)
    title = f"{len(rows)} results · {response['took_ms']:.0f} ms"
    if console.width < longest + _ROOM_BESIDE_A_LINK:  # too narrow for a link column: a list
        console.print(title, style="italic", highlight=False)
        for rank, name, snippet, link in rows:
            head = Text(f"{rank:>3}  ").append(name, style="bold")
            if snippet:
                head.append(f"  {snippet}", style="dim")
            head.truncate(console.width, overflow="ellipsis")
            console.print(head, no_wrap=True, highlight=False)
            console.print(Text("     ").append(_link(link)), soft_wrap=True, highlight=False)
        return
    table = Table(title=title)
    table.add_column("#", justify="right")
    table.add_column("name", overflow="fold")
    table.add_column("text", overflow="ellipsis", max_width=40, no_wrap=True)
    table.add_column("link", no_wrap=True, min_width=longest)
    for rank, name, snippet, link in rows:
        table.add_row(rank, name, snippet, _link(link))
    console.print(table)


#: Columns a table needs besides its link column: rank, a readable name and text, the borders.
_ROOM_BESIDE_A_LINK = 44


def _link(link: str) -> Text:
    """``link`` as text that is a terminal hyperlink when it is a URL."""
    return Text(link, style=f"link {link}" if link.startswith(("http://", "https://")) else "")


def similar(
    target: Annotated[str, typer.Argument(help="An image file (search by image) or a meme id (more like it).")],
    n: Annotated[int, typer.Option("-n", min=1, max=50, help="Number of results.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON response (full ids).")] = False,
) -> None:
    """Memes that look like an image file or like a meme of the library (a full id or 8+ characters of one).
    Asks the server running on this data dir when there is one (as `mewdex search` does), else loads the
    image model here."""
    from mewdex.cli import remote
    from mewdex.inference.errors import BackendUnavailable
    from mewdex.library.images import ImageError
    from mewdex.search.image_search import MemeNotEmbedded, similar_cli

    local = remote.local_server()
    if local is not None:
        path = Path(target).expanduser()
        token = remote.token_for(local)
        try:
            if path.is_file():
                answer = remote.call(
                    local,
                    token,
                    "POST",
                    "/api/v1/search/image",
                    files={"file": (path.name, path.read_bytes())},
                    data={"n_results": str(n)},
                )
            else:
                meme_id = target if _full_uuid(target) else str(_meme_uuid(target))
                answer = remote.call(local, token, "GET", f"/api/v1/memes/{meme_id}/similar", params={"n_results": n})
        except remote.Unreachable:
            err.print(f"note: the server recorded at {local.url} does not answer; searching here")
        else:
            _print_results(answer, as_json, local.url)
            return
    _prepare()
    if not Path(target).expanduser().is_file():
        target = str(_meme_uuid(target))  # a meme id, or a prefix of one
    try:
        response = similar_cli(target, n)
    except (ValueError, ImageError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(ExitCode.USAGE) from None
    except MemeNotEmbedded as exc:
        err.print(f"[red]error:[/red] {exc} (its visual stage has not run yet: `mewdex status`)")
        raise typer.Exit(ExitCode.CONFLICT) from None
    except BackendUnavailable as exc:
        err.print(f"[red]error:[/red] the image model is unavailable: {exc}")
        raise typer.Exit(ExitCode.UNAVAILABLE) from None
    _print_results(response, as_json)


def _full_uuid(value: str) -> bool:
    from uuid import UUID

    try:
        UUID(value)
    except ValueError:
        return False
    return True


def reindex(
    model: Annotated[
        str | None, typer.Option(help="Rebuild only the leg using this model (leg name, registered name or model id).")
    ] = None,
    scope: Annotated[
        str | None, typer.Option(help="Rebuild only this library (scope id); default: every library with memes.")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Process the builds here and wait until they are active.")
    ] = False,
) -> None:
    """Build new search generations of every library (every scope with memes) from the current meme
    contexts with the configured text models (MEWDEX_TEXT_MODELS); search keeps serving the active
    ones until each new one is complete and has passed the eval gate."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library import listing
    from mewdex.library.scopes import default_scope
    from mewdex.search import generations

    _prepare()
    sessions = get_sessionmaker()
    try:
        with sessions.begin() as session:
            scopes = [scope] if scope else (listing.library_scopes(session) or [default_scope().scope_id])
            built = [
                (s, g.id, g.model, g.dimensions)
                for s in scopes
                for g in generations.start_reindex(session, s, model=model)
            ]
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(ExitCode.USAGE) from None
    for scope_id, gid, name, dims in built:
        console.print(f"{scope_id}: building generation {gid} with {name} ({dims}-d)")
    if not wait:
        console.print("the builds run in `mewdex serve` or `mewdex worker`; progress: the admin page, `mewdex doctor`")
        return
    from mewdex.queue.worker import WorkerPool

    ours = {str(g[1]) for g in built}
    pool = WorkerPool(sessions, 1)
    pool.start()
    try:
        with _progress() as progress:
            bar = progress.add_task("reindexing", total=None)
            while True:
                with sessions.begin() as session:
                    running = [b for b in generations.builds(session) if b["id"] in ours and b["status"] == "building"]
                if not running or any(b["task_status"] == "failed" for b in running):
                    break
                progress.update(
                    bar, total=sum(b["memes_total"] for b in running), completed=sum(b["memes_done"] for b in running)
                )
                time.sleep(0.5)
    finally:
        pool.stop()
    with sessions.begin() as session:
        for scope_id in scopes:
            state = generations.status(session, scope_id)
            for leg, entry in state["legs"].items():
                active = entry["active"]
                building = entry["building"]
                console.print(
                    f"{scope_id} {leg}: active {active['model'] if active else '-'} ({active['memes'] if active else 0}"
                    " memes)"
                    + (
                        ""
                        if building is None
                        else f"; [red]not switched ({building['status']}): {building['task']}[/red]"
                    )
                )
