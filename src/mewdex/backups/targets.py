"""Backup destinations (:class:`Target`): a directory on this machine (:class:`DirTarget`, walked
without following links) or a prefix in an S3 bucket (:class:`S3Target`, through the one S3 client of
:mod:`mewdex.storage.s3`); DEST's header and reading a snapshot's manifest."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from mewdex.backups.archive import (
    _BLOB_OBJECT,
    BLOBS_DIR,
    CHUNK,
    FORMAT,
    HEADER,
    MANIFEST,
    MAX_HEADER_BYTES,
    MAX_MANIFEST_BYTES,
    SNAPSHOT_NAME,
    BackupError,
    BackupKey,
    _Bounded,
    _invalid,
    _read_full,
    open_manifest,
)
from mewdex.backups.keys import _kdf_params
from mewdex.backups.settings import settings as backup_settings
from mewdex.config import get_settings


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

        settings, own = get_settings(), backup_settings()
        endpoint = settings.s3_endpoint_url
        if endpoint and urlsplit(endpoint).scheme == "http" and not own.backup_s3_allow_http:
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
        self.sse = None if own.backup_s3_sse == "none" else own.backup_s3_sse

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
