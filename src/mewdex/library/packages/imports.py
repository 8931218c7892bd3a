"""Import a ``mewdex-collection`` ZIP (or a plain ZIP of images): a preflight checks the whole
archive before anything is written (see :mod:`mewdex.library.packages`)."""

from __future__ import annotations

import hashlib
import json
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy.orm import Session, sessionmaker

from mewdex.config import get_settings
from mewdex.db.models import ScopeContext
from mewdex.library import collections, memes
from mewdex.library.images import ImageError, ImageInfo, probe
from mewdex.library.memes import add_image
from mewdex.library.names import display_name_from_filename, normalize_display_name, saved_name
from mewdex.library.packages.zipformat import (
    FORMAT,
    MANIFEST,
    MAX_CD_BYTES_PER_ENTRY,
    MAX_MANIFEST_BYTES,
    MAX_MANIFEST_DEPTH,
    VERSION,
    Limits,
    PackageError,
    _Budget,
    _check_no_overlap,
    _depth,
    _is_junk,
    _is_symlink,
    central_directory_size,
    decode_entry_name,
    inflate,
    unsafe_reason,
)
from mewdex.queue import batches


@dataclass
class PlannedItem:
    name: str  # the entry's (decoded) path in the archive
    info: zipfile.ZipInfo | None
    display_name: str
    expected_sha256: str | None = None
    sha256: str | None = None
    size: int | None = None
    probed: ImageInfo | None = None
    error: dict | None = None


@dataclass
class Plan:
    collection_name: str
    items: list[PlannedItem]
    has_manifest: bool
    inflated_bytes: int


@dataclass
class ItemResult:
    name: str
    display_name: str
    status: str  # created | duplicate | rejected
    meme: dict | None = None
    error: dict | None = None

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "display_name": self.display_name,
            "status": self.status,
            "meme": self.meme,
            "error": self.error,
        }


@dataclass
class ImportResult:
    collection: dict
    items: list[ItemResult] = field(default_factory=list)
    inflated_bytes: int = 0

    def as_dict(self) -> dict:
        return {"collection": self.collection, "items": [i.as_dict() for i in self.items]}

    def count(self, status: str) -> int:
        return sum(1 for i in self.items if i.status == status)


def open_archive(fileobj: BinaryIO, limits: Limits | None = None) -> zipfile.ZipFile:
    """The ZIP's central directory; PackageError 422 ``zip_invalid`` when it is not a readable ZIP,
    413 ``too_many_entries`` when the end record announces more entries (directories and junk
    included) than ``zip_max_entries`` or a central directory larger than they could need."""
    limits = limits or Limits.from_settings()
    entries, cd_size = central_directory_size(fileobj)
    if entries > limits.max_entries or cd_size > max(limits.max_entries, 1) * MAX_CD_BYTES_PER_ENTRY:
        raise PackageError(
            413,
            "too_many_entries",
            f"the archive has more than {limits.max_entries} entries",
            {"count": entries, "limit": limits.max_entries},
        )
    fileobj.seek(0)
    try:
        return zipfile.ZipFile(fileobj)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, struct.error) as exc:
        raise PackageError(422, "zip_invalid", f"not a readable ZIP archive: {exc}") from None


