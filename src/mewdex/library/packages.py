"""Collection ZIP packages, format ``mewdex-collection`` version 1.

Layout::

    manifest.json          {"format": "mewdex-collection", "version": 1,
                            "collection": {"name"}, "exported_at": ISO-8601 UTC,
                            "items": [{"file": "images/<entry>", "display_name", "extension",
                                       "size": bytes, "sha256": hex}, ...]}   # member order
    images/<entry>         the original bytes, stored (images are compressed already)

Entry names are made safe for every file system (no ``<>:"/\\|?*`` or control characters, no
trailing dots or spaces, no Windows device names such as ``CON`` or ``COM1``, at most 150 UTF-8
bytes) and unique ignoring case and Unicode normalisation (``Café.png``, ``Café (1).png``); the
manifest keeps the real display names, so an import restores them.

Export streams: :func:`stream_zip` yields the archive chunk by chunk (data descriptors, no
seeking, no temporary file). Import (:func:`import_package`) reads a seekable ZIP (a spooled
upload or a file) and writes nothing until a preflight has checked the whole archive:

* paths: absolute, drive (``C:``), parent (``..``) or backslash paths and symlinks → 422
  ``unsafe_path`` (details list every bad entry);
* size: at most ``zip_max_items`` images (413 ``too_many_items``); every entry is inflated and
  counted on the bytes actually produced, never on header sizes: per entry at most
  ``max_upload_bytes`` (413 ``entry_too_large``), in total ``zip_max_total_bytes`` (413
  ``package_too_large``), and at most ``zip_max_ratio`` × the compressed bytes read once past
  1 MiB (413 ``compression_ratio_exceeded``); inflation stops at the first limit;
* integrity: CRC and size must match the headers (422 ``zip_corrupt``); encrypted entries and
  methods other than stored/deflated → 422 ``zip_unsupported``; not a ZIP → 422 ``zip_invalid``;
  a manifest that is not v1 → 422 ``manifest_invalid``;
* images: each is decoded (``library.images.probe``); an undecodable one, or one whose bytes
  differ from the manifest's sha256, is reported ``rejected`` and not imported; when no image is
  importable the archive is refused (422 ``no_images``), except a package whose manifest lists
  no members (an empty collection).

Names without the ZIP UTF-8 flag are decoded from the Info-ZIP Unicode path field when present,
else tried as UTF-8, then GBK, then Shift-JIS, else CP437. The collection is created with the
manifest's name (or the given one, or the file name); a taken name gets a `` (2)`` suffix.
"""

from __future__ import annotations

import hashlib
import json
import re
import stat
import struct
import unicodedata
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO
from urllib.parse import quote
from uuid import UUID

import regex
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.config import get_settings
from mewdex.db.models import Meme, ScopeContext
from mewdex.library import collections
from mewdex.library.images import ImageError, ImageInfo, probe
from mewdex.library.memes import add_image
from mewdex.library.names import display_name_from_filename, normalize_display_name
from mewdex.library.scopes import storage_namespace
from mewdex.queue import batches

FORMAT = "mewdex-collection"
VERSION = 1
MANIFEST = "manifest.json"
IMAGES_DIR = "images/"
MAX_ENTRY_NAME_BYTES = 150
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
RATIO_FLOOR_BYTES = 1024 * 1024
MAX_CD_BYTES_PER_ENTRY = 1024  # central directory bytes an entry may take on average (46 + name + extras)
MAX_MANIFEST_DEPTH = 32
READ_CHUNK = 256 * 1024
_WINDOWS_FORBIDDEN = frozenset('<>:"/\\|?*')
_WINDOWS_DEVICES = frozenset(
    {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)), *(f"LPT{i}" for i in range(10)),
     "COM¹", "COM²", "COM³", "LPT¹", "LPT²", "LPT³", "CONIN$", "CONOUT$"}
)
_GRAPHEME = regex.compile(r"\X")
_DRIVE = re.compile(r"^[A-Za-z]:")
_JUNK_NAMES = frozenset({"thumbs.db", "desktop.ini"})


class PackageError(Exception):
    """A refused package with a stable code, its HTTP status and details."""

    def __init__(self, status: int, code: str, message: str, details: Any = None):
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details


# --------------------------------------------------------------------------- export


@dataclass(frozen=True)
class ExportEntry:
    file: str  # archive path, "images/<entry>"
    path: Path  # the blob
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


