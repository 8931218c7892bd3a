"""Export a collection as a ``mewdex-collection`` v1 ZIP, streamed (data descriptors, no
seeking, no temporary file)."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import BinaryIO
from urllib.parse import quote
from uuid import UUID

from sqlalchemy.orm import Session

from mewdex.db.models import ScopeContext
from mewdex.library import collections, listing
from mewdex.library.packages.zipformat import (
    FORMAT,
    IMAGES_DIR,
    MANIFEST,
    READ_CHUNK,
    VERSION,
    PackageError,
    safe_entry_stem,
    unique_entry_names,
)
from mewdex.library.scopes import storage_namespace


@dataclass(frozen=True)
class ExportEntry:
    file: str  # archive path, "images/<entry>"
    open_blob: Callable[[], BinaryIO]  # opens the blob for reading (the blob store's reader)
    display_name: str
    extension: str
    size: int
    sha256: str


@dataclass(frozen=True)
class ExportPlan:
    collection_name: str
    archive_name: str
    entries: list[ExportEntry]
    manifest: bytes


def plan_export(session: Session, store, scope: ScopeContext, collection_id: UUID) -> ExportPlan:
    """What an export of the collection will contain; raises CollectionError 404, PackageError 409
    ``blob_missing`` when a member's file is gone (checked before anything is streamed)."""
    collection = collections.find(session, scope, collection_id)
    memes = collections.members(session, scope, collection.id)
    return _plan(session, store, scope, collection.name, memes)


#: The most memes one selection ZIP holds (``POST /api/v1/memes/zip``), as many as a bulk tag edit.
MAX_SELECTION = 500


def plan_selection(session: Session, store, scope: ScopeContext, meme_ids: list[UUID]) -> ExportPlan:
    """A ZIP of the scope's live memes ``meme_ids`` (1–:data:`MAX_SELECTION`, duplicates once, in
    request order), the same ``mewdex-collection`` v1 layout as a collection's (so it imports as a
    collection named ``mewdex <date>``). Raises PackageError 404 ``not_found`` when any id is not one
    of the scope's live memes (``details.missing``; nothing is streamed), 422 ``too_many_items`` past
    the bound, 409 ``blob_missing``."""
    wanted = list(dict.fromkeys(meme_ids))
    if not wanted or len(wanted) > MAX_SELECTION:
        raise PackageError(
            422, "too_many_items", f"a selection ZIP holds 1 to {MAX_SELECTION} memes", {"limit": MAX_SELECTION}
        )
    found = listing.memes_by_id(session, scope, wanted)
    missing = [str(i) for i in wanted if i not in found]
    if missing:
        raise PackageError(404, "not_found", "some memes were not found", {"missing": missing})
    name = f"mewdex {datetime.now(UTC):%Y-%m-%d}"
    return _plan(session, store, scope, name, [found[i] for i in wanted])


def _plan(session: Session, store, scope: ScopeContext, name: str, memes: list) -> ExportPlan:
    namespace = storage_namespace(session, scope.scope_id)
    names = unique_entry_names([(m.display_name, m.extension) for m in memes])
    entries = []
    for meme, entry_name in zip(memes, names, strict=False):
        if not store.exists(namespace, meme.storage_key):
            raise PackageError(409, "blob_missing", f"the file of meme {meme.id} is missing", {"meme_id": str(meme.id)})
        opener = partial(store.open, namespace, meme.storage_key)
        entries.append(
            ExportEntry(
                IMAGES_DIR + entry_name, opener, meme.display_name, meme.extension, meme.size_bytes, meme.sha256
            )
        )
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "collection": {"name": name},
        "exported_at": datetime.now(UTC).isoformat(),
        "items": [
            {
                "file": e.file,
                "display_name": e.display_name,
                "extension": e.extension,
                "size": e.size,
                "sha256": e.sha256,
            }
            for e in entries
        ],
    }
    data = json.dumps(manifest, ensure_ascii=False, indent=1).encode()
    return ExportPlan(name, safe_entry_stem(name) + ".zip", entries, data)


class _Sink:
    """A write-only, non-seekable target for ZipFile whose bytes are taken out as they come."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def write(self, data: bytes, /) -> int:
        self._buffer += data
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:  # ZipFile never closes a file it was given; the protocol asks for it
        pass

    def take(self) -> bytes:
        out = bytes(self._buffer)
        self._buffer.clear()
        return out


def stream_zip(plan: ExportPlan, chunk_size: int = READ_CHUNK) -> Iterator[bytes]:
    """The package as a stream of byte chunks: the manifest (deflated), then each image (stored)
    in member order. Memory stays at about one chunk; nothing is written to disk."""
    sink = _Sink()
    stamp = datetime.now(UTC).timetuple()[:6]
    with zipfile.ZipFile(sink, "w", allowZip64=True) as archive:
        info = zipfile.ZipInfo(MANIFEST, stamp)
        info.compress_type = zipfile.ZIP_DEFLATED
        archive.writestr(info, plan.manifest)
        yield sink.take()
        for entry in plan.entries:
            info = zipfile.ZipInfo(entry.file, stamp)
            info.compress_type = zipfile.ZIP_STORED
            info.file_size = entry.size
            info.external_attr = 0o644 << 16
            with (
                archive.open(info, "w", force_zip64=entry.size >= zipfile.ZIP64_LIMIT) as out,
                entry.open_blob() as src,
            ):
                while chunk := src.read(chunk_size):
                    out.write(chunk)
                    yield sink.take()
            yield sink.take()
    yield sink.take()


def export_to_file(
    session: Session,
    store,
    scope: ScopeContext,
    collection_id: UUID,
    target: BinaryIO,
    on_bytes: Callable[[int], None] | None = None,
) -> ExportPlan:
    """Write the package to ``target`` (any writable binary file); returns the plan."""
    plan = plan_export(session, store, scope, collection_id)
    for chunk in stream_zip(plan):
        if chunk:
            target.write(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
    return plan


def content_disposition(filename: str, disposition: str = "attachment") -> str:
    """A ``Content-Disposition`` value (RFC 6266) naming ``filename``: an ASCII ``filename`` fallback
    and the UTF-8 ``filename*``; path separators and control characters become ``_``."""
    filename = "".join("_" if ord(c) < 32 or ord(c) == 127 or c in "/\\" else c for c in filename)
    ascii_name = filename.encode("ascii", "replace").decode().replace("?", "_").replace('"', "_")
    return f"{disposition}; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename)}"
