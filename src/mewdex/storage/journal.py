"""The storage-operation journal: every change that touches both the database and the blob store
is recorded in ``storage_operations`` so that a crash at any moment loses no file and leaves no
orphan. Statuses: ``prepared`` → (``file_applied``) → ``completed`` | ``compensated`` | ``blocked``.

The three operations and what recovery does with an interrupted one:

* **upload** — ``prepared`` (committed) before the blob is written; ``completed`` in the
  transaction that creates the meme row. Recovery: the row exists → ``completed``; otherwise the
  blob is removed unless something else uses it → ``compensated``.
* **rename** — ``prepared`` (with the expected revision and the new name's fingerprint) before the
  transaction that changes the name and marks it ``completed``. A rename touches no file (blobs are
  content-addressed), so an interrupted one never applied: recovery → ``compensated``.
* **delete** — the meme's rows are deleted in the transaction that records the operation
  ``prepared`` with the blob key and thumbnail keys (the operation is unlinked from the meme, whose
  row is gone); then the files are removed and the operation ``completed``. Recovery redoes the file
  removals (idempotent) → ``completed``. The user never sees a meme without its file.

A blob is "in use" while a meme row references it or another open upload is about to. Checks and
removals of one key run under a transaction-scoped advisory lock on ``(scope, key)`` that uploads
also take when they prepare, so a delete never removes a blob an upload has just written.

**Backup lease.** A running backup (:mod:`mewdex.backups`) holds the advisory lock
:data:`BACKUP_LEASE_KEY` exclusively on its own connection from before its database snapshot until
its last blob is copied. Every blob removal first takes that lock shared for its transaction
(:func:`removal_deferred`): while a backup holds it, the removal is deferred: the operation stays
open with ``error.code = "deferred_by_backup"`` (the meme's rows are gone as usual, only its files
stay), and :func:`finish_deferred` completes it when the backup ends (storage recovery would too).
The backup takes its lease only after the removals in flight commit, so any removal that did not see
the lease was of rows its snapshot no longer has. Deleting an account empties its namespaces by the
same rule (:func:`defer_namespace_removal`: recorded while a backup runs, emptied when it ends).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from sqlalchemy import exists, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.db.models import DerivedImageThumbnail, Meme, PlatformSetting, Scope, StorageOperation, utcnow
from mewdex.storage.blobs import LocalBlobStore, check_namespace, thumbnail_namespace

log = logging.getLogger(__name__)
OPEN = ("prepared", "file_applied")
#: The backup lease's advisory lock (``pg_advisory_lock`` key, 64-bit): "mewdexbk".
BACKUP_LEASE_KEY = 0x6D65776465786B62
DEFERRED = "deferred_by_backup"
#: ``platform_settings`` key prefix of a deleted account's namespaces waiting for a backup to end.
NAMESPACE_REMOVAL = "namespace_removal:"


def removal_deferred(session: Session) -> bool:
    """True while a backup holds its lease: blob removals must wait (see the module docstring).
    Otherwise takes the lease shared for the caller's transaction, so no backup starts its snapshot
    before the caller commits."""
    return not session.execute(
        text("SELECT pg_try_advisory_xact_lock_shared(:k)"), {"k": BACKUP_LEASE_KEY}
    ).scalar_one()


def defer(session: Session, op_id) -> None:
    """Leave operation ``op_id`` open for :func:`finish_deferred` (a backup holds its lease)."""
    op = session.get_one(StorageOperation, op_id)
    op.error = {"code": DEFERRED, "message": "a backup was running; the files are removed when it ends"}


def defer_namespace_removal(session: Session, scope_id: str, namespaces: list[str]) -> bool:
    """For a deleted scope's blob ``namespaces``, in the transaction that deletes its rows: True when
    a backup holds its lease (the namespaces are recorded and emptied by :func:`finish_deferred` or
    :func:`recover` once it ends); False when the caller may empty them (:func:`empty_namespaces`)
    right after its commit."""
    if not namespaces or not removal_deferred(session):
        return False
    stmt = insert(PlatformSetting).values(
        key=f"{NAMESPACE_REMOVAL}{scope_id}", value={"namespaces": namespaces}, updated_at=utcnow()
    )
    session.execute(stmt.on_conflict_do_nothing(index_elements=["key"]))
    return True


def empty_namespaces(store, namespaces: list[str]) -> int:
    """Delete every blob of ``namespaces`` (a deleted scope's, after its rows' commit); returns the
    files removed. A local store's emptied folders go too."""
    removed = 0
    for namespace in namespaces:
        for key in list(store.iter_keys(namespace)):
            removed += bool(store.delete(namespace, key))
        if isinstance(store, LocalBlobStore):
            _remove_empty_dirs(store.root / check_namespace(namespace))
    return removed


def _remove_empty_dirs(base: Path) -> None:
    if not base.is_dir():
        return
    for shard in base.iterdir():
        if shard.is_dir():
            try:
                shard.rmdir()
            except OSError:  # a stray file stays (and keeps its folder)
                log.warning("namespace removal: %s is not empty, left in place", shard)
    try:
        base.rmdir()
    except OSError:
        log.warning("namespace removal: %s is not empty, left in place", base)


