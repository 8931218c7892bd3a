"""``mewdex import`` into a server (issue 42): the files of a folder go into the signed-in account's
library on a running mewdex, through its HTTP API, with the local import's progress bar and summary
(:func:`mewdex.cli.common.print_import_summary`).

Per chunk of :data:`HASH_BATCH` files: each file is hashed here (SHA-256, read in 1 MiB pieces), the
server is asked which of the hashes its library holds (``POST /api/v1/memes/known``, the caller's
library only), and only the others are uploaded (``POST /api/v1/memes``, one file per request, with its
folder path as ``relative_path``: folder names name and find memes as in a local import). Known files
count as duplicates. Resumable without a state file: after an interruption the same command hashes
again and sends only what the server does not hold yet. A busy server (429 with ``Retry-After``) is
waited for. Folders of ``--min-collection`` images and ``--collection`` become collections there
(found by name or created), known files joining them too; collection ZIPs go to
``POST /api/v1/collections/import``.
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import typer

from mewdex.cli import remote
from mewdex.cli.common import ExitCode, _progress, console, emit_import_json, err, print_import_summary
from mewdex.library.importer import NOT_A_MEME_FILE, ImportItem, ImportSummary, folder_collections
from mewdex.library.memes import AddResult

#: Files hashed and asked about at once (``POST /api/v1/memes/known`` takes up to 1000).
HASH_BATCH = 200
READ_BYTES = 1024 * 1024
#: Memes added to a collection per request (the API takes up to 1000).
MEMBERS_BATCH = 500
_FAILED = {"insufficient_storage", "blob_store_unavailable"}


def run(
    server: remote.Server,
    token: str | None,
    items: list[ImportItem],
    packages: list[Path],
    collection: str | None,
    as_json: bool,
    min_collection: int,
    wait: bool,
) -> None:
    """Import ``items`` and ``packages`` into ``server``'s library of the token's account (module doc).
    Exits 1 when a file or ZIP was not stored, 3 when the server stops answering (what was sent is kept)."""
    try:
        with remote.Api(server, token) as api:
            failed = any([_package(api, path, collection, as_json) for path in packages])
            if items or not packages:
                _files(api, items, collection, as_json, min_collection)
            if wait:
                _wait(api)
            elif not as_json:
                console.print(f"processing on {server.url}; its library page shows progress", soft_wrap=True)
    except remote.Unreachable:
        err.print(
            f"[red]error:[/red] nothing answers at {server.url}; what was sent is kept: run the same import again "
            "to send the rest",
            soft_wrap=True,
        )
        raise typer.Exit(ExitCode.UNAVAILABLE) from None
    if failed:
        raise typer.Exit(ExitCode.FAILED)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fileobj:
        while chunk := fileobj.read(READ_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _readable(item: ImportItem) -> tuple[str | None, AddResult | None]:
    """``(sha256, None)`` for a file to ask about, ``(None, result)`` for one settled here: not a regular
    file or unreadable (``skipped``), not an image, clip or sticker by its name or bytes (``ignored``)."""
    import stat

    from mewdex.library.images import sniff_format
    from mewdex.library.names import MEDIA_SUFFIXES

    try:
        if not stat.S_ISREG(item.path.stat().st_mode):
            return None, AddResult("skipped", error="unsupported_media_type", message="not a regular file")
        with item.path.open("rb") as fileobj:
            head = fileobj.read(64)
        if sniff_format(head) is None and item.path.suffix.lower() not in MEDIA_SUFFIXES:
            return None, AddResult("ignored", message=NOT_A_MEME_FILE)
        return sha256_of(item.path), None
    except OSError as exc:
        return None, AddResult("skipped", error="unreadable", message=str(exc))


def sent_path(item: ImportItem) -> str:
    """The path the server keeps for a file (``provenance.relative_path``): its path below the import
    root, with the root's own folder name in front when the file lies directly in it (as a local import
    reads it, :func:`mewdex.library.names.import_path`)."""
    from mewdex.library.names import import_path

    return import_path({"source": "folder_import", "root": str(item.root), "relative_path": item.relative_path})


def _upload(api: remote.Api, item: ImportItem, on_wait) -> AddResult:
    """Send one file; the upload's answer as an :class:`AddResult` (a refusal of the whole request, such as
    401 or a missing collection, exits as :func:`remote.answer` says)."""
    from mewdex.library.names import MEDIA_SUFFIXES

    try:
        with item.path.open("rb") as fileobj:
            response = api.request(
                "POST",
                "/api/v1/memes",
                files={"files": (item.path.name, fileobj, "application/octet-stream")},
                data={"relative_path": sent_path(item)},
                on_wait=on_wait,
            )
    except OSError as exc:
        return AddResult("skipped", error="unreadable", message=str(exc))
    body: dict[str, Any] = {}
    try:
        body = response.json() if response.content else {}
    except ValueError:
        pass
    results = body.get("results") if isinstance(body, dict) else None
    if not results:
        error = (body.get("error") if isinstance(body, dict) else None) or {}
        if response.status_code == 413:  # over the server's file limit: that file only
            return AddResult("skipped", error=error.get("code", "upload_too_large"), message=error.get("message"))
        remote.answer(api.server, api.token, response)  # exits with its one line
        return AddResult("failed", error=f"HTTP {response.status_code}")
    result = results[0]
    meme = result.get("meme") or {}
    status = result.get("status")
    if status in ("created", "duplicate"):
        return AddResult(status, meme_id=meme.get("id"))
    error = result.get("error") or {}
    code = error.get("code") or "rejected"
    if code in _FAILED or status == "failed":
        return AddResult("failed", error=code, message=error.get("message"))
    if code == "unsupported_media_type" and item.path.suffix.lower() not in MEDIA_SUFFIXES:
        return AddResult("ignored", message=NOT_A_MEME_FILE)
    return AddResult("skipped", error=code, message=error.get("message"))


def _files(api: remote.Api, items: list[ImportItem], collection: str | None, as_json: bool, min_collection: int):
    summary = ImportSummary()
    skipped: list[tuple[Path, str, str, str]] = []
    by_folder = folder_collections(items, min_collection)
    members: dict[str, list[str]] = defaultdict(list)
    with nullcontext() if as_json else _progress() as progress:
        bar = progress.add_task("importing", total=len(items)) if progress else None

        def on_wait(seconds: float, code: str) -> None:
            if progress is not None and bar is not None:
                progress.update(bar, description=f"importing (the server is busy: {code}, waiting {seconds:g} s)")

        def report(item: ImportItem, result: AddResult) -> None:
            summary.count(result)
            if result.meme_id:
                for name in (by_folder.get(item.path.parent), collection):
                    if name:
                        members[name].append(result.meme_id)
            if as_json:
                emit_import_json(item, result)
            elif progress is not None and bar is not None:
                if result.status in ("skipped", "failed"):
                    skipped.append((item.path, result.status, result.error or "", result.message or ""))
                progress.update(bar, description="importing")
                progress.advance(bar)

        for start in range(0, len(items), HASH_BATCH):
            chunk = items[start : start + HASH_BATCH]
            asked: list[tuple[ImportItem, str]] = []
            for item in chunk:
                digest, settled = _readable(item)
                if settled is not None:
                    report(item, settled)
                else:
                    asked.append((item, str(digest)))
            known: dict[str, str] = {}
            if asked:
                answer = api.call("POST", "/api/v1/memes/known", json={"sha256": [d for _, d in asked]})
                known = {k["sha256"]: k["meme_id"] for k in answer["known"]}
            for item, digest in asked:
                if digest in known:
                    report(item, AddResult("duplicate", meme_id=known[digest]))
                else:
                    report(item, _upload(api, item, on_wait))
    _add_members(api, members)
    if as_json:
        if summary.failed:
            raise typer.Exit(ExitCode.FAILED)
        return
    print_import_summary(summary, skipped, remote=True)


def _add_members(api: remote.Api, members: dict[str, list[str]]) -> None:
    """Each collection (found by name, created when missing) gets its memes, in import order."""
    if not members:
        return
    ids = {c["name"]: c["id"] for c in api.call("GET", "/api/v1/collections")["collections"]}
    for name, meme_ids in members.items():
        if name not in ids:
            made = api.request("POST", "/api/v1/collections", json={"name": name})
            if made.status_code == 409:  # made meanwhile by another import
                ids = {c["name"]: c["id"] for c in api.call("GET", "/api/v1/collections")["collections"]}
            else:
                ids[name] = remote.answer(api.server, api.token, made)["id"]
        unique = list(dict.fromkeys(meme_ids))
        for start in range(0, len(unique), MEMBERS_BATCH):
            api.call(
                "POST",
                f"/api/v1/collections/{ids[name]}/items",
                json={"meme_ids": unique[start : start + MEMBERS_BATCH]},
            )


def _package(api: remote.Api, path: Path, name: str | None, as_json: bool) -> bool:
    """Send one collection ZIP (``POST /api/v1/collections/import``); True when it was refused."""
    import json

    with path.open("rb") as fileobj:
        response = api.request(
            "POST",
            "/api/v1/collections/import",
            files={"file": (path.name, fileobj, "application/zip")},
            data={"name": name} if name else {},
        )
    if response.status_code >= 400 and response.status_code not in (401, 403):
        error = (response.json() if response.content else {}).get("error") or {}
        err.print(f"[red]error:[/red] {path}: {error.get('code')}: {error.get('message')}")
        return True
    result = remote.answer(api.server, api.token, response)
    items = result.get("items") or []
    if as_json:
        for item in items:
            print(json.dumps({"path": str(path), **item}, ensure_ascii=False), flush=True)
        return False
    count: dict[str, int] = defaultdict(int)
    for item in items:
        count[item.get("status")] += 1
    console.print(
        f"{path.name} → collection [bold]{result['collection']['name']}[/bold]: "
        f"[green]{count['created']} created[/green] · {count['duplicate']} duplicates · "
        f"[yellow]{count['rejected']} rejected[/yellow]"
    )
    return False


def _wait(api: remote.Api) -> None:
    """``--wait``: until the server's library has no meme queued or running."""
    with _progress() as progress:
        bar = progress.add_task("processing memes (on the server)", total=None)
        while True:
            page = api.call("GET", "/api/v1/memes", params={"status": "pending", "limit": 1})
            if not page.get("items"):
                break
            time.sleep(1.0)
        progress.update(bar, total=1, completed=1)
    console.print("processing done")