def preflight(
    fileobj: BinaryIO, archive: zipfile.ZipFile, *, limits: Limits, name: str | None, source_name: str = ""
) -> Plan:
    """Check the whole archive without writing anything; raises PackageError (see module doc)."""
    budget = _Budget(limits)
    unsafe: list[dict] = []
    entries: list[tuple[str, zipfile.ZipInfo]] = []  # central directory order; repeated names are kept
    manifest_info = None
    infos = archive.infolist()
    if len(infos) > limits.max_entries:
        raise PackageError(
            413,
            "too_many_entries",
            f"the archive has more than {limits.max_entries} entries",
            {"count": len(infos), "limit": limits.max_entries},
        )
    _check_no_overlap(infos)
    for info in infos:
        entry = decode_entry_name(info)
        if _is_symlink(info):
            unsafe.append({"entry": entry, "reason": "symlink"})
            continue
        reason = unsafe_reason(entry)
        if reason is not None:
            unsafe.append({"entry": entry, "reason": reason})
            continue
        if entry.endswith("/") or _is_junk(entry):
            continue
        if entry == MANIFEST:
            manifest_info = manifest_info or info
            continue
        entries.append((entry, info))
    if unsafe:
        raise PackageError(
            422, "unsafe_path", "the archive has entries that are not plain relative paths", {"entries": unsafe}
        )

    manifest = _read_manifest(fileobj, manifest_info, budget) if manifest_info is not None else None
    items: list[PlannedItem] = []
    claimed: set[int] = set()  # entries (by position) a manifest item took
    if manifest is not None:
        for m in manifest["items"]:
            # The first entry of that name not taken yet: a name listed twice maps to both entries.
            index = next((i for i, (e, _) in enumerate(entries) if e == m["file"] and i not in claimed), None)
            if index is not None:
                claimed.add(index)
            items.append(
                PlannedItem(
                    m["file"],
                    entries[index][1] if index is not None else None,
                    _display_name(m.get("display_name"), m["file"]),
                    expected_sha256=m.get("sha256"),
                )
            )
    items += [
        PlannedItem(e, info, display_name_from_filename(e)) for i, (e, info) in enumerate(entries) if i not in claimed
    ]
    if len(items) > limits.max_items:
        raise PackageError(
            413,
            "too_many_items",
            f"the archive has {len(items)} images; at most {limits.max_items}",
            {"count": len(items), "limit": limits.max_items},
        )

    max_pixels = get_settings().max_pixels
    for item in items:
        if item.info is None:
            item.error = {"code": "entry_missing", "message": "the manifest lists a file the archive lacks"}
            continue
        data = inflate(fileobj, item.info, item.name, budget)
        item.size, item.sha256 = len(data), hashlib.sha256(data).hexdigest()
        if item.expected_sha256 and item.expected_sha256 != item.sha256:
            item.error = {"code": "checksum_mismatch", "message": "the bytes differ from the manifest's sha256"}
            continue
        try:
            item.probed = probe(data, max_pixels=max_pixels)
        except ImageError as exc:
            item.error = {"code": exc.code, "message": str(exc)}
    if (items or manifest is None) and not any(i.error is None for i in items):  # an empty package is fine
        raise PackageError(
            422,
            "no_images",
            "the archive has no image that can be imported",
            {"items": [{"name": i.name, "error": i.error} for i in items]},
        )

    collection = (manifest or {}).get("collection")
    named = collection.get("name") if isinstance(collection, dict) else None
    collection_name = name or (named if isinstance(named, str) else None) or Path(source_name).stem or "Imported"
    try:
        collection_name = collections.normalize_collection_name(collection_name)
    except ValueError:
        collection_name = "Imported"
    return Plan(collection_name, items, manifest is not None, budget.total)


def _display_name(value: Any, entry: str) -> str:
    if isinstance(value, str):
        try:
            return normalize_display_name(value)
        except ValueError:
            pass
    return display_name_from_filename(entry)


def _read_manifest(fileobj: BinaryIO, info: zipfile.ZipInfo, budget: _Budget) -> dict:
    small = _Budget(Limits(1, budget.limits.max_total_bytes, MAX_MANIFEST_BYTES, budget.limits.max_ratio))
    small.total = budget.total
    data = inflate(fileobj, info, MANIFEST, small)
    budget.total = small.total
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PackageError(422, "manifest_invalid", f"manifest.json is not JSON: {exc}") from None
    except RecursionError:
        raise PackageError(422, "manifest_invalid", "manifest.json is nested too deeply") from None
    if _depth(manifest, MAX_MANIFEST_DEPTH) > MAX_MANIFEST_DEPTH:
        raise PackageError(422, "manifest_invalid", f"manifest.json is nested deeper than {MAX_MANIFEST_DEPTH}")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PackageError(422, "manifest_invalid", f"manifest.json is not a {FORMAT} manifest")
    if manifest.get("version") != VERSION:
        raise PackageError(
            422,
            "manifest_invalid",
            f"unsupported {FORMAT} version {manifest.get('version')!r}",
            {"supported": [VERSION]},
        )
    items = manifest.get("items")
    if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("file"), str) for i in items):
        raise PackageError(422, "manifest_invalid", "manifest items must be objects with a 'file'")
    if not isinstance(manifest.get("collection"), dict):
        manifest["collection"] = {}
    return manifest


