"""The blob-store interface (:class:`BlobStore`) and its local implementation.

Every blob is content-addressed: ``<namespace>/<sha[0:2]>/<sha256><ext>``, where ``namespace`` is a
scope's immutable ``storage_namespace`` UUID (or the thumbnail namespace derived from it) and the key
is the SHA-256 of the bytes plus the normalized extension. Two implementations, chosen by
``MEWDEX_BLOB_STORE`` (:func:`mewdex.storage.blob_store`): :class:`LocalBlobStore` here and
:class:`mewdex.storage.s3.S3BlobStore` (S3-compatible object stores). Everything that reads or writes
blobs goes through this interface; the storage journal (:mod:`mewdex.storage.journal`) makes the
database and the store agree whichever is used.

Local layout: ``root/<namespace>/<sha[0:2]>/<sha256><ext>``, where ``namespace`` is a
scope's immutable ``storage_namespace`` UUID and the key is the SHA-256 of the
bytes plus the normalized extension. Writes go to ``root/.staging/`` first, are
flushed and fsynced, then renamed into place with ``os.replace`` (atomic on one
file system) and the directory is fsynced, so a reader never sees a partial blob.
A staging file's name carries its writer's pid and host, so the partial file of a
killed writer is removed by the next clean-up (at every start-up), not an hour later.

Paths are only ever built from a validated key and a canonical UUID; any other
string is rejected with ``ValueError`` before it touches the file system.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from mewdex.storage import failpoints

KEY_PATTERN = re.compile(r"[0-9a-f]{64}\.(png|jpg|gif|webp|avif|heic|mp4|webm|tgs)")
STAGING_DIR = ".staging"
CHUNK_SIZE = 1024 * 1024
# ``<pid>-<random>-<host tag>.tmp``: whose write it is (see clean_staging).
_HOST_TAG = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_STAGED_NAME = re.compile(r"(\d+)-[0-9a-f]{32}-([0-9a-f]{8})\.tmp")
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class BlobStoreError(OSError):
    """The blob store could not be reached or refused a request (an object store's outage, a missing
    bucket, denied credentials). An ``OSError`` (``errno.EIO``), so every path that handles a failed
    file write handles it too; the message names the operation and the store's error code, never a
    credential."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EIO, message)


@dataclass(frozen=True)
class BlobStat:
    """A stored blob's size (bytes) and last modification (Unix seconds)."""

    size: int
    mtime: float


BlobData = bytes | bytearray | memoryview | BinaryIO


class BlobStore(Protocol):
    """What every blob store offers. ``namespace``: a UUID (string or :class:`uuid.UUID`); ``key``:
    ``<64 lower-case hex><extension>`` (an extension of ``library.images.EXTENSIONS``); anything else
    raises ``ValueError`` (``storage_namespace_invalid`` / ``blob_key_invalid``) before the store is
    touched. Failures of the store itself raise ``OSError`` (:class:`BlobStoreError` for an object store)."""

    def put(self, namespace: str | uuid.UUID, key: str, data: BlobData) -> object:
        """Store the bytes (or a binary stream, read in chunks) under ``key``, atomically: a reader
        never sees a partial blob. ``ValueError("blob_digest_mismatch")`` (nothing stored) when the
        data does not hash to the key; idempotent for the same bytes."""
        ...

    def open(self, namespace: str | uuid.UUID, key: str) -> BinaryIO:
        """A seekable binary reader of the blob (the caller closes it); FileNotFoundError when missing."""
        ...

    def read_bytes(self, namespace: str | uuid.UUID, key: str) -> bytes:
        """The blob's bytes; FileNotFoundError when missing."""
        ...

    def stat(self, namespace: str | uuid.UUID, key: str) -> BlobStat | None:
        """Size and modification time of the blob, None when it is not stored."""
        ...

    def exists(self, namespace: str | uuid.UUID, key: str) -> bool:
        """True if the blob is stored."""
        ...

    def delete(self, namespace: str | uuid.UUID, key: str) -> bool:
        """Remove the blob (a missing one is fine); True if one was removed."""
        ...

    def iter_keys(self, namespace: str | uuid.UUID) -> Iterator[str]:
        """Every valid key stored in ``namespace``, sorted; stray entries are skipped."""
        ...

    def free_bytes(self) -> int | None:
        """Bytes still free for blobs; None when the store has no such limit (an object store)."""
        ...

    def clean_staging(self, older_than_seconds: float) -> int:
        """Remove what interrupted writes left behind (staging files, unfinished multipart uploads)
        of writers that are gone or older than ``older_than_seconds``; returns how many."""
        ...


def is_disk_full(exc: BaseException) -> bool:
    """True when ``exc`` is the file system saying it is out of space (ENOSPC) or over quota (EDQUOT)."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def thumbnail_namespace(storage_namespace) -> str:
    """The blob-store namespace of a scope's thumbnails: ``uuid5(storage_namespace, "mewdex-thumbnails")``."""
    return str(uuid.uuid5(uuid.UUID(str(storage_namespace)), "mewdex-thumbnails"))


