"""Writing a backup (``mewdex backup DEST``, the scheduled ``backup`` task): one consistent snapshot
of the database, its blobs and the key files, then pruning to ``keep`` snapshots."""

from __future__ import annotations

import json
import secrets
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mewdex.backups.archive import (
    DUMP,
    FORMAT,
    HEADER,
    KEY_FILES,
    MANIFEST,
    SNAPSHOT_FORMAT,
    BackupError,
    BackupKey,
    Entry,
    Progress,
    _context,
    _plain_size,
    _Quiet,
    _write_stored,
    entries,
    log,
    mewdex_version,
    object_name,
    seal_manifest,
)
from mewdex.backups.database import _connect, _libpq, _pg_binary
from mewdex.backups.keys import _configured_key, _write_local_key
from mewdex.backups.status import record_result
from mewdex.backups.targets import Target, _write_bytes, open_target, read_header, read_manifest
from mewdex.config import get_settings
from mewdex.storage.blobs import BlobStore, thumbnail_namespace

#: One backup at a time per database (``pg_try_advisory_lock``): "mewdexb1".
BACKUP_RUNNING_KEY = 0x6D65776465786231
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
