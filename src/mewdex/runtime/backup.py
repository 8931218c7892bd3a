"""Backups and restores: ``mewdex backup DEST`` / ``mewdex restore SRC`` and the scheduled backup.

A backup destination (a directory, or ``s3://bucket/prefix`` on the S3 store's settings) holds::

    DEST/blobs/<namespace>/<sha[0:2]>/<sha256><ext>    every blob once, content-addressed (shared)
    DEST/<YYYYMMDDTHHMMSSZ>/database.dump             pg_dump custom format
    DEST/<YYYYMMDDTHHMMSSZ>/secret.keys               the key ring (when there is one)
    DEST/<YYYYMMDDTHHMMSSZ>/keys/media_signing.json   the media-link signing keys
    DEST/<YYYYMMDDTHHMMSSZ>/manifest.json             written last: a snapshot without one is unfinished

The manifest (:data:`FORMAT`) has the mewdex version, the schema revision, row counts, the sha256
and size of every snapshot file, and every blob the dump references (``namespace``, ``key`` — whose
name is its sha256 — and ``size``). A second backup to the same DEST copies only blobs it lacks.

Consistency while ``serve`` and workers run: the backup takes the backup lease
(:data:`mewdex.storage.journal.BACKUP_LEASE_KEY`, see there: blob removals are deferred while it is
held), opens one ``REPEATABLE READ`` transaction, exports its snapshot, lists the blobs in it and
runs ``pg_dump --snapshot`` on it (the embedded server's own ``pg_dump``, also against
``MEWDEX_DATABASE_URL``), then copies the blobs and releases the lease. Uploads meanwhile are simply
not in the backup. One backup runs at a time per database (``backup_running``).

Restore fills the data dir ``MEWDEX_DATA_DIR`` names (its embedded server) — or the empty external
database and store the settings name — after checking every file's hash; it runs the migrations
when the backup is older and refuses a backup of a newer mewdex (``backup_too_new``) and a target
that holds data unless ``force``.

Errors: :class:`BackupError` with a stable ``code`` (``backup_running``, ``backup_not_found``,
``backup_incomplete``, ``backup_corrupted``, ``backup_too_new``, ``restore_target_not_empty``,
``restore_target_in_use``,
``backup_dest_invalid``, ``pg_dump_failed``, ``pg_restore_failed``, ``backup_store_failed``);
messages name files, never a credential.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from mewdex.config import get_settings
from mewdex.queue.registry import RetryPolicy, TaskContext, task_type
from mewdex.storage.blobs import BlobStore, LocalBlobStore, thumbnail_namespace

log = logging.getLogger(__name__)
FORMAT = 1
MANIFEST = "manifest.json"
DUMP = "database.dump"
#: Files of the data dir a backup carries (relative paths; kept with these names in the snapshot).
KEY_FILES = ("secret.keys", "keys/media_signing.json")
SNAPSHOT_FORMAT = "%Y%m%dT%H%M%SZ"
#: One backup at a time per database (``pg_try_advisory_lock``): "mewdexb1".
BACKUP_RUNNING_KEY = 0x6D65776465786231
LAST_BACKUP_SETTING = "last_backup"
SCHEDULE_STATE_SETTING = "backup_schedule"
CHUNK = 1024 * 1024


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


# ---------------------------------------------------------------- destinations


class Target(Protocol):
    """A backup destination: the shared blob store and the snapshots' files."""

    @property
    def blobs(self) -> BlobStore: ...

    def describe(self) -> str: ...

    def put_file(self, rel: str, path: Path) -> None: ...

    def get_file(self, rel: str, path: Path) -> None:
        """Copy ``rel`` to ``path``; FileNotFoundError when missing."""
        ...

    def exists(self, rel: str) -> bool: ...

    def snapshots(self) -> list[str]:
        """Names of the snapshots that have a manifest, oldest first."""
        ...

    def remove_snapshot(self, name: str) -> None: ...


class DirTarget:
    """A backup directory on this machine's file system."""

    def __init__(self, root: Path):
        self.root = root
        self._blobs: LocalBlobStore | None = None

    @property
    def blobs(self) -> LocalBlobStore:  # created on first use: restore only reads
        if self._blobs is None:
            self._blobs = LocalBlobStore(self.root / "blobs")
        return self._blobs

    def describe(self) -> str:
        return str(self.root)

    def put_file(self, rel: str, path: Path) -> None:
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = target.with_name(target.name + ".part")
        shutil.copyfile(path, tmp)
        os.chmod(tmp, 0o600)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)

    def get_file(self, rel: str, path: Path) -> None:
        shutil.copyfile(self.root / rel, path)

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def snapshots(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.name != "blobs" and (p / MANIFEST).is_file())

    def remove_snapshot(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)