def _finish_namespace_removals(session: Session, store) -> int:
    """Empty the namespaces :func:`defer_namespace_removal` recorded, unless a backup still holds
    its lease; returns how many namespaces were emptied."""
    rows = (
        session.execute(
            select(PlatformSetting)
            .where(PlatformSetting.key.startswith(NAMESPACE_REMOVAL))
            .with_for_update(skip_locked=True)
        )
        .scalars()
        .all()
    )
    if not rows or removal_deferred(session):
        return 0
    emptied = 0
    for row in rows:
        namespaces = list(row.value.get("namespaces", []))
        empty_namespaces(store, namespaces)
        emptied += len(namespaces)
        session.delete(row)
    log.info("storage: emptied %d namespace(s) of deleted accounts after a backup", emptied)
    return emptied


def lock_key(session: Session, scope_id: str, key: str) -> None:
    """Take the transaction-scoped advisory lock of blob ``key`` in the scope (released at commit)."""
    session.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(f"{scope_id}/{key}", 0))))


def prepare_upload(session: Session, scope_id: str, key: str, sha256: str, size: int) -> StorageOperation:
    """Journal an upload about to write blob ``key``; commit before writing the file."""
    lock_key(session, scope_id, key)
    op = StorageOperation(
        scope_id=scope_id,
        operation_type="upload",
        target_key=key,
        after_sha256=sha256,
        after_size=size,
        status="prepared",
    )
    session.add(op)
    session.flush()
    return op


def blob_in_use(session: Session, scope_id: str, key: str, *, except_op=None) -> bool:
    """True while a meme of the scope references blob ``key`` or another open upload targets it."""
    if session.execute(select(exists().where(Meme.scope_id == scope_id, Meme.storage_key == key))).scalar_one():
        return True
    pending = select(StorageOperation.id).where(
        StorageOperation.scope_id == scope_id,
        StorageOperation.operation_type == "upload",
        StorageOperation.target_key == key,
        StorageOperation.status.in_(OPEN),
    )
    if except_op is not None:
        pending = pending.where(StorageOperation.id != except_op)
    return session.execute(select(exists(pending))).scalar_one()


def thumbnail_in_use(session: Session, scope_id: str, key: str) -> bool:
    """True while a thumbnail row of the scope points at thumbnail blob ``key``."""
    return session.execute(
        select(exists().where(DerivedImageThumbnail.scope_id == scope_id, DerivedImageThumbnail.output_key == key))
    ).scalar_one()


def complete(session: Session, op_id, meme_id) -> None:
    """Mark an upload completed (call in the transaction that creates its meme row)."""
    op = session.get_one(StorageOperation, op_id)
    op.meme_id = meme_id
    op.status = "completed"


def compensate(session: Session, op_id, error: dict | None = None) -> None:
    """Mark an operation compensated: it never took effect (for an upload: the blob is shared or removed)."""
    op = session.get_one(StorageOperation, op_id)
    op.status = "compensated"
    if error is not None:
        op.error = error


def name_fingerprint(name: str) -> str:
    """sha256 hex of a display name (``storage_operations.expected_title_fingerprint``)."""
    return hashlib.sha256(name.encode("utf-8")).hexdigest()


def open_operation(session: Session, meme: Meme) -> StorageOperation | None:
    """The meme's journaled operation that is not finished yet (``prepared`` or ``file_applied``), if any."""
    return session.execute(
        select(StorageOperation)
        .where(
            StorageOperation.scope_id == meme.scope_id,
            StorageOperation.meme_id == meme.id,
            StorageOperation.status.in_(("prepared", "file_applied")),
        )
        .limit(1)
    ).scalar_one_or_none()


def prepare_rename(session: Session, meme: Meme, new_name: str, expected_revision: int) -> StorageOperation:
    """Journal a rename of ``meme`` to ``new_name`` at ``expected_revision``; commit before applying it."""
    op = StorageOperation(
        scope_id=meme.scope_id,
        meme_id=meme.id,
        operation_type="rename",
        source_key=meme.storage_key,
        target_key=meme.storage_key,
        expected_revision=expected_revision,
        expected_title_fingerprint=name_fingerprint(new_name),
        status="prepared",
    )
    session.add(op)
    session.flush()
    return op


def record_delete(session: Session, meme: Meme, thumbnail_keys: Sequence[str]) -> StorageOperation:
    """Journal the removal of ``meme``'s files, in the transaction that deletes its rows.

    The operation is not linked to the meme (its row is going); it keeps the blob key and the
    thumbnail keys so recovery can finish the file removals.
    """
    op = StorageOperation(
        scope_id=meme.scope_id,
        meme_id=None,
        operation_type="delete",
        source_key=meme.storage_key,
        thumbnail_keys=sorted(set(thumbnail_keys)),
        before_sha256=meme.sha256,
        before_size=meme.size_bytes,
        expected_revision=meme.revision,
        status="prepared",
    )
    session.add(op)
    session.flush()
    return op


