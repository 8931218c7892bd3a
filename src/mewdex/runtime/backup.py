"""Backups and restores: ``mewdex backup DEST`` / ``mewdex restore SRC`` and the scheduled backup.

A backup destination (a directory, or ``s3://bucket/prefix`` on the S3 store's settings) holds::

    DEST/mewdex-backup.json                        the header: format, key id, encrypted, passphrase salt
    DEST/data/<n[0:2]>/<n>                          every blob once; n = HMAC(key, "<namespace>/<key>")
    DEST/<YYYYMMDDTHHMMSSZ>/database.dump          pg_dump custom format
    DEST/<YYYYMMDDTHHMMSSZ>/secret.keys            the key ring (when there is one)
    DEST/<YYYYMMDDTHHMMSSZ>/keys/media_signing.json the media-link signing keys
    DEST/<YYYYMMDDTHHMMSSZ>/manifest.json          written last: a snapshot without one is unfinished

**The backup key** (32 bytes) is the operator's and never inside a backup: ``MEWDEX_BACKUP_KEY_FILE``
(a file of 64 hex characters), else ``MEWDEX_BACKUP_PASSPHRASE`` (scrypt, its salt in the header),
else ``<data dir>/backup.key`` (0600), which the first backup makes (``mewdex backup`` prints it once:
without it the backup cannot be restored). From it (HKDF-SHA256): the encryption key, the manifest's
MAC key and the blob-name key. Every file of a snapshot and every blob is encrypted with AES-256-GCM
in 1 MiB chunks (:func:`_write_stored`: a per-file key from a random salt and the entry's name, a
random nonce per chunk, the chunk index and a final-chunk flag in the associated data, so chunks
cannot be altered, reordered or cut off); blob names are HMACs, so the destination does not show
which pictures it holds, and a second backup to the same DEST still copies only the blobs it lacks.
``encrypt=False`` (``--no-encrypt``) stores the files as they are; the manifest is MAC'd either way.

The manifest (:data:`FORMAT`, in an envelope with ``key_id``, ``encrypted``, ``body``, ``mac`` =
HMAC-SHA256 over the snapshot name, the flag and the body) holds the mewdex version, the schema
revision, row counts, the sha256 and size of every snapshot file and every blob the dump references
(``namespace``, ``key`` — whose name is its sha256 — and ``size``).

**A backup is untrusted input**: restore authenticates the manifest before using anything in it
(``backup_unauthenticated``), then checks it against the closed set a backup holds
(:func:`entries`: the dump, :data:`KEY_FILES`, blobs by canonical namespace and content address;
anything else is ``backup_entry_invalid``). Where an entry lives is decided by one function,
:func:`object_name`, from constants and content addresses, never from a manifest string. Files are
read with no-follow (regular files only), bounded by their recorded size, decrypted and hashed while
streaming, into a fresh temporary folder; nothing else is written until the whole backup verified,
the dump's table of contents included (:func:`check_dump`: only the kinds of entry mewdex's schema
has, in ``public``, and its two extensions — a check that needs no database and keeps whole classes
of entry, ACLs, large objects, publications…, from ever reaching ``pg_restore``; it names no
objects: which objects, and how they are defined, is decided by the comparison below).

**What the dump defines must be exactly mewdex's own schema**, so that no code in a backup — not
even the body of one of mewdex's own functions, which the app's triggers later run as the
database's superuser — is anything mewdex did not write (:class:`Reference`). Restore builds the
reference beside the target, in scratch databases on the same server (``mewdex_restore_<purpose>_<16
random hex>``, from ``template0``; dropped however restore ends): mewdex's migrations run up to the
backup's schema revision, as mewdex migrates, and the result goes through the same
``pg_dump``/``pg_restore`` a backup's schema went through (PostgreSQL reads some definitions back
otherwise than the migrations wrote them). The indexes mewdex makes at run time (the per-model HNSW
indexes, :func:`mewdex.search.vector_index.made_index`) are made in the reference by the function
that makes them. :func:`schema_objects` reads both sides: every object any dependency names (any
class), and the definitions of functions (``pg_get_functiondef``: body, ``SECURITY DEFINER``,
``SET``, volatility; privileges), triggers (enabled or not), indexes, column defaults, constraints,
relations and columns (kind, privileges, row security, inheritance, views' queries), rules,
policies, event triggers, casts, operators, types, extensions, schemas and publications; owners
are left out, since all the dump makes belongs to the restore role until it passes to the database's
owner. Any object more, less or defined otherwise is refused by name, never by content
(``backup_dump_unexpected``). The dump's schema is first restored into a third scratch database and
compared there, before the target is touched (a ``--force`` restore keeps what it would have
replaced); then the dump is restored into the target by a throw-away role that owns only its schema
(no superuser, no ``pg_execute_server_program``), and what was restored is compared again before the
role's objects pass to the database's owner (an entry that fills a table may run SQL too): any
difference empties the schema. The configured database user needs ``CREATEDB`` for the scratch
databases, and the right to create :data:`EXTENSIONS` in them (``restore_scratch_denied``). The
check costs about three seconds (migrations, one schema round trip, one schema-only restore),
whatever the library's size. The run-time indexes are made in today's form: a later change of that
form must still recognise, and make, the older one for backups of the revisions before it.

Consistency while ``serve`` and workers run: the backup takes the backup lease
(:data:`mewdex.storage.journal.BACKUP_LEASE_KEY`, see there: blob removals are deferred while it is
held), opens one ``REPEATABLE READ`` transaction, exports its snapshot, lists the blobs in it and
runs ``pg_dump --snapshot`` on it (the embedded server's own ``pg_dump``, also against
``MEWDEX_DATABASE_URL``), then copies the blobs and releases the lease. Uploads meanwhile are simply
not in the backup. One backup runs at a time per database (``backup_running``).

Restore fills the data dir ``MEWDEX_DATA_DIR`` names (its embedded server) — or the empty external
database and store the settings name; it runs the migrations when the backup is older and refuses a
backup of a newer mewdex (``backup_too_new``) and a target that holds data unless ``force``.
Format-1 backups (before authentication) are refused (``backup_format_unsupported``).

Errors: :class:`BackupError` with a stable ``code`` (``backup_running``, ``backup_not_found``,
``backup_incomplete``, ``backup_corrupted``, ``backup_too_new``, ``backup_unauthenticated``,
``backup_format_unsupported``, ``backup_entry_invalid``, ``backup_dump_unexpected``,
``backup_key_missing``, ``backup_key_invalid``, ``backup_key_mismatch``, ``restore_target_not_empty``,
``restore_target_in_use``, ``restore_scratch_denied``, ``backup_dest_invalid``, ``backup_dest_insecure``,
``pg_dump_failed``, ``pg_restore_failed``, ``backup_store_failed``); messages name files, never a key or a credential.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import hmac
import io
import json
import logging
import math
import os
import re
import secrets
import shutil
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO, Literal, Protocol

from mewdex.config import get_settings, package_version
from mewdex.queue.registry import RetryPolicy, TaskContext, task_type
from mewdex.storage.blobs import BlobStore, check_key, check_namespace, thumbnail_namespace

log = logging.getLogger(__name__)
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
#: The backup key the first backup makes when none is configured (in the data dir, never backed up).
LOCAL_KEY_FILE = "backup.key"
SNAPSHOT_FORMAT = "%Y%m%dT%H%M%SZ"
SNAPSHOT_NAME = re.compile(r"\d{8}T\d{6}Z")
_BLOB_OBJECT = re.compile(r"[0-9a-f]{64}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: One backup at a time per database (``pg_try_advisory_lock``): "mewdexb1".
BACKUP_RUNNING_KEY = 0x6D65776465786231
LAST_BACKUP_SETTING = "last_backup"
SCHEDULE_STATE_SETTING = "backup_schedule"
CHUNK = 1024 * 1024
MAX_MANIFEST_BYTES = 256 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_ENTRY_BYTES = 1 << 40
# The encrypted file format: MAGIC, a 16-byte salt, then chunks of nonce (12) + ciphertext + tag (16).
MAGIC = b"MDXBKE2\n"
_SALT, _NONCE, _TAG = 16, 12, 16
SCRYPT = {"n": 2**15, "r": 8, "p": 1}


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


def parse_key(text: str, what: str) -> BackupKey:
    """A key from its text (64 hex characters); ``backup_key_invalid`` naming ``what`` otherwise."""
    value = text.strip().lower()
    if not _HEX64.fullmatch(value):
        raise BackupError("backup_key_invalid", f"{what} does not hold a backup key (64 hex characters)")
    return BackupKey(bytes.fromhex(value))


def key_from_file(path: Path) -> BackupKey:
    try:
        text = Path(path).expanduser().read_text(errors="replace")[:1024]
    except OSError as exc:
        raise BackupError("backup_key_invalid", f"the backup key file {path} cannot be read ({exc.strerror})") from None
    return parse_key(text, f"the backup key file {path}")


def _kdf_params(kdf: Any) -> dict[str, Any]:
    """The header's scrypt parameters, bounded (a header is untrusted: no 1 TiB scrypt)."""
    ok = isinstance(kdf, dict) and kdf.get("name") == "scrypt"
    ok = ok and isinstance(kdf.get("salt"), str) and re.fullmatch(r"[0-9a-f]{32,128}", kdf["salt"]) is not None
    ok = ok and all(type(kdf.get(k)) is int for k in ("n", "r", "p"))
    ok = ok and 2**14 <= kdf["n"] <= 2**20 and kdf["n"] & (kdf["n"] - 1) == 0 and 1 <= kdf["r"] <= 16
    if not (ok and 1 <= kdf["p"] <= 4):
        raise BackupError("backup_dest_invalid", f"the backup header's passphrase parameters are not valid ({HEADER})")
    return {k: kdf[k] for k in ("name", "salt", "n", "r", "p")}