class S3Target:
    """A backup prefix in an S3 bucket (credentials and endpoint: the S3 store's settings)."""

    def __init__(self, url: str):
        from mewdex.storage import s3

        settings = get_settings()
        base = s3.from_settings(
            url,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            addressing_style=settings.s3_addressing_style,
        )
        self.url, self.client, self.bucket, self.prefix = url, base.client, base.bucket, base.prefix
        self._blobs = s3.S3BlobStore(self.client, self.bucket, self.prefix + "blobs/")

    @property
    def blobs(self) -> BlobStore:
        return self._blobs

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
        with open(path, "rb") as handle:
            self._call(rel, self.client.put_object, Key=self.prefix + rel, Body=handle)

    def get_file(self, rel: str, path: Path) -> None:
        body = self._call(rel, self.client.get_object, Key=self.prefix + rel)["Body"]
        with open(path, "wb") as out:
            for chunk in iter(lambda: body.read(CHUNK), b""):
                out.write(chunk)

    def exists(self, rel: str) -> bool:
        try:
            self._call(rel, self.client.head_object, Key=self.prefix + rel)
        except FileNotFoundError:
            return False
        return True

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

    def snapshots(self) -> list[str]:
        names = []
        for page in self._list(self.prefix, "/"):
            for entry in page.get("CommonPrefixes") or []:
                name = entry["Prefix"][len(self.prefix) :].strip("/")
                if name != "blobs" and self.exists(f"{name}/{MANIFEST}"):
                    names.append(name)
        return sorted(names)

    def remove_snapshot(self, name: str) -> None:
        for page in self._list(f"{self.prefix}{name}/"):
            keys = [{"Key": o["Key"]} for o in page.get("Contents") or []]
            if keys:
                self._call(name, self.client.delete_objects, Delete={"Objects": keys})


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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def mewdex_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mewdex")
    except PackageNotFoundError:
        return "unknown"


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
        try:
            self.conn.close()  # session-level advisory locks go with the connection
        except Exception:
            log.warning("backup: closing the lease connection failed", exc_info=True)