def remove_blob_if_unused(session: Session, store, scope_id: str, namespace: str, key: str, *, except_op=None) -> bool:
    """Remove blob ``key`` unless it is in use (under the key's advisory lock); True if it was removed."""
    lock_key(session, scope_id, key)
    if blob_in_use(session, scope_id, key, except_op=except_op):
        return False
    return store.delete(namespace, key)


def remove_thumbnails_if_unused(session: Session, store, scope_id: str, namespace: str, keys) -> None:
    """Remove each thumbnail blob in ``keys`` that no thumbnail row of the scope still points at."""
    for key in keys:
        if not thumbnail_in_use(session, scope_id, key):
            store.delete(thumbnail_namespace(namespace), key)


def recover(session: Session, store, *, older_than_seconds: float = 60.0) -> dict[str, int]:
    """Complete or compensate interrupted operations last touched before the grace period.

    See the module docstring for what happens to each kind. Rows locked by a live writer are
    skipped. Returns counts by outcome (``completed``, ``compensated``, ``blocked``).
    """
    cutoff = utcnow() - timedelta(seconds=older_than_seconds)
    ops = session.execute(
        select(StorageOperation, Scope.storage_namespace)
        .join(Scope, Scope.id == StorageOperation.scope_id)
        .where(StorageOperation.status.in_(OPEN), StorageOperation.updated_at < cutoff)
        .order_by(StorageOperation.created_at)
        .with_for_update(of=StorageOperation, skip_locked=True)
    ).all()
    counts = {"completed": 0, "compensated": 0, "blocked": 0, "deferred": 0}
    counts["namespaces"] = _finish_namespace_removals(session, store)
    if ops and removal_deferred(session):
        counts["deferred"] = len(ops)  # every kind may remove a file: all wait for the backup to end
        return counts
    for op, namespace in ops:
        try:
            with session.begin_nested():
                _recover_one(session, store, op, str(namespace))
        except Exception as exc:  # a broken file system must not stop the other recoveries
            log.exception("storage recovery of operation %s failed", op.id)
            op.status = "blocked"
            op.error = {"code": "recovery_failed", "message": f"{type(exc).__name__}: {exc}"}
        counts[op.status] += 1
    if ops:
        log.info("storage recovery: %s", counts)
    return counts


def finish_deferred(session: Session, store) -> dict[str, int]:
    """Complete the operations deferred by a backup (:func:`defer`), whatever their age; call after
    the backup released its lease. Returns counts by outcome (``recover``'s)."""
    ops = session.execute(
        select(StorageOperation, Scope.storage_namespace)
        .join(Scope, Scope.id == StorageOperation.scope_id)
        .where(StorageOperation.status.in_(OPEN), StorageOperation.error["code"].astext == DEFERRED)
        .order_by(StorageOperation.created_at)
        .with_for_update(of=StorageOperation, skip_locked=True)
    ).all()
    counts = {"completed": 0, "compensated": 0, "blocked": 0, "deferred": 0}
    counts["namespaces"] = _finish_namespace_removals(session, store)
    if ops and removal_deferred(session):
        counts["deferred"] = len(ops)
        return counts
    for op, namespace in ops:
        try:
            with session.begin_nested():
                op.error = None
                _recover_one(session, store, op, str(namespace))
        except Exception as exc:
            log.exception("finishing deferred storage operation %s failed", op.id)
            op.status = "blocked"
            op.error = {"code": "recovery_failed", "message": f"{type(exc).__name__}: {exc}"}
        counts[op.status] += 1
    return counts


def _key(op: StorageOperation, key: str | None) -> str:
    """The operation's blob key (an upload's target, a delete's source); ValueError when the row has none."""
    if key is None:
        raise ValueError(f"storage operation {op.id} ({op.operation_type}) has no blob key")
    return key


def _recover_one(session: Session, store, op: StorageOperation, namespace: str) -> None:
    if op.operation_type == "upload":
        target = _key(op, op.target_key)
        lock_key(session, op.scope_id, target)
        if session.execute(
            select(exists().where(Meme.scope_id == op.scope_id, Meme.storage_key == target))
        ).scalar_one():
            op.status = "completed"
        else:
            remove_blob_if_unused(session, store, op.scope_id, namespace, target, except_op=op.id)
            op.status = "compensated"
            op.error = {"code": "interrupted", "message": "the upload was interrupted before its meme was created"}
    elif op.operation_type == "rename":
        op.status = "compensated"
        op.error = {"code": "interrupted", "message": "the rename was interrupted before it applied"}
    else:  # delete: its rows are gone (same transaction as the journal entry); finish the files
        remove_blob_if_unused(session, store, op.scope_id, namespace, _key(op, op.source_key))
        remove_thumbnails_if_unused(session, store, op.scope_id, namespace, op.thumbnail_keys)
        op.status = "completed"
