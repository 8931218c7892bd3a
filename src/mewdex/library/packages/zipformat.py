"""The ``mewdex-collection`` ZIP format: names, limits and the guarded reader shared by
export and import (see :mod:`mewdex.library.packages` for the format and its rules)."""

from __future__ import annotations

import re
import stat
import struct
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, BinaryIO

import regex

from mewdex.config import get_settings
from mewdex.library.names import saved_stem

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
    {
        "CON",
        "PRN",
        "AUX",
        "NUL",
        *(f"COM{i}" for i in range(10)),
        *(f"LPT{i}" for i in range(10)),
        "COM¹",
        "COM²",
        "COM³",
        "LPT¹",
        "LPT²",
        "LPT³",
        "CONIN$",
        "CONOUT$",
    }
)
_GRAPHEME = regex.compile(r"\X")
_DRIVE = re.compile(r"^[A-Za-z]:")
_JUNK_NAMES = frozenset({"thumbs.db", "desktop.ini"})


class PackageError(Exception):
    """A refused package with a stable code, its HTTP status and details."""

    def __init__(self, status: int, code: str, message: str, details: Any = None):
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details


def safe_entry_stem(name: str) -> str:
    """A file-name stem safe on Windows, macOS and Linux made from a display name (see module doc)."""
    s = unicodedata.normalize("NFC", name)
    s = "".join(
        "_" if ch in _WINDOWS_FORBIDDEN or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") else ch
        for ch in s
    )
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
        stem = safe_entry_stem(saved_stem(display_name, extension))
        candidate, n = stem + extension, 0
        while _fold(candidate) in taken:
            n += 1
            candidate = f"{stem} ({n}){extension}"
        taken.add(_fold(candidate))
        names.append(candidate)
    return names


def _fold(name: str) -> str:
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", name).casefold())


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
        tag, size = struct.unpack("<HH", extra[i : i + 4])
        body = extra[i + 4 : i + 4 + size]
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
    return (
        parts[0] == "__MACOSX"
        or base.startswith(".")
        or base.lower() in _JUNK_NAMES
        or any(p.startswith(".") for p in parts[:-1])
    )


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
    _, _, _, _, entries, cd_size, _, _ = struct.unpack("<4sHHHHIIH", tail[at : at + 22])
    locator = tail.rfind(b"PK\x06\x07", 0, at)
    if (entries == 0xFFFF or cd_size == 0xFFFFFFFF) and locator >= 0 and at - locator >= 20:
        (z64_offset,) = struct.unpack("<Q", tail[locator + 8 : locator + 16])
        fileobj.seek(z64_offset)
        record = fileobj.read(56)
        if len(record) == 56 and record[:4] == b"PK\x06\x06":
            entries, cd_size = struct.unpack("<QQ", record[32:48])
    return entries, cd_size


def inflate(fileobj: BinaryIO, info: zipfile.ZipInfo, name: str, budget: _Budget) -> bytes:
    """The entry's bytes, inflated here under the limits (header sizes are not trusted)."""
    limits = budget.limits
    if info.flag_bits & 0x1:
        raise PackageError(422, "zip_unsupported", f"entry {name!r} is encrypted", {"entry": name})
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise PackageError(
            422, "zip_unsupported", f"entry {name!r} uses compression method {info.compress_type}", {"entry": name}
        )
    fileobj.seek(info.header_offset)
    header = fileobj.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise PackageError(422, "zip_corrupt", f"entry {name!r} has no local header", {"entry": name})
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    local_name = fileobj.read(name_len)
    central_name = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "surrogateescape")
    if local_name != central_name:
        raise PackageError(422, "zip_corrupt", f"entry {name!r} has another name in its local header", {"entry": name})
    fileobj.seek(info.header_offset + 30 + name_len + extra_len)

    out = bytearray()
    consumed = 0

    def add(piece: bytes) -> None:
        if not piece:
            return
        if len(out) + len(piece) > limits.max_entry_bytes:
            raise PackageError(
                413,
                "entry_too_large",
                f"entry {name!r} inflates past {limits.max_entry_bytes} bytes",
                {"entry": name, "limit": limits.max_entry_bytes},
            )
        if budget.total + len(piece) > limits.max_total_bytes:
            raise PackageError(
                413,
                "package_too_large",
                f"the archive inflates past {limits.max_total_bytes} bytes",
                {"entry": name, "limit": limits.max_total_bytes},
            )
        out.extend(piece)
        budget.total += len(piece)
        if len(out) > RATIO_FLOOR_BYTES and len(out) > limits.max_ratio * max(consumed, 1):
            raise PackageError(
                413,
                "compression_ratio_exceeded",
                f"entry {name!r} inflates more than {limits.max_ratio:g} times its compressed size",
                {"entry": name, "limit": limits.max_ratio},
            )

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
        raise PackageError(
            422, "zip_corrupt", f"entry {name!r} does not match its header (size or CRC)", {"entry": name}
        )
    return bytes(out)


def _check_no_overlap(infos: list[zipfile.ZipInfo]) -> None:
    """422 ``zip_corrupt`` when two entries share bytes (a local header inside another entry's
    data): overlapping entries are how small archives inflate to enormous sizes."""
    spans = sorted(
        (info.header_offset, info.header_offset + 30 + len(info.orig_filename) + info.compress_size, info)
        for info in infos
    )
    for (_start, end, info), (next_start, _, other) in zip(spans, spans[1:], strict=False):
        if next_start < end:
            raise PackageError(
                422, "zip_corrupt", "the archive has overlapping entries", {"entries": [info.filename, other.filename]}
            )


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
