"""Restoring a backup (``mewdex restore SRC``): the snapshot found, its manifest authenticated, the
whole backup verified into a temporary folder, the dump's schema checked (:mod:`.schema`), then the
database, the blobs and the key files written."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mewdex.backups.archive import (
    DUMP,
    FORMAT,
    KEY_FILES,
    MANIFEST,
    SNAPSHOT_NAME,
    BackupError,
    BackupKey,
    Entry,
    Progress,
    _Bounded,
    _context,
    _decoded,
    _envelope,
    _local_name,
    _Quiet,
    entries,
    log,
    mewdex_version,
    object_name,
    open_manifest,
    stored_size,
)
from mewdex.backups.database import _connect, _libpq, _pg_binary
from mewdex.backups.keys import _configured_key, _write_local_key, key_from_passphrase, local_key_path, parse_key
from mewdex.backups.schema import (
    _DATA_KINDS,
    EXTENSIONS,
    Reference,
    _scratch_database,
    _toc_entry,
    check_dump,
    reference_schema,
)
from mewdex.backups.settings import settings as backup_settings
from mewdex.backups.targets import Target, _raw_manifest, open_target, read_header
from mewdex.config import get_settings


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
    if key.kdf is None and not backup_settings().backup_key_file and not local_key_path().exists():
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