def key_from_passphrase(passphrase: str, kdf: dict[str, Any]) -> BackupKey:
    kdf = _kdf_params(kdf)
    master = hashlib.scrypt(
        passphrase.encode(), salt=bytes.fromhex(kdf["salt"]), n=kdf["n"], r=kdf["r"], p=kdf["p"],
        maxmem=256 * 1024 * 1024, dklen=32,
    )  # fmt: skip
    return BackupKey(master, kdf)


def local_key_path() -> Path:
    return get_settings().data_dir.resolve() / LOCAL_KEY_FILE


def _configured_key(
    header: dict[str, Any] | None, *, key_file: Path | None = None, passphrase: str | None = None, new_dest: bool
) -> BackupKey | None:
    """The key the options or settings name: a key file (``key_file``, ``MEWDEX_BACKUP_KEY_FILE``), a
    passphrase (``passphrase``, ``MEWDEX_BACKUP_PASSPHRASE``; its salt from the header, a new one for
    a new DEST), else ``<data dir>/backup.key``; None when there is none."""
    settings = get_settings()
    path = key_file or settings.backup_key_file
    if path:
        return key_from_file(Path(path))
    if passphrase is None and settings.backup_passphrase is not None:
        passphrase = settings.backup_passphrase.get_secret_value()
    if passphrase:
        kdf = (header or {}).get("kdf")
        if kdf is None:
            if not new_dest:
                raise BackupError(
                    "backup_key_missing",
                    f"these backups were made with a key file, not a passphrase (no salt in {HEADER}): "
                    "give the key file (--key-file or MEWDEX_BACKUP_KEY_FILE)",
                )
            kdf = {"name": "scrypt", "salt": secrets.token_hex(16), **SCRYPT}
        return key_from_passphrase(passphrase, kdf)
    local = local_key_path()
    if local.is_file():
        return key_from_file(local)
    return None


def _write_local_key(key: BackupKey) -> Path:
    """Keep ``key`` as ``<data dir>/backup.key`` (0600, made once: an existing one is kept)."""
    path = local_key_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key.text() + "\n")
        out.flush()
        os.fsync(out.fileno())
    return path


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


# ---------------------------------------------------------------- destinations


class Target(Protocol):
    """A backup destination: named objects (``rel``: built by :func:`object_name` or constants)."""

    def describe(self) -> str: ...

    def put_file(self, rel: str, path: Path) -> None: ...

    def open(self, rel: str) -> BinaryIO:
        """The stored bytes of ``rel`` (a regular file, never through a link); FileNotFoundError
        when missing, ``backup_entry_invalid`` when it is something else."""
        ...

    def size(self, rel: str) -> int | None:
        """Bytes stored under ``rel``; None when there is nothing."""
        ...

    def delete(self, rel: str) -> None: ...

    def blob_objects(self) -> list[str]:
        """Every blob object name (``data/<n[0:2]>/<n>``) in DEST."""
        ...

    def snapshots(self) -> list[str]:
        """Names of the snapshots that have a manifest, oldest first."""
        ...

    def remove_snapshot(self, name: str) -> None: ...


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class DirTarget:
    """A backup directory on this machine's file system; below ``root`` no symbolic link is followed."""

    def __init__(self, root: Path):
        self.root = root

    def describe(self) -> str:
        return str(self.root)

    def _dir(self, parts: list[str], create: bool) -> int:
        """A descriptor of ``root/<parts>``, walked without following links (made with ``create``)."""
        if create:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for part in parts:
                if part in ("", ".", "..") or "/" in part:
                    raise _invalid(part)
                if create:
                    try:
                        os.mkdir(part, 0o700, dir_fd=fd)
                    except FileExistsError:
                        pass
                try:
                    inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise BackupError(
                            "backup_entry_invalid", f"{part} in {self.root} is a link or not a folder"
                        ) from None
                    raise
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        return fd

    def put_file(self, rel: str, path: Path) -> None:
        *parts, name = rel.split("/")
        fd = self._dir(parts, create=True)
        try:
            tmp = f".{name}.{uuid.uuid4().hex}.part"
            out_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
            with os.fdopen(out_fd, "wb") as out, open(path, "rb") as source:
                shutil.copyfileobj(source, out, CHUNK)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        finally:
            os.close(fd)

    def open(self, rel: str) -> BinaryIO:
        *parts, name = rel.split("/")
        fd = self._dir(parts, create=False)
        try:
            try:
                handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise BackupError("backup_entry_invalid", f"{rel} is a symbolic link, not a file") from None
                raise
        finally:
            os.close(fd)
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            os.close(handle)
            raise BackupError("backup_entry_invalid", f"{rel} is not a regular file")
        return os.fdopen(handle, "rb")

    def size(self, rel: str) -> int | None:
        try:
            with self.open(rel) as handle:
                return os.fstat(handle.fileno()).st_size
        except (FileNotFoundError, NotADirectoryError, BackupError):
            return None

    def delete(self, rel: str) -> None:
        *parts, name = rel.split("/")
        try:
            fd = self._dir(parts, create=False)
        except FileNotFoundError:
            return
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)

    def blob_objects(self) -> list[str]:
        base = self.root / BLOBS_DIR
        if not base.is_dir() or base.is_symlink():
            return []
        found = []
        for shard in sorted(os.scandir(base), key=lambda e: e.name):
            if not shard.is_dir(follow_symlinks=False) or not re.fullmatch(r"[0-9a-f]{2}", shard.name):
                continue
            for entry in sorted(os.scandir(shard.path), key=lambda e: e.name):
                ok = _BLOB_OBJECT.fullmatch(entry.name) and entry.name[:2] == shard.name
                if ok and entry.is_file(follow_symlinks=False):
                    found.append(f"{BLOBS_DIR}/{shard.name}/{entry.name}")
        return found

    def snapshots(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            p.name
            for p in self.root.iterdir()
            if SNAPSHOT_NAME.fullmatch(p.name) and self.size(f"{p.name}/{MANIFEST}") is not None
        )

    def remove_snapshot(self, name: str) -> None:
        if SNAPSHOT_NAME.fullmatch(name):
            path = self.root / name
            if path.is_symlink():
                path.unlink()
            else:
                shutil.rmtree(path, ignore_errors=True)


def _loopback(host: str | None) -> bool:
    import ipaddress

    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


class S3Target:
    """A backup prefix in an S3 bucket (credentials and endpoint: the S3 store's settings). An
    ``http://`` endpoint must be loopback (or ``MEWDEX_BACKUP_S3_ALLOW_HTTP``: ``backup_dest_insecure``);
    puts ask for server-side encryption (``MEWDEX_BACKUP_S3_SSE``)."""

    def __init__(self, url: str):
        from urllib.parse import urlsplit

        from mewdex.storage import s3

        settings = get_settings()
        endpoint = settings.s3_endpoint_url
        if endpoint and urlsplit(endpoint).scheme == "http" and not settings.backup_s3_allow_http:
            if not _loopback(urlsplit(endpoint).hostname):
                raise BackupError(
                    "backup_dest_insecure",
                    "the S3 endpoint is plain http:// on another machine: use https://, or set "
                    "MEWDEX_BACKUP_S3_ALLOW_HTTP=true for a network you trust",
                )
        base = s3.from_settings(
            url,
            endpoint_url=endpoint,
            region=settings.s3_region,
            addressing_style=settings.s3_addressing_style,
        )
        self.url, self.client, self.bucket, self.prefix = url, base.client, base.bucket, base.prefix
        self.sse = None if settings.backup_s3_sse == "none" else settings.backup_s3_sse

    def describe(self) -> str:
        return self.url

    def _call(self, what: str, fn, **kw):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(Bucket=self.bucket, **kw)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchKey", "NotFound"):
                raise FileNotFoundError(what) from None
            raise BackupError("backup_store_failed", f"the object store refused {what} ({code})") from None
        except BotoCoreError as exc:
            message = f"the object store failed on {what}: {type(exc).__name__}"
            raise BackupError("backup_store_failed", message) from None

    def put_file(self, rel: str, path: Path) -> None:
        extra = {"ServerSideEncryption": self.sse} if self.sse else {}
        with open(path, "rb") as handle:
            self._call(rel, self.client.put_object, Key=self.prefix + rel, Body=handle, **extra)

    def open(self, rel: str) -> BinaryIO:
        return _Body(self._call(rel, self.client.get_object, Key=self.prefix + rel)["Body"])  # type: ignore[return-value]

    def size(self, rel: str) -> int | None:
        try:
            return int(self._call(rel, self.client.head_object, Key=self.prefix + rel)["ContentLength"])
        except FileNotFoundError:
            return None

    def delete(self, rel: str) -> None:
        self._call(rel, self.client.delete_object, Key=self.prefix + rel)

    def _list(self, prefix: str, delimiter: str | None = None) -> Iterator[dict]:
        token = None
        while True:
            kw: dict[str, Any] = {"Prefix": prefix}
            if delimiter:
                kw["Delimiter"] = delimiter
            if token:
                kw["ContinuationToken"] = token
            page = self._call("a listing", self.client.list_objects_v2, **kw)
            yield page
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")

    def blob_objects(self) -> list[str]:
        found = []
        for page in self._list(f"{self.prefix}{BLOBS_DIR}/"):
            for item in page.get("Contents") or []:
                rel = item["Key"][len(self.prefix) :]
                parts = rel.split("/")
                if len(parts) == 3 and _BLOB_OBJECT.fullmatch(parts[2]) and parts[1] == parts[2][:2]:
                    found.append(rel)
        return sorted(found)

    def snapshots(self) -> list[str]:
        names = []
        for page in self._list(self.prefix, "/"):
            for entry in page.get("CommonPrefixes") or []:
                name = entry["Prefix"][len(self.prefix) :].strip("/")
                if SNAPSHOT_NAME.fullmatch(name) and self.size(f"{name}/{MANIFEST}") is not None:
                    names.append(name)
        return sorted(names)

    def remove_snapshot(self, name: str) -> None:
        if not SNAPSHOT_NAME.fullmatch(name):
            return
        for page in self._list(f"{self.prefix}{name}/"):
            keys = [{"Key": o["Key"]} for o in page.get("Contents") or []]
            if keys:
                self._call(name, self.client.delete_objects, Delete={"Objects": keys})