def backup(dest: str | Path, *, keep: int | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Back up the database, its blobs and the key files to ``dest`` (see the module docstring);
    with ``keep``, then remove all but the newest ``keep`` snapshots and the blobs only they used.
    Returns the summary ``{"snapshot", "dest", "mewdex_version", "schema_revision", "counts",
    "blobs": {"total", "copied", "reused", "missing", "bytes_copied"}, "files", "removed_snapshots",
    "seconds"}``. Raises :class:`BackupError`; the result (either way) is recorded for ``/health``."""
    started = time.monotonic()
    progress = progress or _Quiet()
    try:
        summary = _backup(open_target(dest), progress, keep)
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


def _backup(target: Target, progress: Progress, keep: int | None) -> dict[str, Any]:
    from mewdex.storage import blob_store, journal

    settings = get_settings()
    url, env = _libpq()
    name = datetime.now(UTC).strftime(SNAPSHOT_FORMAT)
    if name in target.snapshots():
        time.sleep(1.0)
        name = datetime.now(UTC).strftime(SNAPSHOT_FORMAT)
    conn = _connect(url, env)
    lease = _Lease(conn)
    try:
        if not conn.execute("SELECT pg_try_advisory_lock(%s)", (BACKUP_RUNNING_KEY,)).fetchone()[0]:
            raise BackupError("backup_running", "another backup of this database is running")
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
                    copy = tmp / rel
                    copy.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, copy)
                    files[rel] = copy
            copied, stats, missing = _copy_blobs(blob_store(), target.blobs, blobs, progress)
            # The manifest lists only the blobs the snapshot holds (restore checks each of them); the
            # missing ones are named apart, so the snapshot restores and says what it lacks.
            if missing:
                lost = {(b["namespace"], b["key"]) for b in missing}
                blobs = [b for b in blobs if (b["namespace"], b["key"]) not in lost]
            progress.phase("writing the snapshot", len(files) + 1)
            described = {}
            for rel, path in files.items():
                described[rel] = {"sha256": _sha256(path), "size": path.stat().st_size}
                target.put_file(f"{name}/{rel}", path)
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
            manifest_path = tmp / MANIFEST
            manifest_path.write_text(json.dumps(manifest, indent=1))
            target.put_file(f"{name}/{MANIFEST}", manifest_path)
            progress.advance()
        conn.execute("SELECT pg_advisory_unlock(%s)", (journal.BACKUP_LEASE_KEY,))  # every blob is copied
        _finish_deferred()
        # Still one backup at a time (backup_running): no other backup copies blobs into DEST while
        # the blobs only the dropped snapshots used are removed.
        removed = prune(target, keep) if keep else []
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
    }


def _copy_blobs(source: BlobStore, target: BlobStore, blobs: list[dict], progress: Progress):
    """Copy each blob ``target`` lacks; returns (keys copied, stats)."""
    progress.phase("copying blobs", len(blobs))
    copied: list[str] = []
    stats = {"total": len(blobs), "copied": 0, "reused": 0, "missing": 0, "bytes_copied": 0}
    missing: list[dict] = []
    for blob in blobs:
        namespace, key = blob["namespace"], blob["key"]
        try:
            if target.exists(namespace, key):
                stats["reused"] += 1
            else:
                with source.open(namespace, key) as handle:
                    target.put(namespace, key, handle)
                stats["copied"] += 1
                stats["bytes_copied"] += blob["size"]
                copied.append(key)
        except FileNotFoundError:
            stats["missing"] += 1
            missing.append(blob)
            log.error("backup: blob %s/%s is referenced by the database but missing from the store", namespace, key)
        except OSError as exc:
            raise BackupError("backup_store_failed", f"copying blob {namespace}/{key} failed: {exc}") from None
        progress.advance()
    return copied, stats, missing


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


def read_manifest(target: Target, name: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mewdex-restore-") as tmp:
        path = Path(tmp) / MANIFEST
        try:
            target.get_file(f"{name}/{MANIFEST}", path)
        except FileNotFoundError:
            raise BackupError("backup_not_found", f"{name}/{MANIFEST} is not in {target.describe()}") from None
        try:
            manifest = json.loads(path.read_text())
        except ValueError:
            raise BackupError("backup_corrupted", f"{name}/{MANIFEST} is not valid JSON") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise BackupError("backup_corrupted", f"{name}/{MANIFEST} is not a mewdex backup manifest")
    return manifest


def prune(target: Target, keep: int) -> list[str]:
    """Remove all but the newest ``keep`` snapshots, then the blobs no remaining snapshot lists.
    Returns the removed snapshot names."""
    names = target.snapshots()
    drop = names[:-keep] if keep > 0 else []
    if not drop:
        return []
    kept: set[tuple[str, str]] = set()
    for name in names[-keep:]:
        kept |= {(b["namespace"], b["key"]) for b in read_manifest(target, name).get("blobs", [])}
    namespaces: set[str] = set()
    for name in drop:
        namespaces |= {b["namespace"] for b in read_manifest(target, name).get("blobs", [])}
        target.remove_snapshot(name)
    for namespace in sorted(namespaces):
        for key in list(target.blobs.iter_keys(namespace)):
            if (namespace, key) not in kept:
                target.blobs.delete(namespace, key)
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
    target = open_target(text)
    if target.exists(MANIFEST):  # a snapshot: its parent holds the blobs
        parent, _, name = text.rpartition("/")
        return open_target(parent or "/"), name
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
    if manifest.get("format", 0) > FORMAT or revision not in known_revisions():
        raise BackupError(
            "backup_too_new",
            f"this backup was made by mewdex {manifest.get('mewdex_version')} (schema {revision}); this is "
            f"mewdex {mewdex_version()}, which does not know that schema: upgrade mewdex first, then restore",
        )


def verify(target: Target, name: str, manifest: dict[str, Any], tmp: Path, progress: Progress) -> dict[str, Path]:
    """Download every snapshot file into ``tmp`` and check every hash (files and blobs); returns the
    local copies by name. ``backup_incomplete`` (a file missing) or ``backup_corrupted`` (a hash
    differs), naming the file."""
    files = manifest["files"]
    blobs = manifest.get("blobs", [])
    progress.phase("checking the backup", len(files) + len(blobs))
    local = {}
    for rel, facts in files.items():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            target.get_file(f"{name}/{rel}", path)
        except FileNotFoundError:
            raise BackupError("backup_incomplete", f"{name}/{rel} is missing from the backup") from None
        if _sha256(path) != facts.get("sha256"):
            raise BackupError("backup_corrupted", f"{name}/{rel} is corrupted (its sha256 differs from the manifest)")
        local[rel] = path
        progress.advance()
    for blob in blobs:
        rel = f"blobs/{blob['namespace']}/{blob['key'][:2]}/{blob['key']}"
        digest = hashlib.sha256()
        try:
            with target.blobs.open(blob["namespace"], blob["key"]) as handle:
                while chunk := handle.read(CHUNK):
                    digest.update(chunk)
        except FileNotFoundError:
            raise BackupError("backup_incomplete", f"{rel} is missing from the backup") from None
        if digest.hexdigest() != blob["key"][:64]:
            raise BackupError("backup_corrupted", f"{rel} is corrupted (its sha256 is not its name)")
        progress.advance()
    return local


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
    for namespace in sorted({b["namespace"] for b in manifest.get("blobs", [])}):
        if next(iter(store.iter_keys(namespace)), None) is not None:
            found.append("the blob store has blobs of this library")
            break
    return found


def restore(src: str | Path, *, force: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """Restore the backup ``src`` names (see :func:`resolve_source`) into the configured data dir /
    database + store (see the module docstring). Nothing is written before every hash checked out.
    Returns ``{"snapshot", "source", "mewdex_version", "schema_revision", "migrated_to", "counts",
    "blobs": {"total", "copied"}, "files", "seconds"}``. Raises :class:`BackupError`."""
    from mewdex.db.engine import get_engine, reset_engine
    from mewdex.db.migrate import upgrade
    from mewdex.storage import blob_store

    started = time.monotonic()
    progress = progress or _Quiet()
    target, name = resolve_source(src)
    manifest = read_manifest(target, name)
    check_compatible(manifest)
    found = target_contents(manifest)
    if found and not force:
        raise BackupError(
            "restore_target_not_empty",
            f"the restore target is not empty ({'; '.join(found)}): restore into a new data dir, or pass --force "
            "to replace what is there",
        )
    url, env = _libpq()
    with tempfile.TemporaryDirectory(prefix="mewdex-restore-") as tmp_dir:
        local = verify(target, name, manifest, Path(tmp_dir), progress)
        if force and (others := _other_clients(url, env)):
            raise BackupError(
                "restore_target_in_use",
                f"other processes use the target database ({', '.join(others)}): stop mewdex serve and workers first",
            )
        progress.phase("restoring the database", None)
        reset_engine()
        if force:
            with _connect(url, env) as conn:
                conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
                conn.execute("CREATE SCHEMA public")
        proc = subprocess.run(
            [_pg_binary("pg_restore"), "--no-owner", "--no-acl", "--exit-on-error", f"--dbname={url}", local[DUMP]],
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise BackupError("pg_restore_failed", f"pg_restore failed: {proc.stderr.strip()[-500:]}")
        blobs = manifest.get("blobs", [])
        progress.phase("restoring blobs", len(blobs))
        store = blob_store()
        for blob in blobs:
            with target.blobs.open(blob["namespace"], blob["key"]) as handle:
                store.put(blob["namespace"], blob["key"], handle)
            progress.advance()
        data_dir = get_settings().data_dir.resolve()
        for rel in KEY_FILES:
            if rel in local:
                path = data_dir / rel
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out, open(local[rel], "rb") as source:
                    shutil.copyfileobj(source, out)
                os.replace(tmp, path)
    progress.phase("running migrations", None)
    migrated_to = upgrade(get_engine())
    if manifest.get("secret_key_from_env") and not get_settings().secret_key:
        log.warning("restore: the backup's secrets were sealed with MEWDEX_SECRET_KEY: set the same key here")
    return {
        "snapshot": name,
        "source": target.describe(),
        "mewdex_version": manifest.get("mewdex_version"),
        "schema_revision": manifest.get("schema_revision"),
        "migrated_to": migrated_to,
        "counts": manifest.get("counts", {}),
        "blobs": {"total": len(manifest.get("blobs", [])), "copied": len(manifest.get("blobs", []))},
        "missing_blobs": manifest.get("missing_blobs", []),
        "files": sorted(manifest["files"]),
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