def safe_entry_stem(name: str) -> str:
    """A file-name stem safe on Windows, macOS and Linux made from a display name (see module doc)."""
    s = unicodedata.normalize("NFC", name)
    s = "".join("_" if ch in _WINDOWS_FORBIDDEN or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")
                else ch for ch in s)
    s = _truncate_bytes(s.strip(), MAX_ENTRY_NAME_BYTES).rstrip(" .").lstrip(" ")
    if not s:
        s = "image"
    if s.split(".")[0].rstrip(" ").upper() in _WINDOWS_DEVICES:
        s = "_" + s
    return s


def _truncate_bytes(s: str, limit: int) -> str:
    if len(s.encode("utf-8")) <= limit:
        return s
    out, used = [], 0
    for g in _GRAPHEME.findall(s):
        n = len(g.encode("utf-8"))
        if used + n > limit:
            break
        out.append(g)
        used += n
    return "".join(out)


def unique_entry_names(items: list[tuple[str, str]]) -> list[str]:
    """Entry file names for (display name, extension) pairs: safe, and unique ignoring case and
    Unicode normalisation; later duplicates get `` (1)``, `` (2)``…"""
    taken: set[str] = set()
    names = []
    for display_name, extension in items:
        stem = safe_entry_stem(display_name)
        candidate, n = stem + extension, 0
        while _fold(candidate) in taken:
            n += 1
            candidate = f"{stem} ({n}){extension}"
        taken.add(_fold(candidate))
        names.append(candidate)
    return names


def _fold(name: str) -> str:
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", name).casefold())


def plan_export(session: Session, store, scope: ScopeContext, collection_id: UUID) -> ExportPlan:
    """What an export of the collection will contain; raises CollectionError 404, PackageError 409
    ``blob_missing`` when a member's file is gone (checked before anything is streamed)."""
    collection = collections.find(session, scope, collection_id)
    memes = collections.members(session, scope, collection.id)
    namespace = storage_namespace(session, scope.scope_id)
    names = unique_entry_names([(m.display_name, m.extension) for m in memes])
    entries = []
    for meme, name in zip(memes, names):
        path = store.path(namespace, meme.storage_key)
        if not path.is_file():
            raise PackageError(409, "blob_missing", f"the file of meme {meme.id} is missing", {"meme_id": str(meme.id)})
        entries.append(ExportEntry(IMAGES_DIR + name, path, meme.display_name, meme.extension, meme.size_bytes,
                                   meme.sha256))
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "collection": {"name": collection.name},
        "exported_at": datetime.now(timezone.utc).isoformat(),
        "items": [
            {"file": e.file, "display_name": e.display_name, "extension": e.extension, "size": e.size,
             "sha256": e.sha256}
            for e in entries
        ],
    }
    data = json.dumps(manifest, ensure_ascii=False, indent=1).encode()
    return ExportPlan(collection.name, safe_entry_stem(collection.name) + ".zip", entries, data)