class _Body:
    """An object's streaming body as a closable reader (``with``)."""

    def __init__(self, body: Any):
        self.body = body

    def read(self, size: int = -1) -> bytes:
        return self.body.read(size)

    def __enter__(self) -> _Body:
        return self

    def __exit__(self, *exc: object) -> None:
        self.body.close()


def open_target(dest: str | Path) -> Target:
    """The destination ``dest`` names: ``s3://bucket/prefix`` or a directory path."""
    text = str(dest)
    if text.startswith("s3://"):
        try:
            return S3Target(text)
        except ValueError as exc:
            raise BackupError("backup_dest_invalid", str(exc)) from None
    if "://" in text:
        raise BackupError("backup_dest_invalid", f"{text!r} is neither a directory nor s3://bucket/prefix")
    return DirTarget(Path(text).expanduser().resolve())


def _read_small(target: Target, rel: str, limit: int) -> bytes | None:
    """The bytes of a small object (header, manifest envelope), at most ``limit``; None when missing."""
    try:
        with target.open(rel) as raw:
            return _read_full(_Bounded(raw, limit, rel), limit + 1)
    except (FileNotFoundError, NotADirectoryError):
        return None


def read_header(target: Target) -> dict[str, Any] | None:
    """DEST's header (``mewdex_backup``, ``encrypted``, ``key_id``, ``kdf``); None when there is none."""
    raw = _read_small(target, HEADER, MAX_HEADER_BYTES)
    if raw is None:
        return None
    try:
        header = json.loads(raw)
    except ValueError:
        header = None
    if (
        not isinstance(header, dict)
        or type(header.get("mewdex_backup")) is not int
        or not isinstance(header.get("encrypted"), bool)
        or not isinstance(header.get("key_id"), str)
    ):
        raise BackupError("backup_dest_invalid", f"{HEADER} in {target.describe()} is not a mewdex backup header")
    if header["mewdex_backup"] > FORMAT:
        raise BackupError("backup_too_new", f"{target.describe()} was written by a newer mewdex: upgrade mewdex first")
    if header.get("kdf") is not None:
        header["kdf"] = _kdf_params(header["kdf"])
    return header


def _write_bytes(target: Target, rel: str, data: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="mewdex-backup-") as tmp:
        path = Path(tmp) / "object"
        path.write_bytes(data)
        target.put_file(rel, path)


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


def _raw_manifest(target: Target, name: str) -> bytes:
    if not SNAPSHOT_NAME.fullmatch(name):
        raise BackupError("backup_not_found", f"{name!r} is not a snapshot name (YYYYMMDDTHHMMSSZ)")
    raw = _read_small(target, f"{name}/{MANIFEST}", MAX_MANIFEST_BYTES)
    if raw is None:
        raise BackupError("backup_not_found", f"{name}/{MANIFEST} is not in {target.describe()}")
    return raw


def read_manifest(target: Target, name: str, key: BackupKey) -> dict[str, Any]:
    """The authenticated manifest of snapshot ``name`` (:func:`open_manifest`)."""
    return open_manifest(_raw_manifest(target, name), key, name)


# ---------------------------------------------------------------- database access


def _pg_binary(name: str) -> str:
    from mewdex.db.embedded import client_binary

    return str(client_binary(name))


def _libpq() -> tuple[str, dict[str, str]]:
    """(libpq URL without the password, environment with ``PGPASSWORD``) of the configured database."""
    from sqlalchemy.engine import make_url

    from mewdex.db.engine import database_url

    url = make_url(database_url(get_settings()))
    env = {**os.environ}
    if url.password:
        env["PGPASSWORD"] = str(url.password)
    plain = url.set(drivername="postgresql")._replace(password=None)
    return plain.render_as_string(hide_password=False), env


def _connect(url: str, env: dict[str, str]):
    import psycopg

    return psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True, application_name="mewdex backup")


def mewdex_version() -> str:
    return package_version()


COUNTED: tuple[str, ...] = ("scopes", "users", "memes", "derived_image_thumbnails", "meme_collections")
COUNTED += ("channel_bindings", "external_system_definitions", "external_systems", "scheduled_jobs", "conversations")


def _snapshot_facts(cur) -> tuple[str, dict[str, int], list[dict[str, Any]]]:
    """(schema revision, row counts, blobs) as the snapshot transaction of ``cur`` sees them."""
    revision = cur.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    counts = {}
    for table in COUNTED:
        exists = cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f"public.{table}",)).fetchone()[0]
        if exists:
            counts[table] = cur.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    blobs: dict[tuple[str, str], int] = {}
    for namespace, key, size in cur.execute(
        "SELECT s.storage_namespace, m.storage_key, m.size_bytes FROM memes m JOIN scopes s ON s.id = m.scope_id"
    ):
        blobs[(str(namespace), key)] = int(size)
    for namespace, key, size in cur.execute(
        "SELECT s.storage_namespace, t.output_key, coalesce(t.output_size_bytes, 0) FROM derived_image_thumbnails t"
        " JOIN scopes s ON s.id = t.scope_id WHERE t.output_key IS NOT NULL"
    ):
        blobs[(thumbnail_namespace(namespace), key)] = int(size)
    listed = [{"namespace": ns, "key": key, "size": size} for (ns, key), size in sorted(blobs.items())]
    return revision, counts, listed


# ---------------------------------------------------------------- backup


@dataclass
class _Lease:
    conn: Any

    def release(self) -> None:
        # Unlock before closing: a closed client's backend lets its session locks go a moment later,
        # and the deferred removals that follow (finish_deferred) would still see the lease held.
        try:
            self.conn.execute("SELECT pg_advisory_unlock_all()")
        except Exception:
            log.warning("backup: releasing the lease failed; closing its connection releases it", exc_info=True)
        try:
            self.conn.close()  # session-level advisory locks go with the connection
        except Exception:
            log.warning("backup: closing the lease connection failed", exc_info=True)


def backup(
    dest: str | Path, *, keep: int | None = None, progress: Progress | None = None, encrypt: bool = True
) -> dict[str, Any]:
    """Back up the database, its blobs and the key files to ``dest`` (see the module docstring),
    encrypted with the backup key unless ``encrypt`` is False; with ``keep``, then remove all but
    the newest ``keep`` snapshots and the blobs only they used. Returns the summary ``{"snapshot",
    "dest", "mewdex_version", "schema_revision", "counts", "blobs": {"total", "copied", "reused",
    "missing", "bytes_copied"}, "files", "removed_snapshots", "encrypted", "key_generated" (the path
    of a backup key this backup made, else None), "seconds"}``. Raises :class:`BackupError`; the
    result (either way) is recorded for ``/health``."""
    started = time.monotonic()
    progress = progress or _Quiet()
    try:
        summary = _backup(open_target(dest), progress, keep, encrypt)
    except BackupError as exc:
        record_result({"status": "failed", "code": exc.code, "message": exc.message, "dest": str(dest)})
        raise
    except Exception as exc:
        record_result({"status": "failed", "code": "backup_failed", "message": type(exc).__name__, "dest": str(dest)})
        raise
    summary["seconds"] = round(time.monotonic() - started, 3)
    result = {"status": "ok", **{k: summary[k] for k in ("snapshot", "dest", "counts", "blobs", "seconds")}}
    if summary["missing_blobs"]:
        result |= {"status": "incomplete", "code": "backup_blobs_missing"}
        result["message"] = missing_message(summary["missing_blobs"])
    record_result(result)
    return summary