class LocalBlobStore:
    """Blobs under ``root``; see the module docstring for layout and guarantees."""

    def __init__(self, root: Path | str) -> None:
        """Use (and create if missing) ``root`` and its ``.staging`` folder."""
        self.root = Path(root)
        self._staging = self.root / STAGING_DIR
        _make_dirs(self._staging)

    def path(self, namespace: str | uuid.UUID, key: str) -> Path:
        """Return where ``key`` lives (it may not exist).

        Raises:
            ValueError: ``namespace`` is not a UUID, or ``key`` is not
                ``<64 lower-case hex><extension>``.
        """
        key = check_key(key)
        return self.root / check_namespace(namespace) / key[:2] / key

    def put(self, namespace: str | uuid.UUID, key: str, data: bytes | bytearray | memoryview | BinaryIO) -> Path:
        """Store bytes (or a binary file-like object, read in 1 MiB chunks) under ``key``.

        The SHA-256 of the data must equal the key's hash. Idempotent: when the
        blob already exists with that content nothing is rewritten.

        Returns:
            the blob's path.
        Raises:
            ValueError: invalid namespace/key, or ``blob_digest_mismatch`` when
                the data does not hash to the key (nothing is stored).
            OSError: the file system failed (the staging file is removed).
        """
        target = self.path(namespace, key)
        staged = self._staging / f"{os.getpid()}-{secrets.token_hex(16)}-{_HOST_TAG}.tmp"
        try:
            digest = _write_synced(staged, data)
            if digest != key[:64]:
                raise ValueError("blob_digest_mismatch")
            if target.is_file() and _sha256_file(target) == digest:
                return target
            _make_dirs(target.parent)
            os.replace(staged, target)
            _fsync_dir(target.parent)
            return target
        finally:
            staged.unlink(missing_ok=True)

    def open(self, namespace: str | uuid.UUID, key: str) -> BinaryIO:
        """Open a blob for binary reading; the caller closes it.

        Raises:
            ValueError: invalid namespace/key. FileNotFoundError: no such blob.
        """
        return self.path(namespace, key).open("rb")

    def read_bytes(self, namespace: str | uuid.UUID, key: str) -> bytes:
        """The blob's bytes. Raises ValueError (invalid namespace/key), FileNotFoundError (no such blob)."""
        return self.path(namespace, key).read_bytes()

    def stat(self, namespace: str | uuid.UUID, key: str) -> BlobStat | None:
        """Size and mtime of the blob, None when there is none. Raises ValueError for an invalid namespace/key."""
        try:
            result = self.path(namespace, key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return BlobStat(result.st_size, result.st_mtime)

    def exists(self, namespace: str | uuid.UUID, key: str) -> bool:
        """True if the blob is stored. Raises ValueError for an invalid namespace/key."""
        return self.path(namespace, key).is_file()

    def delete(self, namespace: str | uuid.UUID, key: str) -> bool:
        """Remove a blob; a missing one is fine.

        Returns:
            True if a file was removed, False if there was none.
        Raises:
            ValueError: invalid namespace/key.
        """
        target = self.path(namespace, key)
        try:
            target.unlink()
        except FileNotFoundError:
            return False
        _fsync_dir(target.parent)
        return True

    def iter_keys(self, namespace: str | uuid.UUID) -> Iterator[str]:
        """Yield every valid key stored in ``namespace``, sorted; stray files are skipped.

        Raises:
            ValueError: ``namespace`` is not a UUID.
        """
        base = self.root / check_namespace(namespace)
        if not base.is_dir():
            return
        for shard in sorted(base.iterdir()):
            if not shard.is_dir():
                continue
            for entry in sorted(shard.iterdir()):
                if KEY_PATTERN.fullmatch(entry.name) and entry.name[:2] == shard.name and entry.is_file():
                    yield entry.name

    def free_bytes(self) -> int | None:
        """Bytes free for this process on the blob store's file system."""
        return shutil.disk_usage(self.root).free

    def clean_staging(self, older_than_seconds: float) -> int:
        """Delete staging files whose writer (a process on this host) is gone, and any file last
        modified more than ``older_than_seconds`` ago.

        Returns:
            how many files were removed.
        """
        cutoff = time.time() - older_than_seconds
        removed = 0
        for entry in self._staging.iterdir():
            try:
                if entry.is_file() and (_writer_gone(entry.name) or entry.stat().st_mtime < cutoff):
                    entry.unlink()
                    removed += 1
            except FileNotFoundError:
                continue  # finished or cleaned concurrently
        return removed


def _writer_gone(name: str) -> bool:
    """Whether the staging file ``name`` was written by a process of this host that no longer runs."""
    match = _STAGED_NAME.fullmatch(name)
    if match is None or match.group(2) != _HOST_TAG:
        return False
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def check_key(key: object) -> str:
    """``key`` when it is a valid blob key, else ``ValueError("blob_key_invalid")``."""
    if not isinstance(key, str) or KEY_PATTERN.fullmatch(key) is None:
        raise ValueError("blob_key_invalid")
    return key


def check_namespace(namespace: object) -> str:
    """Return the canonical UUID string (``xxxxxxxx-xxxx-...``, lower case)."""
    if isinstance(namespace, uuid.UUID):
        return str(namespace)
    if isinstance(namespace, str) and re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", namespace):
        return str(uuid.UUID(namespace))
    raise ValueError("storage_namespace_invalid")


def _write_synced(path: Path, data: bytes | bytearray | memoryview | BinaryIO) -> str:
    """Write ``data`` to a new file, fsync it, and return the SHA-256 hex digest."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)  # no access for other local users
    with os.fdopen(fd, "wb") as out:
        for chunk in chunks(data):
            digest.update(chunk)
            out.write(chunk)
            failpoints.disk_full("blob.write")
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest()


def chunks(data: BlobData, size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """``data`` as byte chunks: bytes whole, a stream read ``size`` bytes at a time."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        yield bytes(data)
        return
    while chunk := data.read(size):
        yield chunk


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_SIZE):
            digest.update(chunk)
    return digest.hexdigest()


def _make_dirs(path: Path) -> None:
    """Create ``path`` and missing parents, fsyncing each parent that gained an entry."""
    missing = []
    current = path
    while not current.is_dir():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o750)
        except FileExistsError:
            continue  # created concurrently
        _fsync_dir(directory.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
