"""Folder import: walk paths, add every image file, report one result per file; bad files never stop it.

Resumable: a file already stored is recognised by its bytes (``duplicate``), so importing the same
paths again after an interruption (a full disk, a lost database, a kill) adds only what is missing.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from mewdex.config import get_settings
from mewdex.db.models import ScopeContext
from mewdex.library.collections import normalize_collection_name
from mewdex.library.memes import AddResult, add_image
from mewdex.library.names import MEDIA_SUFFIXES, is_generic_stem

# Why a file of a folder import is ``ignored``: neither its bytes nor its name say it is a meme (notes.txt)
NOT_A_MEME_FILE = "not an image, clip or sticker file"


@dataclass(frozen=True)
class ImportItem:
    path: Path
    root: Path

    @property
    def relative_path(self) -> str:
        return self.path.relative_to(self.root).as_posix() if self.path != self.root else self.path.name

    @property
    def folder(self) -> str | None:
        """The file's own folder name (it names memes with generic stems): also the import root's own name
        for a file directly in it, as when its parent folder is imported."""
        return self.path.parent.name or None

    @property
    def folder_parts(self) -> tuple[str, ...]:
        """The folders between the import root and the file (``("memegen", "images", "drake")``)."""
        if self.path == self.root:
            return ()
        return self.path.parent.relative_to(self.root).parts


@dataclass
class ImportSummary:
    created: int = 0
    duplicates: int = 0
    skipped: int = 0
    failed: int = 0  # not stored (disk full): importing the same files again adds them
    ignored: int = 0  # not image files (by name and bytes)
    reasons: Counter = field(default_factory=Counter)
    meme_ids: list[str] = field(default_factory=list)
    batch_id: str | None = None  # the task batch the imported memes' processing runs in

    def count(self, result: AddResult) -> None:
        if result.status == "created":
            self.created += 1
        elif result.status == "duplicate":
            self.duplicates += 1
        elif result.status == "failed":
            self.failed += 1
            self.reasons[result.error] += 1
        elif result.status == "ignored":
            self.ignored += 1
        else:
            self.skipped += 1
            self.reasons[result.error] += 1
        if result.meme_id:
            self.meme_ids.append(result.meme_id)


def collect(paths: list[Path]) -> list[ImportItem]:
    """Every regular, non-hidden file under ``paths`` (files given directly count too), sorted per root."""
    items: list[ImportItem] = []
    for path in paths:
        path = path.expanduser().resolve()
        if path.is_file():
            items.append(ImportItem(path, path.parent))
        elif path.is_dir():
            items.extend(ImportItem(p, path) for p in _walk(path))
        else:
            raise FileNotFoundError(f"no such file or folder: {path}")
    return items


def _walk(root: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                yield Path(folder) / name


def import_item(
    sessions: sessionmaker[Session],
    store,
    scope: ScopeContext,
    item: ImportItem,
    collection: str | None = None,
    batch_id: str | None = None,
    folder_collection: str | None = None,
) -> AddResult:
    """Import one file (its processing in task batch ``batch_id``, if given) into ``collection`` and
    ``folder_collection`` (see :func:`folder_collections`); I/O errors and oversized files come back as
    ``skipped`` results."""
    limit = get_settings().max_upload_bytes
    try:
        info = item.path.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO or device would block or never end
            return AddResult("skipped", error="unsupported_media_type", message="not a regular file")
        if info.st_size > limit:
            return AddResult("skipped", error="image_too_large", message=f"file is over {limit} bytes")
        data = item.path.read_bytes()
    except OSError as exc:
        return AddResult("skipped", error="unreadable", message=str(exc))
    names = [n for n in (folder_collection, collection) if n]
    result = add_image(
        sessions,
        store,
        scope,
        data,
        filename=item.path.name,
        provenance={"source": "folder_import", "root": str(item.root), "relative_path": item.relative_path},
        collection_names=names,
        batch_id=batch_id,
        folder=item.folder,
    )
    if (
        result.status == "skipped"
        and result.error == "unsupported_media_type"
        and item.path.suffix.lower() not in MEDIA_SUFFIXES
    ):
        return AddResult("ignored", message=NOT_A_MEME_FILE)
    return result


#: Folder import makes a collection of a folder holding at least this many images (``--min-collection``).
DEFAULT_MIN_COLLECTION = 3


def collection_name_for(parts: tuple[str, ...]) -> str | None:
    """The collection name of a folder path below the import root: its non-generic folder names joined
    by ``/`` (``memegen/images/drake`` → ``memegen/drake``); None when nothing meaningful is left."""
    kept = [p for p in parts if not is_generic_stem(p)]
    if not kept:
        return None
    try:
        return normalize_collection_name("/".join(kept))
    except ValueError:
        return None


def folder_collections(items: list[ImportItem], min_collection: int = DEFAULT_MIN_COLLECTION) -> dict[Path, str]:
    """Which folders of an import become collections: ``{folder: collection name}`` for every folder that
    directly holds at least ``min_collection`` image files (by extension), named by
    :func:`collection_name_for`. Folder names stay searchable for every meme either way (the analysis
    reads them from the meme's ``provenance.relative_path``)."""
    images = Counter(
        item.path.parent for item in items if item.folder_parts and item.path.suffix.lower() in MEDIA_SUFFIXES
    )
    found: dict[Path, str] = {}
    for item in items:
        folder = item.path.parent
        if folder in found or images[folder] < max(1, min_collection):
            continue
        if (name := collection_name_for(item.folder_parts)) is not None:
            found[folder] = name
    return found


def import_paths(
    sessions: sessionmaker[Session],
    store,
    scope: ScopeContext,
    items: list[ImportItem],
    *,
    collection: str | None = None,
    min_collection: int = DEFAULT_MIN_COLLECTION,
    on_result: Callable[[ImportItem, AddResult], None] | None = None,
) -> ImportSummary:
    """Import ``items`` in order, calling ``on_result`` after each; returns the summary.

    A folder becomes a collection when it holds ``min_collection`` images (:func:`folder_collections`).
    The processing of the created memes is one task batch (``summary.batch_id``): their first tasks are
    parked and fed to the lanes as they drain (queue.batches), so a bulk import never fills the queue.
    """
    from mewdex.queue import batches

    summary = ImportSummary()
    by_folder = folder_collections(items, min_collection)
    with sessions.begin() as session:
        summary.batch_id = batches.create(session, scope.scope_id).batch_id
    try:
        for item in items:
            result = import_item(
                sessions, store, scope, item, collection, summary.batch_id, by_folder.get(item.path.parent)
            )
            summary.count(result)
            if on_result is not None:
                on_result(item, result)
    finally:
        with sessions.begin() as session:
            batches.seal(session, scope.scope_id, summary.batch_id)
    return summary