class _Sink:
    """A write-only, non-seekable target for ZipFile whose bytes are taken out as they come."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def write(self, data) -> int:
        self._buffer += data
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        out = bytes(self._buffer)
        self._buffer.clear()
        return out


def stream_zip(plan: ExportPlan, chunk_size: int = READ_CHUNK) -> Iterator[bytes]:
    """The package as a stream of byte chunks: the manifest (deflated), then each image (stored)
    in member order. Memory stays at about one chunk; nothing is written to disk."""
    sink = _Sink()
    stamp = datetime.now(timezone.utc).timetuple()[:6]
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
            with archive.open(info, "w", force_zip64=entry.size >= zipfile.ZIP64_LIMIT) as out, \
                    entry.path.open("rb") as src:
                while chunk := src.read(chunk_size):
                    out.write(chunk)
                    yield sink.take()
            yield sink.take()
    yield sink.take()


def export_to_file(session: Session, store, scope: ScopeContext, collection_id: UUID, target: BinaryIO,
                   on_bytes: Callable[[int], None] | None = None) -> ExportPlan:
    """Write the package to ``target`` (any writable binary file); returns the plan."""
    plan = plan_export(session, store, scope, collection_id)
    for chunk in stream_zip(plan):
        if chunk:
            target.write(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
    return plan


def content_disposition(filename: str) -> str:
    ascii_name = filename.encode("ascii", "replace").decode().replace("?", "_").replace('"', "_")
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename)}"


# --------------------------------------------------------------------------- import


@dataclass(frozen=True)
class Limits:
    max_items: int
    max_total_bytes: int
    max_entry_bytes: int
    max_ratio: float
    max_entries: int = 2000

    @classmethod
    def from_settings(cls) -> Limits:
        s = get_settings()
        return cls(s.zip_max_items, s.zip_max_total_bytes, s.max_upload_bytes, s.zip_max_ratio, s.zip_max_entries)


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
        return {"name": self.name, "display_name": self.display_name, "status": self.status, "meme": self.meme,
                "error": self.error}


@dataclass
class ImportResult:
    collection: dict
    items: list[ItemResult] = field(default_factory=list)
    inflated_bytes: int = 0

    def as_dict(self) -> dict:
        return {"collection": self.collection, "items": [i.as_dict() for i in self.items]}

    def count(self, status: str) -> int:
        return sum(1 for i in self.items if i.status == status)


class _Budget:
    def __init__(self, limits: Limits):
        self.limits = limits
        self.total = 0


def decode_entry_name(info: zipfile.ZipInfo) -> str:
    """The entry's name as text (see the module doc for the order of guesses), without control
    characters (a NUL or newline in a name can reach no path, row or log)."""
    return "".join(ch for ch in _decode_entry_name(info) if unicodedata.category(ch) not in ("Cc", "Cs"))


def _decode_entry_name(info: zipfile.ZipInfo) -> str:
    if info.flag_bits & 0x800:
        return info.filename
    raw = info.orig_filename.encode("cp437")
    unicode_path = _unicode_path_field(info.extra, raw)
    if unicode_path is not None:
        return unicode_path
    for encoding in ("utf-8", "gbk", "shift_jis"):
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError:
            continue
    return info.filename


def _unicode_path_field(extra: bytes, raw_name: bytes) -> str | None:
    """The Info-ZIP Unicode Path extra field (0x7075), when present and matching the raw name."""
    i = 0
    while i + 4 <= len(extra):
        tag, size = struct.unpack("<HH", extra[i:i + 4])
        body = extra[i + 4:i + 4 + size]
        if tag == 0x7075 and len(body) >= 5 and body[0] == 1:
            if struct.unpack("<I", body[1:5])[0] == zlib.crc32(raw_name):
                try:
                    return body[5:].decode("utf-8")
                except UnicodeDecodeError:
                    return None
        i += 4 + size
    return None


def unsafe_reason(name: str) -> str | None:
    """Why an entry name must never be used as a path (None when it is a plain relative path)."""
    if "\\" in name:
        return "backslash"
    if name.startswith("/"):
        return "absolute"
    if _DRIVE.match(name):
        return "drive"
    if ".." in PurePosixPath(name).parts or any(part == ".." for part in name.split("/")):
        return "parent"
    return None


def _is_symlink(info: zipfile.ZipInfo) -> bool:
    return info.create_system == 3 and stat.S_ISLNK(info.external_attr >> 16)


def _is_junk(name: str) -> bool:
    parts = name.split("/")
    base = parts[-1]
    return (parts[0] == "__MACOSX" or base.startswith(".") or base.lower() in _JUNK_NAMES
            or any(p.startswith(".") for p in parts[:-1]))


def central_directory_size(fileobj: BinaryIO) -> tuple[int, int]:
    """``(entries, central directory bytes)`` from the end-of-central-directory record (ZIP64 aware),
    read before :class:`zipfile.ZipFile` builds an object per entry; PackageError 422
    ``zip_invalid`` when there is none."""
    fileobj.seek(0, 2)
    size = fileobj.tell()
    tail_len = min(size, 22 + 65535)
    fileobj.seek(size - tail_len)
    tail = fileobj.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        raise PackageError(422, "zip_invalid", "not a readable ZIP archive: no end of central directory")
    _, _, _, _, entries, cd_size, _, _ = struct.unpack("<4sHHHHIIH", tail[at:at + 22])
    locator = tail.rfind(b"PK\x06\x07", 0, at)
    if (entries == 0xFFFF or cd_size == 0xFFFFFFFF) and locator >= 0 and at - locator >= 20:
        (z64_offset,) = struct.unpack("<Q", tail[locator + 8:locator + 16])
        fileobj.seek(z64_offset)
        record = fileobj.read(56)
        if len(record) == 56 and record[:4] == b"PK\x06\x06":
            entries, cd_size = struct.unpack("<QQ", record[32:48])
    return entries, cd_size


def open_archive(fileobj: BinaryIO, limits: Limits | None = None) -> zipfile.ZipFile:
    """The ZIP's central directory; PackageError 422 ``zip_invalid`` when it is not a readable ZIP,
    413 ``too_many_entries`` when the end record announces more entries (directories and junk
    included) than ``zip_max_entries`` or a central directory larger than they could need."""
    limits = limits or Limits.from_settings()
    entries, cd_size = central_directory_size(fileobj)
    if entries > limits.max_entries or cd_size > max(limits.max_entries, 1) * MAX_CD_BYTES_PER_ENTRY:
        raise PackageError(413, "too_many_entries", f"the archive has more than {limits.max_entries} entries",
                           {"count": entries, "limit": limits.max_entries})
    fileobj.seek(0)
    try:
        return zipfile.ZipFile(fileobj)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, struct.error) as exc:
        raise PackageError(422, "zip_invalid", f"not a readable ZIP archive: {exc}") from None


def inflate(fileobj: BinaryIO, info: zipfile.ZipInfo, name: str, budget: _Budget) -> bytes:
    """The entry's bytes, inflated here under the limits (header sizes are not trusted)."""
    limits = budget.limits
    if info.flag_bits & 0x1:
        raise PackageError(422, "zip_unsupported", f"entry {name!r} is encrypted", {"entry": name})
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise PackageError(422, "zip_unsupported", f"entry {name!r} uses compression method {info.compress_type}",
                           {"entry": name})
    fileobj.seek(info.header_offset)
    header = fileobj.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise PackageError(422, "zip_corrupt", f"entry {name!r} has no local header", {"entry": name})
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    local_name = fileobj.read(name_len)
    central_name = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "surrogateescape")
    if local_name != central_name:
        raise PackageError(422, "zip_corrupt", f"entry {name!r} has another name in its local header",
                           {"entry": name})
    fileobj.seek(info.header_offset + 30 + name_len + extra_len)

    out = bytearray()
    consumed = 0

    def add(piece: bytes) -> None:
        if not piece:
            return
        if len(out) + len(piece) > limits.max_entry_bytes:
            raise PackageError(413, "entry_too_large", f"entry {name!r} inflates past {limits.max_entry_bytes} bytes",
                               {"entry": name, "limit": limits.max_entry_bytes})
        if budget.total + len(piece) > limits.max_total_bytes:
            raise PackageError(413, "package_too_large",
                               f"the archive inflates past {limits.max_total_bytes} bytes",
                               {"entry": name, "limit": limits.max_total_bytes})
        out.extend(piece)
        budget.total += len(piece)
        if len(out) > RATIO_FLOOR_BYTES and len(out) > limits.max_ratio * max(consumed, 1):
            raise PackageError(413, "compression_ratio_exceeded",
                               f"entry {name!r} inflates more than {limits.max_ratio:g} times its compressed size",
                               {"entry": name, "limit": limits.max_ratio})

    remaining = info.compress_size
    deflated = info.compress_type == zipfile.ZIP_DEFLATED
    inflater = zlib.decompressobj(-15) if deflated else None
    while remaining > 0:
        chunk = fileobj.read(min(READ_CHUNK, remaining))
        if not chunk:
            raise PackageError(422, "zip_corrupt", f"entry {name!r} is truncated", {"entry": name})
        remaining -= len(chunk)
        consumed += len(chunk)
        if inflater is None:
            add(chunk)
            continue
        data = chunk
        try:
            while data and not inflater.eof:
                add(inflater.decompress(data, READ_CHUNK))
                data = inflater.unconsumed_tail
        except zlib.error as exc:
            raise PackageError(422, "zip_corrupt", f"entry {name!r} is damaged: {exc}", {"entry": name}) from None
        if inflater.eof:
            break
    if inflater is not None and not inflater.eof:
        raise PackageError(422, "zip_corrupt", f"entry {name!r} is truncated", {"entry": name})
    if len(out) != info.file_size or zlib.crc32(out) != info.CRC:
        raise PackageError(422, "zip_corrupt", f"entry {name!r} does not match its header (size or CRC)",
                           {"entry": name})
    return bytes(out)