def _backup_key(target: Target, encrypt: bool) -> tuple[BackupKey, Path | None]:
    """The key this backup uses (:func:`_configured_key`; a new ``<data dir>/backup.key`` for a new
    DEST when none is configured) and the path of a key it made; writes DEST's header when new.
    ``backup_key_missing`` / ``backup_key_mismatch`` when DEST's backups use another key."""
    header = read_header(target)
    key = _configured_key(header, new_dest=header is None)
    made = None
    if key is None:
        if header is not None:
            raise BackupError(
                "backup_key_missing",
                f"{target.describe()} holds backups made with a backup key this data dir does not have: set "
                "MEWDEX_BACKUP_KEY_FILE or MEWDEX_BACKUP_PASSPHRASE to it, or back up to another DEST",
            )
        key = BackupKey(secrets.token_bytes(32))
        made = _write_local_key(key)
        log.warning(
            "backup: made a new backup key, %s: copy it somewhere safe, away from this machine; without it "
            "the backups cannot be restored",
            made,
        )
    if header is None:
        header = {"mewdex_backup": FORMAT, "encrypted": encrypt, "key_id": key.key_id, "kdf": key.kdf}
        _write_bytes(target, HEADER, json.dumps(header, indent=1).encode())
    elif header["key_id"] != key.key_id:
        raise BackupError(
            "backup_key_mismatch",
            f"{target.describe()} holds backups made with another backup key: use that key, or another DEST",
        )
    elif header["encrypted"] != encrypt:
        said = "encrypted" if header["encrypted"] else "unencrypted"
        raise BackupError("backup_dest_invalid", f"{target.describe()} holds {said} backups: use another DEST")
    return key, made


def _backup(target: Target, progress: Progress, keep: int | None, encrypt: bool) -> dict[str, Any]:
    from mewdex.storage import blob_store, journal

    settings = get_settings()
    url, env = _libpq()
    conn = _connect(url, env)
    lease = _Lease(conn)
    try:
        if not conn.execute("SELECT pg_try_advisory_lock(%s)", (BACKUP_RUNNING_KEY,)).fetchone()[0]:
            raise BackupError("backup_running", "another backup of this database is running")
        key, made = _backup_key(target, encrypt)
        name = datetime.now(UTC).strftime(SNAPSHOT_FORMAT)
        if name in target.snapshots():
            time.sleep(1.0)
            name = datetime.now(UTC).strftime(SNAPSHOT_FORMAT)
        progress.phase("waiting for deletions in flight", None)
        conn.execute("SELECT pg_advisory_lock(%s)", (journal.BACKUP_LEASE_KEY,))
        with tempfile.TemporaryDirectory(prefix="mewdex-backup-") as tmp_dir:
            tmp = Path(tmp_dir)
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            snapshot = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
            revision, counts, blobs = _snapshot_facts(conn.cursor())
            progress.phase("dumping the database", None)
            dump = tmp / DUMP
            proc = subprocess.run(
                [_pg_binary("pg_dump"), "--format=custom", f"--snapshot={snapshot}", f"--file={dump}", url],
                env=env,
                capture_output=True,
                text=True,
            )
            conn.execute("COMMIT")
            if proc.returncode != 0:
                raise BackupError("pg_dump_failed", f"pg_dump failed: {proc.stderr.strip()[-500:]}")
            files = {DUMP: dump}
            for rel in KEY_FILES:
                source = settings.data_dir.resolve() / rel
                if source.is_file():
                    files[rel] = source
            copied, stats, blobs, missing = _copy_blobs(blob_store(), target, key, encrypt, blobs, progress, tmp)
            progress.phase("writing the snapshot", len(files) + 1)
            described = {}
            for rel, path in files.items():
                entry = Entry("file", rel, 0, "0" * 64)
                stored = tmp / "stored"
                with open(path, "rb") as source_file, open(stored, "wb") as out:
                    sha, size = _write_stored(key, encrypt, _context(name, entry), source_file, out)
                described[rel] = {"sha256": sha, "size": size}
                target.put_file(object_name(key, name, entry), stored)
                stored.unlink()
                progress.advance()
            manifest = {
                "format": FORMAT,
                "mewdex_version": mewdex_version(),
                "schema_revision": revision,
                "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "secret_key_from_env": bool(settings.secret_key),
                "counts": counts,
                "files": described,
                "blobs": blobs,
                "missing_blobs": missing,
            }
            _write_bytes(target, f"{name}/{MANIFEST}", seal_manifest(key, name, manifest, encrypted=encrypt))
            progress.advance()
        conn.execute("SELECT pg_advisory_unlock(%s)", (journal.BACKUP_LEASE_KEY,))  # every blob is copied
        _finish_deferred()
        # Still one backup at a time (backup_running): no other backup copies blobs into DEST while
        # the blobs only the dropped snapshots used are removed.
        removed = prune(target, keep, key) if keep else []
    finally:
        lease.release()
    return {
        "snapshot": name,
        "dest": target.describe(),
        "mewdex_version": mewdex_version(),
        "schema_revision": revision,
        "counts": counts,
        "blobs": stats,
        "files": sorted(described),
        "removed_snapshots": removed,
        "copied_keys": copied,
        "missing_blobs": missing,
        "encrypted": encrypt,
        "key_generated": str(made) if made else None,
    }


def _copy_blobs(
    source: BlobStore, target: Target, key: BackupKey, encrypt: bool, blobs: list[dict], progress: Progress, tmp: Path
):
    """Copy each blob DEST lacks (as :func:`object_name` names it); returns (keys copied, stats, the
    blobs held with their true sizes, the blobs missing from ``source``)."""
    progress.phase("copying blobs", len(blobs))
    copied: list[str] = []
    stats = {"total": len(blobs), "copied": 0, "reused": 0, "missing": 0, "bytes_copied": 0}
    held: list[dict] = []
    missing: list[dict] = []
    for blob in blobs:
        namespace, blob_key = blob["namespace"], blob["key"]
        entry = Entry("blob", f"{namespace}/{blob_key}", 0, blob_key[:64], namespace, blob_key)
        rel = object_name(key, "", entry)
        try:
            stored = target.size(rel)
            if stored is not None:
                size = _plain_size(encrypt, stored)
                stats["reused"] += 1
            else:
                path = tmp / "blob"
                with source.open(namespace, blob_key) as handle, open(path, "wb") as out:
                    _, size = _write_stored(key, encrypt, _context("", entry), handle, out)
                target.put_file(rel, path)
                path.unlink()
                stats["copied"] += 1
                stats["bytes_copied"] += size
                copied.append(blob_key)
            held.append({"namespace": namespace, "key": blob_key, "size": size})
        except FileNotFoundError:
            stats["missing"] += 1
            missing.append(blob)
            log.error(
                "backup: blob %s/%s is referenced by the database but missing from the store", namespace, blob_key
            )
        except OSError as exc:
            raise BackupError("backup_store_failed", f"copying blob {namespace}/{blob_key} failed: {exc}") from None
        progress.advance()
    return copied, stats, held, missing


def missing_message(missing: list[dict]) -> str:
    """One line for a backup whose database references files the blob store lacks: how many, the
    first few (namespace/key), and what fixes it."""
    shown = ", ".join(f"{b['namespace']}/{b['key']}" for b in missing[:3]) + (", …" if len(missing) > 3 else "")
    return (
        f"{len(missing)} file(s) the database references are missing from the blob store ({shown}); the "
        "snapshot has everything else. A missing thumbnail comes back with `mewdex thumbnails reconcile`; a "
        "meme's file must be put back from an earlier backup, or the meme deleted (`mewdex delete ID`)"
    )


