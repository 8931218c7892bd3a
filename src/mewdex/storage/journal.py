"""The storage-operation journal: an upload is recorded ``prepared`` before its file is written and
``completed`` in the transaction that creates its meme row; recovery finishes or undoes any
operation a crash interrupted, so no blob is left without a row and no row without its blob.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from mewdex.db.models import Meme, Scope, StorageOperation, utcnow

log = logging.getLogger(__name__)


def prepare_upload(session: Session, scope_id: str, key: str, sha256: str, size: int) -> StorageOperation:
    """Journal an upload about to write blob ``key``; commit before writing the file."""
    op = StorageOperation(
        scope_id=scope_id, operation_type="upload", target_key=key, after_sha256=sha256, after_size=size,
        status="prepared",
    )
    session.add(op)
    session.flush()
    return op


def blob_in_use(session: Session, scope_id: str, key: str) -> bool:
    return session.execute(
        select(exists().where(Meme.scope_id == scope_id, Meme.storage_key == key))
    ).scalar_one()


def recover(session: Session, store, *, older_than_seconds: float = 60.0) -> dict[str, int]:
    """Complete or compensate interrupted uploads older than the grace period.

    An upload whose meme row exists is completed; otherwise its blob is removed (when no meme of
    the scope uses it) and the operation compensated. Returns counts by outcome.
    """
    cutoff = utcnow() - timedelta(seconds=older_than_seconds)
    ops = session.execute(
        select(StorageOperation, Scope.storage_namespace)
        .join(Scope, Scope.id == StorageOperation.scope_id)
        .where(
            StorageOperation.status.in_(("prepared", "file_applied")),
            StorageOperation.operation_type == "upload",
            StorageOperation.updated_at < cutoff,
        )
        .with_for_update(of=StorageOperation, skip_locked=True)
    ).all()
    counts = {"completed": 0, "compensated": 0}
    for op, namespace in ops:
        if blob_in_use(session, op.scope_id, op.target_key):
            op.status = "completed"
        else:
            store.delete(str(namespace), op.target_key)
            op.status = "compensated"
        counts[op.status] += 1
    if ops:
        log.info("storage recovery: %s", counts)
    return counts


def complete(session: Session, op_id, meme_id) -> None:
    """Mark an upload completed (call in the transaction that creates its meme row)."""
    op = session.get(StorageOperation, op_id)
    op.meme_id = meme_id
    op.status = "completed"


def compensate(session: Session, op_id) -> None:
    """Mark an upload compensated: its meme was never created (the blob is shared or removed)."""
    session.get(StorageOperation, op_id).status = "compensated"