def import_package(
    sessions: sessionmaker[Session],
    store,
    scope: ScopeContext,
    fileobj: BinaryIO,
    *,
    source_name: str = "",
    name: str | None = None,
    process: bool = True,
    limits: Limits | None = None,
    on_plan: Callable[[Plan], None] | None = None,
    on_item: Callable[[ItemResult], None] | None = None,
) -> ImportResult:
    """Preflight the archive, then create the collection and import each item in order.

    Args:
        fileobj: the ZIP, seekable. source_name: its file name (provenance; default collection name).
        name: the collection's name (default: the manifest's, else the file name's stem).
        process: queue the processing job of each new meme (False: store only).
        on_plan: called once the preflight passed; on_item: after each item.
    Returns:
        :class:`ImportResult`; items are ``created`` (new meme), ``duplicate`` (the scope's existing
        meme with the same bytes, added to the collection) or ``rejected`` (with ``error``).
    Raises:
        PackageError before anything is written (see the module doc).
    """
    limits = limits or Limits.from_settings()
    archive = open_archive(fileobj, limits)
    plan = preflight(fileobj, archive, limits=limits, name=name, source_name=source_name)
    if on_plan is not None:
        on_plan(plan)
    with sessions.begin() as session:
        collection = collections.create_unique(session, scope, plan.collection_name)
        collection_id, collection_name = collection.id, collection.name
    result = ImportResult(collection={}, inflated_bytes=plan.inflated_bytes)
    budget = _Budget(limits)
    batch_id = None
    if process:  # like a folder import: one batch, fed to the lanes as they drain (never fills the queue)
        with sessions.begin() as session:
            batch_id = batches.create(session, scope.scope_id).batch_id
    try:
        for item in plan.items:
            if item.error is not None:
                outcome = ItemResult(item.name, item.display_name, "rejected", error=item.error)
            else:
                # The membership is written with the meme (same transaction), by the collection's unique name.
                outcome = _import_item(
                    sessions, store, scope, fileobj, item, budget, collection_name, source_name, process, batch_id
                )
            result.items.append(outcome)
            if on_item is not None:
                on_item(outcome)
    finally:
        if batch_id is not None:
            with sessions.begin() as session:
                batches.seal(session, scope.scope_id, batch_id)
    with sessions.begin() as session:
        collection = collections.find(session, scope, collection_id)
        result.collection = {
            "id": str(collection_id),
            "name": collection_name,
            "item_count": collections.count_items(session, scope, collection_id),
            "created_at": collection.created_at.isoformat(),
            "updated_at": collection.updated_at.isoformat(),
        }
    return result


def _import_item(
    sessions,
    store,
    scope,
    fileobj,
    item: PlannedItem,
    budget: _Budget,
    collection_name: str,
    source_name: str,
    process: bool,
    batch_id: str | None,
) -> ItemResult:
    if item.info is None or item.probed is None:  # the preflight plans only entries it found and probed
        raise ValueError(f"{item.name}: not a planned image entry")
    data = inflate(fileobj, item.info, item.name, budget)
    if hashlib.sha256(data).hexdigest() != item.sha256:  # the archive changed since the preflight
        return ItemResult(
            item.name,
            item.display_name,
            "rejected",
            error={"code": "zip_corrupt", "message": "the entry changed during the import"},
        )
    added = add_image(
        sessions,
        store,
        scope,
        data,
        filename=saved_name(item.display_name, item.probed.extension),
        provenance={"source": "zip_import", "package": source_name, "entry": item.name},
        collection_names=[collection_name],
        process=process,
        probed=item.probed,
        batch_id=batch_id,
    )
    if added.meme_id is None:
        return ItemResult(
            item.name, item.display_name, "rejected", error={"code": added.error, "message": added.message}
        )
    with sessions.begin() as session:
        meme = memes.find(session, scope, added.meme_id)
        if meme is None:  # deleted in the meantime: reported as added, without its summary
            return ItemResult(item.name, item.display_name, added.status)
        summary = collections.meme_summary(meme)
    return ItemResult(item.name, item.display_name, added.status, meme=summary)
