"""What a backup is, on disk and in the manifest: the format's constants, the backup key and what is
derived from it (:class:`BackupKey`), the stored (encrypted) file format, the closed set of entries a
snapshot holds (:func:`entries`, :func:`object_name`) and the sealed manifest (:func:`seal_manifest`,
:func:`open_manifest`). No I/O beyond the streams it is handed; the package's docstring has the layout."""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import json
import logging
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, Protocol

from mewdex.config import package_version
from mewdex.storage.blobs import check_key, check_namespace

log = logging.getLogger("mewdex.backups")
FORMAT = 2
HEADER = "mewdex-backup.json"
MANIFEST = "manifest.json"
DUMP = "database.dump"
#: Files of the data dir a backup carries (relative paths; kept with these names in the snapshot).
KEY_FILES = ("secret.keys", "keys/media_signing.json")
#: The closed set of a snapshot's files: a manifest naming anything else is refused.
SNAPSHOT_FILES = (DUMP, *KEY_FILES)
#: Where the blobs live in DEST (``data/<n[0:2]>/<n>``).
BLOBS_DIR = "data"
SNAPSHOT_FORMAT = "%Y%m%dT%H%M%SZ"
SNAPSHOT_NAME = re.compile(r"\d{8}T\d{6}Z")
_BLOB_OBJECT = re.compile(r"[0-9a-f]{64}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
CHUNK = 1024 * 1024
MAX_MANIFEST_BYTES = 256 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_ENTRY_BYTES = 1 << 40
# The encrypted file format: MAGIC, a 16-byte salt, then chunks of nonce (12) + ciphertext + tag (16).
MAGIC = b"MDXBKE2\n"
_SALT, _NONCE, _TAG = 16, 12, 16


class BackupError(Exception):
    """A backup or restore refused or failed (``code``, ``message``: which file, what to do)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class Progress(Protocol):
    """What backup and restore report: a phase with a total (None: unknown) and steps within it."""

    def phase(self, name: str, total: int | None) -> None: ...

    def advance(self, steps: int = 1) -> None: ...


class _Quiet:
    def phase(self, name: str, total: int | None) -> None:
        log.info("backup: %s", name)

    def advance(self, steps: int = 1) -> None:
        pass


# ---------------------------------------------------------------- the key


@dataclass(frozen=True)
class BackupKey:
    """The operator's 32-byte backup key (``master``) and what is derived from it; ``kdf``: the
    scrypt parameters it came from (a passphrase), None for a key file."""

    master: bytes = field(repr=False)
    kdf: dict[str, Any] | None = None

    def _derive(self, label: bytes) -> bytes:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        return HKDF(hashes.SHA256(), 32, None, b"mewdex backup " + label).derive(self.master)

    @cached_property
    def key_id(self) -> str:
        """16 hex characters that tell keys apart (kept in the header and the manifests)."""
        return hmac.new(self.master, b"mewdex backup key id", hashlib.sha256).hexdigest()[:16]

    @cached_property
    def _encryption(self) -> bytes:
        return self._derive(b"encryption")

    @cached_property
    def _mac(self) -> bytes:
        return self._derive(b"manifest mac")

    @cached_property
    def _names(self) -> bytes:
        return self._derive(b"blob names")

    def file_key(self, salt: bytes, context: str) -> bytes:
        """The AES-256-GCM key of one stored file: HKDF of the encryption key, its salt and name."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        return HKDF(hashes.SHA256(), 32, salt, b"mewdex backup file\x00" + context.encode()).derive(self._encryption)

    def mac(self, data: bytes) -> str:
        return hmac.new(self._mac, data, hashlib.sha256).hexdigest()

    def blob_name(self, namespace: str, key: str) -> str:
        return hmac.new(self._names, f"{namespace}/{key}".encode(), hashlib.sha256).hexdigest()

    def text(self) -> str:
        """The key as the key file holds it (64 hex characters)."""
        return self.master.hex()


# ---------------------------------------------------------------- the stored format


def _aad(index: int, final: bool) -> bytes:
    return MAGIC + index.to_bytes(8, "big") + (b"\x01" if final else b"\x00")


def _read_full(source: Any, size: int) -> bytes:
    """Up to ``size`` bytes (fewer only at the end of the stream)."""
    parts, got = [], 0
    while got < size:
        part = source.read(size - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def stored_size(encrypted: bool, size: int) -> int:
    """Bytes a file of ``size`` bytes takes in DEST."""
    if not encrypted:
        return size
    return len(MAGIC) + _SALT + max(1, math.ceil(size / CHUNK)) * (_NONCE + _TAG) + size


def _plain_size(encrypted: bool, stored: int) -> int:
    """The inverse of :func:`stored_size` (for a blob found in DEST)."""
    if not encrypted:
        return stored
    body = max(stored - len(MAGIC) - _SALT, 0)
    return max(body - math.ceil(body / (CHUNK + _NONCE + _TAG)) * (_NONCE + _TAG), 0)


def _write_stored(key: BackupKey, encrypted: bool, context: str, source: Any, out: Any) -> tuple[str, int]:
    """Write ``source`` as DEST stores it (encrypted, or as it is) to ``out``; returns the plaintext's
    (sha256, size). ``context``: the entry's name, bound into its key."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    digest, size = hashlib.sha256(), 0
    if not encrypted:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
        return digest.hexdigest(), size
    salt = os.urandom(_SALT)
    aead = AESGCM(key.file_key(salt, context))
    out.write(MAGIC + salt)
    chunk, index = _read_full(source, CHUNK), 0
    while True:
        following = _read_full(source, CHUNK) if len(chunk) == CHUNK else b""
        final = not following
        digest.update(chunk)
        size += len(chunk)
        nonce = os.urandom(_NONCE)
        out.write(nonce + aead.encrypt(nonce, chunk, _aad(index, final)))
        if final:
            return digest.hexdigest(), size
        chunk, index = following, index + 1


class _Bounded:
    """A reader that refuses more than ``limit`` bytes (it reads one more to know)."""

    def __init__(self, raw: Any, limit: int, what: str):
        self.raw, self.limit, self.what, self.total = raw, limit, what, 0

    def read(self, size: int) -> bytes:
        allowed = self.limit + 1 - self.total
        data = self.raw.read(min(size, allowed)) if allowed > 0 else b""
        self.total += len(data)
        if self.total > self.limit:
            raise BackupError("backup_corrupted", f"{self.what} is larger than its manifest entry says")
        return data


def _decoded(key: BackupKey, encrypted: bool, context: str, source: Any, what: str, code: str) -> Iterator[bytes]:
    """The plaintext of a stored file, chunk by chunk, each authenticated before it is yielded;
    ``code`` (``backup_corrupted`` / ``backup_unauthenticated``) when it does not authenticate."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if not encrypted:
        while chunk := source.read(CHUNK):
            yield chunk
        return
    head = _read_full(source, len(MAGIC) + _SALT)
    if len(head) < len(MAGIC) + _SALT or head[: len(MAGIC)] != MAGIC:
        raise BackupError(code, f"{what} is not an encrypted mewdex backup file")
    aead = AESGCM(key.file_key(head[len(MAGIC) :], context))
    block = CHUNK + _NONCE + _TAG
    current, index = _read_full(source, block), 0
    while True:
        following = _read_full(source, block) if len(current) == block else b""
        final = not following
        try:
            if len(current) < _NONCE + _TAG:
                raise InvalidTag
            plain = aead.decrypt(current[:_NONCE], current[_NONCE:], _aad(index, final))
        except InvalidTag:
            raise BackupError(
                code, f"{what} does not authenticate (altered, cut off, or made with another key)"
            ) from None
        yield plain
        if final:
            return
        current, index = following, index + 1


# ---------------------------------------------------------------- what a backup holds


@dataclass(frozen=True)
class Entry:
    """One item of a snapshot: a file (``name`` is one of :data:`SNAPSHOT_FILES`, the constant
    itself) or a blob (``namespace`` canonical UUID, ``key`` a content address; ``name`` is
    ``<namespace>/<key>``); ``size`` (bytes) and ``sha256`` of its plaintext."""

    kind: Literal["file", "blob"]
    name: str
    size: int
    sha256: str
    namespace: str = ""
    key: str = ""


def _invalid(what: object) -> BackupError:
    shown = repr(what)
    shown = shown if len(shown) <= 100 else shown[:97] + "..."
    return BackupError("backup_entry_invalid", f"the manifest lists {shown}, which is not something a backup holds")


def _facts(facts: Any, what: object) -> tuple[int, str]:
    """(size, sha256) of a file's manifest entry; ``backup_entry_invalid`` when they are not that."""
    if not isinstance(facts, dict):
        raise _invalid(what)
    sha, size = facts.get("sha256"), facts.get("size")
    if (
        not isinstance(sha, str)
        or not _HEX64.fullmatch(sha)
        or type(size) is not int
        or not 0 <= size <= MAX_ENTRY_BYTES
    ):
        raise _invalid(what)
    return size, sha


def blob_entry(blob: Any) -> Entry:
    """A manifest's blob as an :class:`Entry`: a canonical namespace UUID, a content-address key and
    a size; ``backup_entry_invalid`` otherwise."""
    if not isinstance(blob, dict):
        raise _invalid(blob)
    try:
        namespace, key = check_namespace(blob.get("namespace")), check_key(blob.get("key"))
    except ValueError:
        raise _invalid(f"{blob.get('namespace')}/{blob.get('key')}") from None
    size = blob.get("size")
    if type(size) is not int or not 0 <= size <= MAX_ENTRY_BYTES or blob.get("namespace") != namespace:
        raise _invalid(f"{namespace}/{key}")
    return Entry("blob", f"{namespace}/{key}", size, key[:64], namespace, key)


def entries(manifest: dict[str, Any]) -> list[Entry]:
    """Every item a manifest lists, checked against the closed set a backup holds: the files of
    :data:`SNAPSHOT_FILES` (the dump required) and blobs (:func:`blob_entry`). Raises
    ``backup_entry_invalid`` (anything else: ``../``, an absolute or unknown name, a key that is
    not a content address) or ``backup_incomplete`` (no dump)."""
    files = manifest.get("files")
    blobs = manifest.get("blobs", [])
    if not isinstance(files, dict) or not isinstance(blobs, list):
        raise BackupError("backup_entry_invalid", "the manifest does not list the snapshot's files and blobs")
    found: list[Entry] = []
    for rel, facts in files.items():
        constant = next((name for name in SNAPSHOT_FILES if name == rel), None)
        if constant is None:
            raise _invalid(rel)
        found.append(Entry("file", constant, *_facts(facts, rel)))
    if not any(e.name == DUMP for e in found):
        raise BackupError("backup_incomplete", f"the manifest lists no {DUMP}: this is not a whole backup")
    found += [blob_entry(blob) for blob in blobs]
    for blob in manifest.get("missing_blobs", []) or []:
        blob_entry(blob)
    return found


def object_name(key: BackupKey, snapshot: str, entry: Entry) -> str:
    """Where ``entry`` lives in DEST, from constants and content addresses only — the one answer
    every path (backup, verify, restore, prune; both kinds of DEST) uses: ``<snapshot>/<file>`` or
    ``data/<n[0:2]>/<n>`` with ``n`` = HMAC(key, ``<namespace>/<key>``)."""
    if entry.kind == "blob":
        name = key.blob_name(check_namespace(entry.namespace), check_key(entry.key))
        return f"{BLOBS_DIR}/{name[:2]}/{name}"
    if not SNAPSHOT_NAME.fullmatch(snapshot) or entry.name not in SNAPSHOT_FILES:
        raise _invalid(entry.name)
    return f"{snapshot}/{entry.name}"


def _context(snapshot: str, entry: Entry) -> str:
    return entry.name if entry.kind == "blob" else f"{snapshot}/{entry.name}"


def _local_name(entry: Entry) -> str:
    """The file name of a verified copy in the temporary folder (from the constant)."""
    return entry.name.replace("/", "_") if entry.kind == "file" else entry.sha256


# ---------------------------------------------------------------- manifests


def _manifest_mac(key: BackupKey, snapshot: str, encrypted: bool, body: bytes) -> str:
    head = b"mewdex backup manifest\x00" + snapshot.encode() + b"\x00" + (b"1" if encrypted else b"0") + b"\x00"
    return key.mac(head + body)


def seal_manifest(key: BackupKey, snapshot: str, manifest: dict[str, Any], *, encrypted: bool) -> bytes:
    """The stored ``manifest.json`` of ``snapshot``: the envelope ``{"mewdex_backup", "key_id",
    "encrypted", "body" (base64), "mac"}`` (see the module docstring)."""
    body = json.dumps(manifest, ensure_ascii=False).encode()
    if encrypted:
        out = io.BytesIO()
        _write_stored(key, True, f"{snapshot}/{MANIFEST}", io.BytesIO(body), out)
        body = out.getvalue()
    envelope = {
        "mewdex_backup": FORMAT,
        "key_id": key.key_id,
        "encrypted": encrypted,
        "body": base64.b64encode(body).decode(),
        "mac": _manifest_mac(key, snapshot, encrypted, body),
    }
    return json.dumps(envelope, indent=1).encode()


def _envelope(raw: bytes, where: str) -> dict[str, Any]:
    """The parsed envelope of a stored manifest; a format-1 manifest is ``backup_format_unsupported``."""
    try:
        envelope = json.loads(raw)
    except ValueError:
        envelope = None
    if isinstance(envelope, dict) and "mewdex_backup" not in envelope and "files" in envelope:
        raise BackupError(
            "backup_format_unsupported",
            f"{where} is a format-1 backup, made before backups were authenticated and encrypted: this mewdex "
            "restores only authenticated backups. Restore it with the mewdex version that made it (on a machine "
            "you trust, from a copy you trust), then make a new backup with this version",
        )
    if not isinstance(envelope, dict) or type(envelope.get("mewdex_backup")) is not int:
        raise BackupError("backup_unauthenticated", f"{where} is not a mewdex backup manifest")
    if envelope["mewdex_backup"] > FORMAT:
        raise BackupError("backup_too_new", f"{where} was made by a newer mewdex: upgrade mewdex first, then restore")
    return envelope


def open_manifest(raw: bytes, key: BackupKey, snapshot: str) -> dict[str, Any]:
    """The manifest of ``snapshot`` from its stored bytes, authenticated with ``key`` before
    anything in it is read (``backup_unauthenticated``), decrypted and checked against the closed
    set (:func:`entries`). ``manifest["encrypted"]`` says how the snapshot is stored."""
    where = f"{snapshot}/{MANIFEST}"
    envelope = _envelope(raw, where)
    if envelope.get("key_id") != key.key_id:
        raise BackupError(
            "backup_unauthenticated",
            f"{where} was made with another backup key: give that key (--key-file, MEWDEX_BACKUP_KEY_FILE or "
            "MEWDEX_BACKUP_PASSPHRASE)",
        )
    encrypted = envelope.get("encrypted")
    try:
        body = base64.b64decode(str(envelope.get("body", "")), validate=True)
    except ValueError:
        body = None
    mac = envelope.get("mac")
    if (
        body is None
        or not isinstance(encrypted, bool)
        or not isinstance(mac, str)
        or not hmac.compare_digest(mac, _manifest_mac(key, snapshot, encrypted, body))
    ):
        raise BackupError("backup_unauthenticated", f"{where} does not authenticate with the backup key: refused")
    if encrypted:
        body = b"".join(_decoded(key, True, where, io.BytesIO(body), where, "backup_unauthenticated"))
    try:
        manifest = json.loads(body)
    except ValueError:
        manifest = None
    if not isinstance(manifest, dict):
        raise BackupError("backup_corrupted", f"{where} is not a mewdex backup manifest")
    entries(manifest)
    if not isinstance(manifest.get("schema_revision"), str) or not isinstance(manifest.get("counts", {}), dict):
        raise BackupError("backup_corrupted", f"{where} is not a mewdex backup manifest")
    manifest["encrypted"] = encrypted
    return manifest


def mewdex_version() -> str:
    """The version a manifest records (the installed package's)."""
    return package_version()