def _finish_deferred() -> None:
    """Blob removals deferred while this backup held its lease, done now."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.storage import blob_store, journal

    try:
        with get_sessionmaker().begin() as session:
            journal.finish_deferred(session, blob_store())
    except Exception:  # storage recovery finishes them later
        log.warning("backup: finishing deferred blob removals failed", exc_info=True)


def prune(target: Target, keep: int, key: BackupKey) -> list[str]:
    """Remove all but the newest ``keep`` snapshots that authenticate with ``key``, then the blobs no
    remaining one lists. A snapshot that does not authenticate is neither counted nor removed (and
    while one is there, no blob is removed). Returns the removed snapshot names."""
    good: dict[str, dict[str, Any]] = {}
    strangers = []
    for name in target.snapshots():
        try:
            good[name] = read_manifest(target, name, key)
        except BackupError as exc:
            strangers.append(name)
            log.warning("backup: snapshot %s is not pruned: %s", name, exc.message)
    names = sorted(good)
    drop = names[:-keep] if keep > 0 else []
    if not drop:
        return []
    for name in drop:
        target.remove_snapshot(name)
    if strangers:
        return drop
    kept = {object_name(key, name, e) for name in names[-keep:] for e in entries(good[name]) if e.kind == "blob"}
    for rel in target.blob_objects():
        if rel not in kept:
            target.delete(rel)
    return drop


# ---------------------------------------------------------------- results


def record_result(result: dict[str, Any]) -> None:
    """Store the last backup's result (``platform_settings.last_backup``) for ``/health`` and the
    admin page, with ``last_ok_at`` (the last successful one's end); a database that cannot be
    written is logged, never raised."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.platform.instance import get_setting, set_setting

    now = datetime.now(UTC).isoformat(timespec="seconds")
    try:
        with get_sessionmaker().begin() as session:
            previous = get_setting(session, LAST_BACKUP_SETTING, None) or {}
            # an incomplete snapshot still restores everything but the files named in its result
            last_ok = now if result.get("status") in ("ok", "incomplete") else previous.get("last_ok_at")
            set_setting(session, LAST_BACKUP_SETTING, {**result, "finished_at": now, "last_ok_at": last_ok})
    except Exception:
        log.warning("backup: could not record the result", exc_info=True)


def last_result(session) -> dict[str, Any] | None:
    """The last backup's result: ``{"status": "ok", "finished_at", "last_ok_at", "dest", "snapshot",
    "counts", "blobs", "seconds"}`` (``"status": "incomplete"`` with ``"code": "backup_blobs_missing"``
    and ``"message"`` when files the database references were missing from the store) or
    ``{"status": "failed", "code", "message", "dest", "finished_at", "last_ok_at"}``; None when no
    backup ran."""
    from mewdex.platform.instance import get_setting

    return get_setting(session, LAST_BACKUP_SETTING, None)


def health(session) -> dict[str, Any]:
    """``/health``'s ``backup`` entry: ``{"configured": bool, "last": last_result | None, "stale":
    bool}``; ``stale``: scheduled backups are configured (``MEWDEX_BACKUP_DEST``) and the last
    successful backup — or, without one, the start of the schedule — is older than twice their
    interval (at least a day)."""
    from mewdex.platform.instance import get_setting

    settings = get_settings()
    last = last_result(session)
    stale = False
    if settings.backup_dest:
        # since the last good backup, or since scheduled backups started (the first check) when none
        since = (last or {}).get("last_ok_at") or (get_setting(session, SCHEDULE_STATE_SETTING, None) or {}).get(
            "since"
        )
        if since is not None:
            stale = datetime.now(UTC) - datetime.fromisoformat(since) > stale_after(settings.backup_cron)
    return {"configured": bool(settings.backup_dest), "last": last, "stale": stale}


def operations_overview(session) -> dict[str, Any]:
    """The admin page's operations section: ``{"backup": health(), "schedule": {"dest", "cron", "keep"} |
    None (no ``MEWDEX_BACKUP_DEST``), "rebuilds": mewdex.search.generations.builds()}``."""
    from mewdex.search.generations import builds

    settings = get_settings()
    schedule = None
    if settings.backup_dest:
        schedule = {"dest": settings.backup_dest, "cron": settings.backup_cron, "keep": settings.backup_keep}
    return {"backup": health(session), "schedule": schedule, "rebuilds": builds(session)}


def stale_after(cron: str) -> timedelta:
    """Twice the gap between the cron expression's next two runs, at least a day."""
    from mewdex.schedules import cron as cronmath

    runs = cronmath.next_runs(cron, "UTC", datetime.now(UTC), 2)
    gap = runs[1] - runs[0] if len(runs) == 2 else timedelta(days=1)
    return max(2 * gap, timedelta(days=1))


# ---------------------------------------------------------------- restore


def resolve_source(src: str | Path) -> tuple[Target, str]:
    """``src`` as (destination, snapshot name): a snapshot directory/prefix itself
    (``DEST/<snapshot>``), or a backup destination (its newest snapshot)."""
    text = str(src).rstrip("/")
    if not text.startswith("s3://"):
        text = str(Path(text).expanduser().resolve())
    parent, _, last = text.rpartition("/")
    if SNAPSHOT_NAME.fullmatch(last) and open_target(text).size(MANIFEST) is not None:
        return open_target(parent or "/"), last  # a snapshot: its parent holds the header and the blobs
    target = open_target(text)
    names = target.snapshots()
    if not names:
        raise BackupError("backup_not_found", f"no backup (a snapshot with {MANIFEST}) in {target.describe()}")
    return target, names[-1]


def known_revisions() -> list[str]:
    """The schema revisions this mewdex's migrations know, oldest first."""
    from alembic.script import ScriptDirectory

    from mewdex.db.migrate import alembic_config

    script = ScriptDirectory.from_config(alembic_config())
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


def check_compatible(manifest: dict[str, Any]) -> None:
    """Refuse a backup of a newer mewdex (a schema revision these migrations do not know, or a newer
    manifest format) with ``backup_too_new``."""
    revision = manifest.get("schema_revision")
    if (
        not isinstance(manifest.get("format", 0), int)
        or manifest.get("format", 0) > FORMAT
        or (revision not in known_revisions())
    ):
        raise BackupError(
            "backup_too_new",
            f"this backup was made by mewdex {manifest.get('mewdex_version')} (schema {revision}); this is "
            f"mewdex {mewdex_version()}, which does not know that schema: upgrade mewdex first, then restore",
        )


class _Sink:
    def write(self, data: bytes) -> int:
        return len(data)


def fetch(target: Target, key: BackupKey, snapshot: str, entry: Entry, encrypted: bool, out: Any) -> None:
    """Stream ``entry`` from DEST into ``out``: opened without following links (a regular file only),
    at most its recorded size read, decrypted and hashed on the way. ``backup_incomplete`` (missing),
    ``backup_corrupted`` (larger, smaller, altered), ``backup_entry_invalid`` (a link or not a file)."""
    rel = object_name(key, snapshot, entry)
    what = rel if entry.kind == "file" else f"blob {entry.name}"
    digest, size = hashlib.sha256(), 0
    try:
        raw = target.open(rel)
    except (FileNotFoundError, NotADirectoryError):
        raise BackupError("backup_incomplete", f"{what} is missing from the backup") from None
    with raw:
        source = _Bounded(raw, stored_size(encrypted, entry.size), what)
        for chunk in _decoded(key, encrypted, _context(snapshot, entry), source, what, "backup_corrupted"):
            size += len(chunk)
            if size > entry.size:
                raise BackupError("backup_corrupted", f"{what} is larger than its manifest entry says")
            digest.update(chunk)
            out.write(chunk)
    if size != entry.size or digest.hexdigest() != entry.sha256:
        raise BackupError("backup_corrupted", f"{what} is corrupted (its sha256 differs from the manifest)")


def verify(
    target: Target, name: str, manifest: dict[str, Any], tmp: Path, progress: Progress, key: BackupKey
) -> dict[str, Path]:
    """Check the whole snapshot before anything is used: every file fetched (:func:`fetch`) into
    ``tmp`` (names from the constants), every blob read and checked, the dump's entries checked
    (:func:`check_dump`). Returns the local copies by file name."""
    listed = entries(manifest)
    encrypted = manifest.get("encrypted", True) is not False
    progress.phase("checking the backup", len(listed))
    local: dict[str, Path] = {}
    for entry in listed:
        if entry.kind == "file":
            path = tmp / _local_name(entry)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                fetch(target, key, name, entry, encrypted, out)
            local[entry.name] = path
        else:
            fetch(target, key, name, entry, encrypted, _Sink())
        progress.advance()
    check_dump(local[DUMP])
    return local


# What a dump of mewdex's schema holds (``pg_restore -l`` of a real one): these kinds of entry, in
# ``public``, and these extensions. Checked before any database is touched; what the entries define
# is then compared with mewdex's own schema (:class:`Reference`).
_TOC_KINDS = (
    "TABLE DATA", "TABLE", "SEQUENCE OWNED BY", "SEQUENCE SET", "SEQUENCE", "DEFAULT", "INDEX",
    "FK CONSTRAINT", "CONSTRAINT", "FUNCTION", "TRIGGER", "EXTENSION", "COMMENT",
)  # fmt: skip
#: The entries that fill tables rather than define anything (left out of the trial restore).
_DATA_KINDS = ("TABLE DATA", "SEQUENCE SET")
EXTENSIONS = ("vector", "pg_trgm")
_TOC_LINE = re.compile(r"(\d+); (\d+) (\d+) (.*)")


def _toc_entry(line: str) -> tuple[str | None, list[str]]:
    """(kind, the words after it) of a ``pg_restore -l`` line; kind None when it is none of :data:`_TOC_KINDS`."""
    match = _TOC_LINE.fullmatch(line.rstrip())
    kind = next((k for k in _TOC_KINDS if match and match[4].startswith(k + " ")), None)
    return kind, (match[4][len(kind) + 1 :].split(" ") if match and kind else [])


def check_dump(dump: Path) -> list[str]:
    """The dump's table of contents (``pg_restore -l``), checked before any database is touched: only
    the kinds of entry mewdex's schema has (:data:`_TOC_KINDS`), in ``public``; the extensions only
    :data:`EXTENSIONS`. Returns the entry lines to restore (the extensions and their comments left
    out: restore makes them itself). ``backup_dump_unexpected`` names the first other. Which objects
    the entries define, and how, is :class:`Reference`'s to check: a crafted archive's entry may run any SQL."""
    proc = subprocess.run([_pg_binary("pg_restore"), "-l", str(dump)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BackupError("backup_corrupted", f"{DUMP} is not a database dump pg_restore reads")
    keep = []
    for line in proc.stdout.splitlines():
        if not line.strip() or line.startswith(";"):
            continue
        kind, rest = _toc_entry(line)
        ok = kind is not None and len(rest) >= 2
        if ok and kind == "EXTENSION":
            ok = rest[0] == "-" and rest[1] in EXTENSIONS
        elif ok and kind == "COMMENT":
            ok = rest[:2] == ["-", "EXTENSION"] and len(rest) >= 3 and rest[2] in EXTENSIONS
        elif ok:
            ok = rest[0] == "public"
        if not ok:
            shown = line if len(line) <= 160 else line[:157] + "..."
            raise BackupError(
                "backup_dump_unexpected",
                f"the backup's {DUMP} holds an entry mewdex does not create ({shown}): refused, nothing restored",
            )
        if kind not in ("EXTENSION", "COMMENT"):
            keep.append(line)
    return keep


# ---------------------------------------------------------------- the restored schema against mewdex's own

_USER_NS = "n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'"


def _not_member(catalog: str, oid: str) -> str:
    """SQL: the object is not part of an extension (those are made by ``CREATE EXTENSION``, not the dump)."""
    return (
        f"NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = '{catalog}'::regclass AND e.objid = {oid}"
        " AND e.deptype = 'e')"
    )


#: What a database defines, as (key naming the object, its definition) rows: every object any
#: dependency names, by identity (whatever its class: collations, statistics, operator classes…), then
#: the definition of each object that runs or decides what runs — functions, triggers, indexes,
#: column defaults, constraints, views, rules, policies, relations and columns (with privileges, row
#: security, inheritance), event triggers, casts, operators, types, extensions, schemas, publications.
_SCHEMA_QUERIES = (
    """SELECT DISTINCT 'object ' || o.type || ' ' || o.identity, ''
    FROM (SELECT classid, objid FROM pg_depend WHERE objid >= 16384 AND objsubid = 0
          UNION SELECT classid, objid FROM pg_shdepend WHERE objid >= 16384 AND objsubid = 0
            AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())) d
    CROSS JOIN LATERAL pg_identify_object(d.classid, d.objid, 0) o
    WHERE coalesce(o.schema, '') NOT LIKE 'pg\\_%' AND coalesce(o.schema, '') <> 'information_schema'
      AND NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = d.classid AND e.objid = d.objid
                      AND e.deptype IN ('e', 'i'))""",
    f"""SELECT 'function ' || p.oid::regprocedure::text,
      CASE WHEN p.prokind = 'a' THEN (SELECT format('aggregate %s %s %s %s', a.aggtransfn, a.aggfinalfn,
        a.aggcombinefn, format_type(a.aggtranstype, NULL)) FROM pg_aggregate a WHERE a.aggfnoid = p.oid)
      ELSE pg_get_functiondef(p.oid) END || format(' acl=%s', p.proacl)
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE {_USER_NS} AND {_not_member("pg_proc", "p.oid")}""",
    f"""SELECT 'trigger ' || quote_ident(t.tgname) || ' on ' || t.tgrelid::regclass::text,
      pg_get_triggerdef(t.oid) || ' enabled=' || t.tgenabled::text
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE NOT t.tgisinternal AND {_USER_NS}""",
    f"""SELECT 'index ' || i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE {_USER_NS} AND {_not_member("pg_class", "i.indrelid")}""",
    f"""SELECT 'default ' || d.adrelid::regclass::text || '.' || quote_ident(a.attname),
      pg_get_expr(d.adbin, d.adrelid)
    FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
    JOIN pg_class c ON c.oid = d.adrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {_USER_NS}""",
    f"""SELECT 'constraint ' || quote_ident(k.conname) || ' on '
        || CASE WHEN k.conrelid <> 0 THEN k.conrelid::regclass::text ELSE k.contypid::regtype::text END,
      k.contype::text || ' ' || pg_get_constraintdef(k.oid)
    FROM pg_constraint k JOIN pg_namespace n ON n.oid = k.connamespace
    WHERE {_USER_NS} AND {_not_member("pg_constraint", "k.oid")}
      AND (k.conrelid = 0 OR NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = 'pg_class'::regclass
           AND e.objid = k.conrelid AND e.deptype = 'e'))
      AND (k.contypid = 0 OR NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = 'pg_type'::regclass
           AND e.objid = k.contypid AND e.deptype = 'e'))""",
    f"""SELECT 'relation ' || c.oid::regclass::text,
      format('%s %s rls=%s/%s acl=%s options=%s inherits=%s partition=%s/%s am=%s view=%s', c.relkind,
        c.relpersistence, c.relrowsecurity, c.relforcerowsecurity, c.relacl, c.reloptions,
        (SELECT array_agg(h.inhparent::regclass::text ORDER BY h.inhseqno) FROM pg_inherits h
         WHERE h.inhrelid = c.oid),
        CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) END,
        CASE WHEN c.relispartition THEN pg_get_expr(c.relpartbound, c.oid) END,
        (SELECT amname FROM pg_am WHERE oid = c.relam),
        CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) END)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c', 'S') AND {_USER_NS} AND {_not_member("pg_class", "c.oid")}""",
    f"""SELECT 'column ' || a.attrelid::regclass::text || '.' || quote_ident(a.attname),
      format('%s notnull=%s identity=%s generated=%s collation=%s acl=%s', format_type(a.atttypid, a.atttypmod),
        a.attnotnull, a.attidentity, a.attgenerated, a.attcollation::regcollation, a.attacl)
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')
      AND {_USER_NS} AND {_not_member("pg_class", "c.oid")}""",
    f"""SELECT 'rule ' || quote_ident(r.rulename) || ' on ' || r.ev_class::regclass::text,
      pg_get_ruledef(r.oid) || ' enabled=' || r.ev_enabled::text
    FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE {_USER_NS} AND {_not_member("pg_class", "c.oid")}""",
    """SELECT 'policy ' || quote_ident(p.polname) || ' on ' || p.polrelid::regclass::text,
      format('%s %s roles=%s using=%s check=%s', p.polcmd, p.polpermissive,
        (SELECT array_agg(CASE WHEN r = 0 THEN 'public' ELSE r::regrole::text END ORDER BY 1)
         FROM unnest(p.polroles) r),
        pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid))
    FROM pg_policy p""",
    """SELECT 'event trigger ' || quote_ident(evtname),
      format('%s %s %s %s', evtevent, evtfoid::regprocedure, evtenabled, evttags) FROM pg_event_trigger""",
    f"""SELECT 'cast ' || format_type(k.castsource, NULL) || ' as ' || format_type(k.casttarget, NULL),
      format('%s %s %s', k.castfunc::regprocedure, k.castcontext, k.castmethod)
    FROM pg_cast k WHERE k.oid >= 16384 AND {_not_member("pg_cast", "k.oid")}""",
    f"""SELECT 'operator ' || o.oid::regoperator::text,
      format('%s %s %s %s %s %s %s', o.oprcode::oid::regprocedure, o.oprrest::oid::regprocedure,
        o.oprjoin::oid::regprocedure, o.oprcom::regoperator, o.oprnegate::regoperator, o.oprcanhash,
        o.oprcanmerge)
    FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace
    WHERE {_USER_NS} AND {_not_member("pg_operator", "o.oid")}""",
    f"""SELECT 'type ' || t.oid::regtype::text,
      format('%s %s %s %s %s %s %s %s %s', t.typtype, format_type(t.typbasetype, t.typtypmod), t.typnotnull,
        t.typdefault, t.typinput, t.typoutput, t.typacl,
        (SELECT array_agg(e.enumlabel ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid),
        (SELECT format_type(g.rngsubtype, NULL) || ' ' || g.rngcanonical || ' ' || g.rngsubdiff
         FROM pg_range g WHERE g.rngtypid = t.oid))
    FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE {_USER_NS} AND {_not_member("pg_type", "t.oid")}
      AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = t.typrelid AND c.relkind <> 'c')
      AND NOT EXISTS (SELECT 1 FROM pg_type el WHERE el.typarray = t.oid)""",
    "SELECT 'extension ' || quote_ident(extname), extnamespace::regnamespace::text FROM pg_extension",
    # public's privileges are restore's own (it recreates public); _restricted_restore checks them
    f"""SELECT 'schema ' || quote_ident(n.nspname), CASE WHEN n.nspname = 'public' THEN '' ELSE
      coalesce(n.nspacl::text, '') END FROM pg_namespace n WHERE {_USER_NS}""",
    "SELECT 'publication ' || quote_ident(pubname), '' FROM pg_publication",
)


def schema_objects(conn) -> dict[str, str]:
    """What the database of ``conn`` (psycopg) defines: ``{key naming the object: its definition}``
    (:data:`_SCHEMA_QUERIES`, names qualified: ``search_path`` is ``pg_catalog`` for the reading)."""
    objects: dict[str, str] = {}
    conn.execute("SET search_path = pg_catalog")
    try:
        for query in _SCHEMA_QUERIES:
            objects.update((key, value or "") for key, value in conn.execute(query))
    finally:
        conn.execute("RESET search_path")
    return objects


def schema_differences(expected: dict[str, str], found: dict[str, str]) -> list[str]:
    """The objects ``found`` defines otherwise than ``expected`` (both from :func:`schema_objects`),
    named without their content, sorted: ``"<key> is not mewdex's"``, ``"<key> differs"``, ``"<key>
    is missing"``."""

    def short(key: str) -> str:
        return key if len(key) <= 120 else key[:117] + "..."

    extra = [f"{short(k)} is not mewdex's" for k in sorted(found.keys() - expected.keys())]
    changed = [f"{short(k)} differs" for k in sorted(found.keys() & expected.keys()) if found[k] != expected[k]]
    missing = [f"{short(k)} is missing" for k in sorted(expected.keys() - found.keys())]
    return changed + extra + missing


def _sqlalchemy_url(url: str, env: dict[str, str]) -> str:
    from sqlalchemy.engine import make_url

    made = make_url(url).set(drivername="postgresql+psycopg")
    if env.get("PGPASSWORD"):
        made = made.set(password=env["PGPASSWORD"])
    return made.render_as_string(hide_password=False)


@contextmanager
def _scratch_database(url: str, env: dict[str, str], purpose: str) -> Iterator[str]:
    """A new empty database beside the target (from ``template0``; named
    ``mewdex_restore_<purpose>_<16 random hex>``, so it cannot be one that exists), dropped on leaving;
    yields its libpq URL. ``restore_scratch_denied`` when the configured user may not create one."""
    import psycopg
    from psycopg import sql
    from sqlalchemy.engine import make_url

    name = f"mewdex_restore_{purpose}_{secrets.token_hex(8)}"
    with _connect(url, env) as conn:
        try:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
        except psycopg.errors.InsufficientPrivilege:
            raise BackupError(
                "restore_scratch_denied",
                "restore compares the backup's schema with one mewdex's migrations build in a scratch database, "
                "and the database user may not create one: grant it CREATEDB, or restore as the server's owner",
            ) from None
    try:
        yield make_url(url).set(database=name).render_as_string(hide_password=False)
    finally:
        with _connect(url, env) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


class Reference:
    """mewdex's own schema at a revision, built beside the target in scratch databases (see
    :func:`reference_schema`): the migrations run in one, as mewdex migrates; that schema then goes
    through ``pg_dump``/``pg_restore`` into another, as a backup's has (PostgreSQL reads some
    definitions back otherwise than the migrations wrote them: ``ARRAY['a'::varchar]::text[]``
    becomes ``ARRAY[('a'::varchar)::text]``; a second round trip changes nothing more)."""

    def __init__(self, url: str, env: dict[str, str], revision: str, tmp: Path, scratch: ExitStack):
        import psycopg
        from psycopg import sql
        from sqlalchemy import create_engine
        from sqlalchemy.pool import NullPool

        from mewdex.db.migrate import upgrade

        self.url, self.env, self.tmp, self.scratch = url, env, tmp, scratch
        self.migrated = scratch.enter_context(_scratch_database(url, env, "reference"))
        try:  # as the trial restore will, in a database of its own
            with _connect(self.migrated, env) as conn:
                for name in EXTENSIONS:
                    conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(name)))
        except psycopg.errors.InsufficientPrivilege:
            raise BackupError(
                "restore_scratch_denied",
                f"restore builds mewdex's schema in a scratch database, and the database user may not create the "
                f"extensions {' and '.join(EXTENSIONS)} there: restore as a user that may (the server's owner, or a "
                "cloud database's admin role)",
            ) from None
        self.engine = create_engine(_sqlalchemy_url(self.migrated, env), poolclass=NullPool)
        scratch.callback(self.engine.dispose)
        upgrade(self.engine, revision)
        self.objects: dict[str, str] | None = None

    def differences(self, conn) -> list[str]:
        """How the database of ``conn`` differs from the reference (:func:`schema_differences`;
        empty: it defines exactly the same). The first call decides which indexes mewdex made at run
        time the reference holds too: those of ``conn``'s that :func:`mewdex.search.vector_index.made_index`
        recognises are made in the reference by :func:`~mewdex.search.vector_index.ensure_index`
        itself, so they must be exactly what it makes; later calls compare with the same reference."""
        from sqlalchemy.exc import DBAPIError
        from sqlalchemy.orm import Session

        from mewdex.search import vector_index

        found = schema_objects(conn)
        if self.objects is None:
            with _connect(self.migrated, self.env) as ref:
                migrated = schema_objects(ref)
            prefix = "index public."
            made = [
                vector_index.made_index(key[len(prefix) :], found[key])
                for key in sorted(found.keys() - migrated.keys())
                if key.startswith(prefix)
            ]
            with Session(self.engine) as session, session.begin():
                for table, model, dimensions in filter(None, made):
                    try:
                        with session.begin_nested():
                            vector_index.ensure_index(session, table, model, dimensions)
                    except DBAPIError:  # one mewdex would not make (e.g. too many dimensions): a difference
                        pass
            self.objects = self._round_trip()
        return schema_differences(self.objects, found)

    def _round_trip(self) -> dict[str, str]:
        dump = self.tmp / "reference.dump"
        normal = self.scratch.enter_context(_scratch_database(self.url, self.env, "normal"))
        for command in (
            [_pg_binary("pg_dump"), "--format=custom", "--schema-only", f"--file={dump}", self.migrated],
            [_pg_binary("pg_restore"), "--no-owner", "--no-acl", "--exit-on-error", f"--dbname={normal}", str(dump)],
        ):
            proc = subprocess.run(command, env=self.env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise BackupError(
                    "pg_restore_failed", f"building mewdex's reference schema failed: {proc.stderr[-500:]}"
                )
        with _connect(normal, self.env) as conn:
            return schema_objects(conn)


@contextmanager
def reference_schema(url: str, env: dict[str, str], revision: str, tmp: Path) -> Iterator[Reference]:
    """A :class:`Reference` of mewdex's schema at ``revision`` (a known one) on the server of ``url``;
    its scratch databases are dropped on leaving. ``tmp``: a private folder for its dump."""
    with ExitStack() as scratch:
        yield Reference(url, env, revision, tmp, scratch)


def _database_has_tables(url: str, env: dict[str, str]) -> bool:
    with _connect(url, env) as conn:
        return bool(
            conn.execute(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')"
            ).fetchone()[0]
        )


def _other_clients(url: str, env: dict[str, str]) -> list[str]:
    """``application_name`` of the other client connections to the target database."""
    with _connect(url, env) as conn:
        rows = conn.execute(
            "SELECT DISTINCT coalesce(nullif(application_name, ''), 'unnamed client') FROM pg_stat_activity"
            " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND datname = current_database()"
        ).fetchall()
    return sorted(r[0] for r in rows)


def target_contents(manifest: dict[str, Any]) -> list[str]:
    """What the restore target already holds (empty: it may be filled): tables in the database, key
    files in the data dir, blobs of the backup's namespaces in the store."""
    from mewdex.storage import blob_store

    found = []
    url, env = _libpq()
    if _database_has_tables(url, env):
        found.append("the database has tables")
    data_dir = get_settings().data_dir.resolve()
    found += [f"{data_dir / rel} exists" for rel in KEY_FILES if (data_dir / rel).exists()]
    store = blob_store()
    for namespace in sorted({e.namespace for e in entries(manifest) if e.kind == "blob"}):
        if next(iter(store.iter_keys(namespace)), None) is not None:
            found.append("the blob store has blobs of this library")
            break
    return found


def restore_key(
    target: Target,
    *,
    key_file: Path | None = None,
    passphrase: str | None = None,
    prompt: Callable[[str], str | None] | None = None,
) -> BackupKey:
    """The key to restore from ``target`` with: ``key_file``, ``passphrase``, the settings, the data
    dir's ``backup.key``, else ``prompt`` (asked for the passphrase or the key, as DEST's header
    says); ``backup_key_missing`` when there is none."""
    header = read_header(target)
    key = _configured_key(header, key_file=key_file, passphrase=passphrase, new_dest=False)
    if key is None and prompt is not None:
        kdf = (header or {}).get("kdf")
        answer = prompt("backup passphrase" if kdf else "backup key (64 hex characters)")
        if answer:
            key = key_from_passphrase(answer, kdf) if kdf else parse_key(answer, "the key given")
    if key is None:
        raise BackupError(
            "backup_key_missing",
            "a backup is restored with its backup key: --key-file PATH, MEWDEX_BACKUP_KEY_FILE or "
            "MEWDEX_BACKUP_PASSPHRASE (the key the first backup printed, or its passphrase)",
        )
    return key


def _role_url(url: str, role: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(username=role).render_as_string(hide_password=False)


def _restricted_restore(
    url: str, env: dict[str, str], dump: Path, listing: list[str], tmp: Path, reference: Reference
) -> None:
    """``pg_restore`` of ``listing``'s entries of ``dump`` into the database ``url`` with least
    privilege: as a throw-away login role that owns only the ``public`` schema (no superuser, no
    ``pg_execute_server_program``; the extensions made first by the configured user); then, before
    its objects pass to the configured user, the restored schema is compared with ``reference``
    (:meth:`Reference.differences`: exactly mewdex's own, functions' bodies included)
    and ``public``'s privileges must be those restore gave it. On any failure the schema is
    emptied: ``pg_restore_failed`` / ``backup_dump_unexpected`` (naming the objects, not their content)."""
    from psycopg import sql

    role = f"mewdex_restore_{secrets.token_hex(6)}"
    password = secrets.token_urlsafe(24)
    list_file = tmp / "restore.list"
    list_file.write_text("\n".join(listing) + "\n")
    public_acl = "SELECT nspacl::text FROM pg_namespace WHERE nspname = 'public'"
    with _connect(url, env) as conn:
        owner, superuser = conn.execute(
            "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        for name in EXTENSIONS:
            conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(name)))
        if superuser:
            conn.execute(
                sql.SQL(
                    "CREATE ROLE {} LOGIN PASSWORD {} NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION"
                    " NOBYPASSRLS NOINHERIT CONNECTION LIMIT 2"
                ).format(sql.Identifier(role), sql.Literal(password))
            )
            conn.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(sql.Identifier(role)))
        acl_before = conn.execute(public_acl).fetchone()[0]
    run_env = {**env, "PGPASSWORD": password} if superuser else env
    run_url = _role_url(url, role) if superuser else url
    try:
        proc = subprocess.run(
            [
                _pg_binary("pg_restore"), "--no-owner", "--no-acl", "--exit-on-error", f"-L{list_file}",
                f"--dbname={run_url}", str(dump),
            ],
            env=run_env,
            capture_output=True,
            text=True,
        )  # fmt: skip
        if proc.returncode != 0:
            raise BackupError(
                "pg_restore_failed", f"pg_restore failed (the target is left empty): {proc.stderr.strip()[-500:]}"
            )
        with _connect(url, env) as conn:
            found = reference.differences(conn)
            if conn.execute(public_acl).fetchone()[0] != acl_before:
                found.append("the privileges of schema public differ")
        if found:
            shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
            raise BackupError(
                "backup_dump_unexpected",
                f"the backup's {DUMP} defines what mewdex's own schema does not ({shown}): refused, the target is "
                "left empty",
            )
    except BaseException:
        with _connect(url, env) as conn:
            conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
            conn.execute("CREATE SCHEMA public")
        raise
    finally:
        if superuser:
            with _connect(url, env) as conn:
                conn.execute(sql.SQL("REASSIGN OWNED BY {} TO {}").format(sql.Identifier(role), sql.Identifier(owner)))
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def restore(
    src: str | Path,
    *,
    force: bool = False,
    progress: Progress | None = None,
    key_file: Path | None = None,
    passphrase: str | None = None,
    prompt: Callable[[str], str | None] | None = None,
) -> dict[str, Any]:
    """Restore the backup ``src`` names (see :func:`resolve_source`) into the configured data dir /
    database + store (see the module docstring), with the key :func:`restore_key` finds. Nothing is
    used before the manifest authenticated, nothing written outside a temporary folder before the
    whole backup verified (:func:`verify`). Returns ``{"snapshot", "source", "mewdex_version",
    "schema_revision", "migrated_to", "counts", "blobs": {"total", "copied"}, "files", "encrypted",
    "seconds"}``. Raises :class:`BackupError`."""
    from mewdex.db.engine import get_engine, reset_engine
    from mewdex.db.migrate import upgrade
    from mewdex.storage import blob_store

    started = time.monotonic()
    progress = progress or _Quiet()
    target, name = resolve_source(src)
    raw = _raw_manifest(target, name)
    _envelope(raw, f"{name}/{MANIFEST}")  # an old format is named before a key is asked for
    key = restore_key(target, key_file=key_file, passphrase=passphrase, prompt=prompt)
    manifest = open_manifest(raw, key, name)
    check_compatible(manifest)
    found = target_contents(manifest)
    if found and not force:
        raise BackupError(
            "restore_target_not_empty",
            f"the restore target is not empty ({'; '.join(found)}): restore into a new data dir, or pass --force "
            "to replace what is there",
        )
    url, env = _libpq()
    encrypted = manifest["encrypted"]
    listed = entries(manifest)
    with tempfile.TemporaryDirectory(prefix="mewdex-restore-") as tmp_dir:
        tmp = Path(tmp_dir)
        local = verify(target, name, manifest, tmp, progress, key)
        listing = check_dump(local[DUMP])
        progress.phase("checking the backup's schema", None)
        with reference_schema(url, env, manifest["schema_revision"], tmp) as reference:
            with _scratch_database(url, env, "trial") as trial:  # its definitions, before the target is touched
                schema = [line for line in listing if _toc_entry(line)[0] not in _DATA_KINDS]
                _restricted_restore(trial, env, local[DUMP], schema, tmp, reference)
            if force and (others := _other_clients(url, env)):
                raise BackupError(
                    "restore_target_in_use",
                    f"other processes use the target database ({', '.join(others)}): stop mewdex serve and workers "
                    "first",
                )
            # Everything checked out: from here on the target is written.
            progress.phase("restoring the database", None)
            reset_engine()
            if force:
                with _connect(url, env) as conn:
                    conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
                    conn.execute("CREATE SCHEMA public")
            _restricted_restore(url, env, local[DUMP], listing, tmp, reference)  # what is handed over, compared
        blobs = [e for e in listed if e.kind == "blob"]
        progress.phase("restoring blobs", len(blobs))
        store = blob_store()
        for entry in blobs:
            path = tmp / "blob"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                fetch(target, key, name, entry, encrypted, out)  # read and checked again: DEST may have changed
            with open(path, "rb") as handle:
                store.put(entry.namespace, entry.key, handle)
            path.unlink()
            progress.advance()
        data_dir = get_settings().data_dir.resolve()
        for rel in KEY_FILES:  # the constants: where each goes never comes from the manifest
            if rel in local:
                path = data_dir / rel
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                part = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
                fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as out, open(local[rel], "rb") as source:
                    shutil.copyfileobj(source, out)
                os.replace(part, path)
    settings = get_settings()
    if key.kdf is None and not settings.backup_key_file and not local_key_path().exists():
        _write_local_key(key)  # this data dir's next backups to the same DEST use the same key
    progress.phase("running migrations", None)
    migrated_to = upgrade(get_engine())
    if manifest.get("secret_key_from_env") and not settings.secret_key:
        log.warning("restore: the backup's secrets were sealed with MEWDEX_SECRET_KEY: set the same key here")
    return {
        "snapshot": name,
        "source": target.describe(),
        "mewdex_version": manifest.get("mewdex_version"),
        "schema_revision": manifest.get("schema_revision"),
        "migrated_to": migrated_to,
        "counts": manifest.get("counts", {}),
        "blobs": {"total": len(blobs), "copied": len(blobs)},
        "missing_blobs": manifest.get("missing_blobs", []),
        "files": sorted(e.name for e in listed if e.kind == "file"),
        "encrypted": encrypted,
        "seconds": round(time.monotonic() - started, 3),
    }


# ---------------------------------------------------------------- scheduled backups


@task_type("backup_check", lane="maintenance", retry=RetryPolicy(max_attempts=1))
def backup_check(ctx: TaskContext) -> dict[str, Any]:
    """Every minute: when ``MEWDEX_BACKUP_DEST`` is set and a run of ``MEWDEX_BACKUP_CRON`` (UTC) is
    due since the last check, queue one ``backup`` task. ``{"queued": task id | None}``."""
    from sqlalchemy import text

    from mewdex.platform.instance import get_setting, set_setting
    from mewdex.queue import registry
    from mewdex.runtime.maintenance import SYSTEM_SCOPE
    from mewdex.schedules import cron as cronmath

    settings = get_settings()
    if not settings.backup_dest:
        return {"queued": None}
    now = datetime.now(UTC)
    with ctx.sessions.begin() as session:
        session.execute(text("SELECT pg_advisory_xact_lock(hashtextextended('backup_check', 0))"))
        state = dict(get_setting(session, SCHEDULE_STATE_SETTING, None) or {})
        if state.get("cron") != settings.backup_cron or "after" not in state:
            state.update(cron=settings.backup_cron, after=now.isoformat(), since=now.isoformat())
            set_setting(session, SCHEDULE_STATE_SETTING, state)
            return {"queued": None}
        due = cronmath.next_run(settings.backup_cron, "UTC", datetime.fromisoformat(state["after"]))
        if due is None or due > now:
            return {"queued": None}
        task = registry.submit(
            session,
            scope_id=SYSTEM_SCOPE,
            task_type="backup",
            dedupe_key=f"backup:{due.isoformat()}",
            payload={"due": due.isoformat()},
        )
        set_setting(session, SCHEDULE_STATE_SETTING, {**state, "after": now.isoformat()})
        return {"queued": str(task.id)}


@task_type("backup", lane="maintenance", retry=RetryPolicy(max_attempts=1))
def backup_task(ctx: TaskContext) -> dict[str, Any]:
    """A scheduled backup to ``MEWDEX_BACKUP_DEST``, keeping ``MEWDEX_BACKUP_KEEP`` snapshots; the
    summary of :func:`backup` (also on ``/health``). A failure is recorded and fails the task
    (``backup_failed`` or the :class:`BackupError` code); the next scheduled run tries again."""
    from mewdex.queue.registry import TaskError

    settings = get_settings()
    if not settings.backup_dest:
        return {"skipped": "MEWDEX_BACKUP_DEST is not set"}
    try:
        summary = backup(settings.backup_dest, keep=settings.backup_keep)
    except BackupError as exc:
        raise TaskError(exc.code, exc.message, retryable=False) from None
    return {k: v for k, v in summary.items() if k != "copied_keys"}