def preflight(fileobj: BinaryIO, archive: zipfile.ZipFile, *, limits: Limits, name: str | None,
              source_name: str = "") -> Plan:
    """Check the whole archive without writing anything; raises PackageError (see module doc)."""
    budget = _Budget(limits)
    unsafe: list[dict] = []
    entries: list[tuple[str, zipfile.ZipInfo]] = []  # central directory order; repeated names are kept
    manifest_info = None
    infos = archive.infolist()
    if len(infos) > limits.max_entries:
        raise PackageError(413, "too_many_entries", f"the archive has more than {limits.max_entries} entries",
                           {"count": len(infos), "limit": limits.max_entries})
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
        raise PackageError(422, "unsafe_path", "the archive has entries that are not plain relative paths",
                           {"entries": unsafe})

    manifest = _read_manifest(fileobj, manifest_info, budget) if manifest_info is not None else None
    items: list[PlannedItem] = []
    claimed: set[int] = set()  # entries (by position) a manifest item took
    if manifest is not None:
        for m in manifest["items"]:
            # The first entry of that name not taken yet: a name listed twice maps to both entries.
            index = next((i for i, (e, _) in enumerate(entries) if e == m["file"] and i not in claimed), None)
            if index is not None:
                claimed.add(index)
            items.append(PlannedItem(m["file"], entries[index][1] if index is not None else None,
                                     _display_name(m.get("display_name"), m["file"]),
                                     expected_sha256=m.get("sha256")))
    items += [PlannedItem(e, info, display_name_from_filename(e)) for i, (e, info) in enumerate(entries)
              if i not in claimed]
    if len(items) > limits.max_items:
        raise PackageError(413, "too_many_items", f"the archive has {len(items)} images; at most {limits.max_items}",
                           {"count": len(items), "limit": limits.max_items})

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
        raise PackageError(422, "no_images", "the archive has no image that can be imported",
                           {"items": [{"name": i.name, "error": i.error} for i in items]})

    collection = (manifest or {}).get("collection")
    named = collection.get("name") if isinstance(collection, dict) else None
    collection_name = name or (named if isinstance(named, str) else None) or Path(source_name).stem or "Imported"
    try:
        collection_name = collections.normalize_collection_name(collection_name)
    except ValueError:
        collection_name = "Imported"
    return Plan(collection_name, items, manifest is not None, budget.total)


