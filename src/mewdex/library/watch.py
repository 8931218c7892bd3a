"""Watched folders (issue 42): ``MEWDEX_WATCH_DIRS`` makes ``mewdex serve`` import new and changed files
continuously; ``mewdex watch DIR`` does the same in the foreground.

An entry is ``DIR`` (the default library) or ``DIR=email`` (that account's library): :func:`resolve`.
Each file goes through the folder import's per-file path (:func:`mewdex.library.importer.import_item`:
validation, quota, duplicates, the processing job). Where a meme's file lies is kept on the meme
(``extensions.watch``: ``root``, ``path`` below it, ``size``, ``mtime_ns``, ``missing_since``):

* a new or changed file is imported; a file whose content the library holds already (a rename, a move,
  a copy) only moves the meme's recorded place: same content, same meme, never a second one;
* a meme whose recorded file is gone (deleted, or moved out of the folder), or now holds other content,
  is marked missing (``missing_since``), never deleted: its page says so, and it stays searchable;
  the file coming back clears the mark;
* a rescan at start (:func:`rescan`) catches up with what changed while nothing watched: files whose
  size and modification time match the record are not read again, the rest as above.

Hidden files and folders (a leading dot) are left alone, as the folder import does. Folder names stay
searchable (``provenance.relative_path``); watched folders make no collections. A folder assigned to a
disabled account imports nothing and marks nothing while it is disabled (:func:`active`, asked per file).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.db.models import Meme, ScopeContext, utcnow
from mewdex.dto.errors import DomainError
from mewdex.library.importer import ImportItem, import_item
from mewdex.library.memes import AddResult, known_sha256

log = logging.getLogger(__name__)

#: How long the watcher waits for more events before it acts on a burst (ms; a copy of many files is one).
DEBOUNCE_MS = 800
READ_BYTES = 1024 * 1024


class WatchError(DomainError):
    """A watched-folder entry that cannot be used: ``watch_dir_missing`` (no such folder),
    ``watch_account_unknown`` (no account with that email)."""


@dataclass(frozen=True)
class WatchedFolder:
    """A folder (absolute, resolved) and the library its files go into."""

    root: Path
    scope: ScopeContext
    entry: str


def parse_entry(entry: str) -> tuple[str, str | None]:
    """``"DIR"`` → ``(DIR, None)``; ``"DIR=email"`` → ``(DIR, email)``. Only a last ``=`` followed by an
    address with ``@`` names an account, so a folder name with ``=`` in it still works."""
    folder, sep, email = entry.strip().rpartition("=")
    if sep and "@" in email and folder.strip():
        return folder.strip(), email.strip()
    return entry.strip(), None


def resolve(session: Session, entries: Iterable[str]) -> list[WatchedFolder]:
    """The watched folders of ``entries`` (``MEWDEX_WATCH_DIRS`` or ``mewdex watch`` arguments).

    Raises:
        WatchError: ``watch_dir_missing``, ``watch_account_unknown``.
    """
    from mewdex.library.scopes import default_scope
    from mewdex.platform.users import find_by_email

    found: list[WatchedFolder] = []
    for entry in entries:
        folder, email = parse_entry(entry)
        root = Path(folder).expanduser().resolve()
        if not root.is_dir():
            raise WatchError("watch_dir_missing", f"watched folder {folder!r} is not a folder")
        if email is None:
            scope = default_scope()
        else:
            user = find_by_email(session, email)
            if user is None:
                raise WatchError("watch_account_unknown", f"watched folder {folder!r}: no account {email!r}")
            scope = ScopeContext(user.scope_id)
        found.append(WatchedFolder(root, scope, entry))
    return found


def _visible(root: Path, path: Path) -> bool:
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return False
    return bool(parts) and not any(p.startswith(".") for p in parts)


def _files_under(path: Path) -> list[Path]:
    out: list[Path] = []
    for folder, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out.extend(Path(folder) / name for name in sorted(files) if not name.startswith("."))
    return out


def _placed(session: Session, folder: WatchedFolder, path: str | None = None) -> list[Meme]:
    """The scope's memes whose recorded file lies in ``folder`` (at ``path`` below it, if given)."""
    watch = Meme.extensions["watch"]
    query = select(Meme).where(Meme.scope_id == folder.scope.scope_id, watch["root"].astext == str(folder.root))
    if path is not None:
        query = query.where(watch["path"].astext == path)
    return list(session.execute(query.order_by(Meme.id)).scalars())


def _locked(session: Session, folder: WatchedFolder, meme_id) -> Meme | None:
    from mewdex.library.listing import find

    return find(session, folder.scope, meme_id, lock=True, key_share=True)


def _set_watch(meme: Meme, watch: dict[str, Any] | None) -> None:
    extensions = dict(meme.extensions or {})
    if watch is None:
        extensions.pop("watch", None)
    else:
        extensions["watch"] = watch
    meme.extensions = extensions  # a new dict: the JSON column sees the change


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fileobj:
        while chunk := fileobj.read(READ_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def active(sessions: sessionmaker[Session], folder: WatchedFolder) -> bool:
    """Whether ``folder``'s library may take files now: not when its account is disabled (or gone):
    :func:`mewdex.platform.owners.owner_active`, asked again for every file and burst."""
    from mewdex.platform.owners import owner_active

    with sessions.begin() as session:
        return owner_active(session, folder.scope.scope_id)


def sync_file(
    sessions: sessionmaker[Session], store, folder: WatchedFolder, path: Path, batch_id: str | None = None
) -> AddResult | None:
    """Bring one file of ``folder`` into the library (module doc): ``duplicate`` when its content is known
    (the meme's place moves here), else the import's result; None when the file is gone or hidden, or
    the folder's account is disabled (:func:`active`: nothing is imported for it)."""
    if not _visible(folder.root, path) or not active(sessions, folder):
        return None
    try:
        info = path.stat()
        if not path.is_file():
            return None
        digest = _sha256(path)
    except OSError:
        return None  # gone meanwhile: its deletion event follows
    with sessions.begin() as session:
        meme_id = known_sha256(session, folder.scope, [digest]).get(digest)
    result = (
        AddResult("duplicate", meme_id=meme_id)
        if meme_id
        else import_item(sessions, store, folder.scope, ImportItem(path, folder.root), batch_id=batch_id)
    )
    if result.meme_id:
        _place(sessions, folder, result.meme_id, path, info)
    return result


def _place(sessions: sessionmaker[Session], folder: WatchedFolder, meme_id: str, path: Path, info) -> None:
    """Record that meme ``meme_id``'s file is ``path`` (clearing a missing mark); another meme recorded at
    the same path (the file's earlier content) is missing now."""
    relative = path.relative_to(folder.root).as_posix()
    with sessions.begin() as session:
        for other in _placed(session, folder, relative):
            if str(other.id) == meme_id or (locked := _locked(session, folder, other.id)) is None:
                continue
            watch = (locked.extensions or {}).get("watch") or {}
            if watch.get("path") == relative and not watch.get("missing_since"):
                _set_watch(locked, {**watch, "missing_since": utcnow().isoformat()})
        meme = _locked(session, folder, meme_id)
        if meme is not None:
            _set_watch(
                meme,
                {
                    "root": str(folder.root),
                    "path": relative,
                    "size": info.st_size,
                    "mtime_ns": info.st_mtime_ns,
                    "missing_since": None,
                },
            )


def mark_missing(sessions: sessionmaker[Session], folder: WatchedFolder, gone: Iterable[Path]) -> list[str]:
    """Mark missing each meme whose recorded file is one of ``gone`` or lies under one of them (a folder)
    and is really not there; returns their ids."""
    prefixes = []
    for path in gone:
        try:
            prefixes.append(path.relative_to(folder.root).as_posix())
        except ValueError:
            continue
    if not prefixes:
        return []

    def is_gone(watch: dict[str, Any]) -> bool:
        relative = str(watch.get("path") or "")
        return (
            not watch.get("missing_since")
            and any(relative == p or relative.startswith(p.rstrip("/") + "/") for p in prefixes)
            and not (folder.root / relative).is_file()  # renamed back, or only its folder's event
        )

    marked: list[str] = []
    with sessions.begin() as session:
        for candidate in _placed(session, folder):
            if not is_gone((candidate.extensions or {}).get("watch") or {}):
                continue
            meme = _locked(session, folder, candidate.id)
            watch = ((meme.extensions or {}).get("watch") or {}) if meme is not None else {}
            if meme is None or watch.get("root") != str(folder.root) or not is_gone(watch):
                continue
            _set_watch(meme, {**watch, "missing_since": utcnow().isoformat()})
            marked.append(str(meme.id))
    return marked


Reporter = Callable[[WatchedFolder, Path, AddResult], None]


def rescan(
    sessions: sessionmaker[Session], store, folder: WatchedFolder, on_result: Reporter | None = None
) -> dict[str, int]:
    """Catch up with ``folder`` (module doc): ``{"checked", "imported", "missing"}``. The files imported
    are one task batch, fed to the lanes as they drain (a large folder never floods the queue)."""
    from mewdex.queue import batches

    counts = {"checked": 0, "imported": 0, "missing": 0}
    if not active(sessions, folder):  # a disabled account's folder is left alone, files and records
        return counts
    with sessions.begin() as session:
        placed = sorted(  # where two memes are recorded at one path, the one not missing counts
            (m.extensions["watch"] for m in _placed(session, folder)), key=lambda w: not w.get("missing_since")
        )
        recorded = {str(w.get("path")): w for w in placed}
        batch_id = batches.create(session, folder.scope.scope_id).batch_id
    seen: set[str] = set()
    try:
        for path in _files_under(folder.root):
            relative = path.relative_to(folder.root).as_posix()
            seen.add(relative)
            counts["checked"] += 1
            known = recorded.get(relative)
            try:
                info = path.stat()
            except OSError:
                continue
            if (
                known
                and not known.get("missing_since")
                and known.get("size") == info.st_size
                and known.get("mtime_ns") == info.st_mtime_ns
            ):
                continue
            result = sync_file(sessions, store, folder, path, batch_id)
            if result is not None:
                counts["imported"] += result.status == "created"
                if on_result is not None:
                    on_result(folder, path, result)
    finally:
        with sessions.begin() as session:
            batches.seal(session, folder.scope.scope_id, batch_id)
    gone = [folder.root / r for r, w in recorded.items() if r not in seen and not w.get("missing_since")]
    counts["missing"] = len(mark_missing(sessions, folder, gone))
    return counts


def apply_changes(
    sessions: sessionmaker[Session],
    store,
    folder: WatchedFolder,
    changed: Iterable[Path],
    deleted: Iterable[Path],
    on_result: Reporter | None = None,
) -> list[str]:
    """One burst of events of ``folder``: the added or modified paths first (a folder moved in: each of its
    files), then the deleted ones (so a rename in one burst only moves the meme). Returns the memes marked
    missing (none for a disabled account's folder: :func:`active`)."""
    if not active(sessions, folder):
        return []
    for path in sorted(set(changed)):
        for file in _files_under(path) if path.is_dir() else [path]:
            result = sync_file(sessions, store, folder, file)
            if result is not None and on_result is not None:
                on_result(folder, file, result)
    return mark_missing(sessions, folder, [p for p in set(deleted) if _visible(folder.root, p)])


def watch(
    sessions: sessionmaker[Session],
    store,
    folders: list[WatchedFolder],
    stop: threading.Event,
    on_result: Reporter | None = None,
    on_missing: Callable[[WatchedFolder, list[str]], None] | None = None,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Rescan each folder, then import what changes until ``stop`` is set (within about a second). A burst
    that fails (the database away) is logged and the watching goes on; the next start's rescan catches up."""
    import watchfiles

    for folder in folders:
        try:
            counts = rescan(sessions, store, folder, on_result)
            log.info("watched folder %s: %s", folder.root, counts)
        except Exception:
            log.exception("watched folder %s: the rescan failed", folder.root)
    if on_ready is not None:
        on_ready()
    roots = {str(f.root): f for f in folders}
    for changes in watchfiles.watch(
        *roots, stop_event=stop, debounce=DEBOUNCE_MS, rust_timeout=1000, yield_on_timeout=False, raise_interrupt=False
    ):
        by_folder: dict[str, tuple[set[Path], set[Path]]] = {}
        for change, raw in changes:
            path = Path(raw)
            root = next((r for r in roots if path == Path(r) or Path(r) in path.parents), None)
            if root is None:
                continue
            changed, deleted = by_folder.setdefault(root, (set(), set()))
            (deleted if change == watchfiles.Change.deleted else changed).add(path)
        for root, (changed, deleted) in by_folder.items():
            try:
                missing = apply_changes(sessions, store, roots[root], changed, deleted, on_result)
                if missing and on_missing is not None:
                    on_missing(roots[root], missing)
            except Exception:
                log.exception("watched folder %s: changes not applied", root)


def start(sessions: sessionmaker[Session], store, folders: list[WatchedFolder]) -> Callable[[], None]:
    """Watch ``folders`` in a background thread (``mewdex serve``); returns the function that stops it."""
    stop = threading.Event()
    thread = threading.Thread(target=watch, args=(sessions, store, folders, stop), name="mewdex-watch", daemon=True)
    thread.start()

    def stopper() -> None:
        stop.set()
        thread.join(timeout=10)

    return stopper