def _check_no_overlap(infos: list[zipfile.ZipInfo]) -> None:
    """422 ``zip_corrupt`` when two entries share bytes (a local header inside another entry's
    data): overlapping entries are how small archives inflate to enormous sizes."""
    spans = sorted((info.header_offset, info.header_offset + 30 + len(info.orig_filename) + info.compress_size, info)
                   for info in infos)
    for (start, end, info), (next_start, _, other) in zip(spans, spans[1:]):
        if next_start < end:
            raise PackageError(422, "zip_corrupt", "the archive has overlapping entries",
                               {"entries": [info.filename, other.filename]})


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of a decoded JSON value, iteratively (never a RecursionError); stops past ``limit``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


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
        raise PackageError(422, "manifest_invalid", f"unsupported {FORMAT} version {manifest.get('version')!r}",
                           {"supported": [VERSION]})
    items = manifest.get("items")
    if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("file"), str) for i in items):
        raise PackageError(422, "manifest_invalid", "manifest items must be objects with a 'file'")
    if not isinstance(manifest.get("collection"), dict):
        manifest["collection"] = {}
    return manifest


def import_package(sessions: sessionmaker[Session], store, scope: ScopeContext, fileobj: BinaryIO, *,
                   source_name: str = "", name: str | None = None, process: bool = True,
                   limits: Limits | None = None, on_plan: Callable[[Plan], None] | None = None,
                   on_item: Callable[[ItemResult], None] | None = None) -> ImportResult:
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
                outcome = _import_item(sessions, store, scope, fileobj, item, budget, collection_name, source_name,
                                       process, batch_id)
            result.items.append(outcome)
            if on_item is not None:
                on_item(outcome)
    finally:
        if batch_id is not None:
            with sessions.begin() as session:
                batches.seal(session, scope.scope_id, batch_id)
    with sessions.begin() as session:
        collection = collections.find(session, scope, collection_id)
        result.collection = {"id": str(collection_id), "name": collection_name,
                             "item_count": collections.count_items(session, scope, collection_id),
                             "created_at": collection.created_at.isoformat(),
                             "updated_at": collection.updated_at.isoformat()}
    return result


def _import_item(sessions, store, scope, fileobj, item: PlannedItem, budget: _Budget, collection_name: str,
                 source_name: str, process: bool, batch_id: str | None) -> ItemResult:
    data = inflate(fileobj, item.info, item.name, budget)
    if hashlib.sha256(data).hexdigest() != item.sha256:  # the archive changed since the preflight
        return ItemResult(item.name, item.display_name, "rejected",
                          error={"code": "zip_corrupt", "message": "the entry changed during the import"})
    added = add_image(
        sessions, store, scope, data,
        filename=item.display_name + item.probed.extension,
        provenance={"source": "zip_import", "package": source_name, "entry": item.name},
        collection_names=[collection_name], process=process, probed=item.probed, batch_id=batch_id,
    )
    if added.meme_id is None:
        return ItemResult(item.name, item.display_name, "rejected",
                          error={"code": added.error, "message": added.message})
    with sessions.begin() as session:
        meme = session.execute(
            select(Meme).where(Meme.scope_id == scope.scope_id, Meme.id == UUID(added.meme_id))
        ).scalar_one()
        summary = collections.meme_summary(meme)
    return ItemResult(item.name, item.display_name, added.status, meme=summary)
