"""Per-user limits and disk usage.

Limits (``storage_bytes``, ``memes``, ``analysis_cost_per_month``) come from the user row when the
admin set them, else from config (``MEWDEX_QUOTA_*``; unset = unlimited). ``user_disk_usage`` is
kept exact by a database trigger on ``memes`` (a byte-identical re-upload adds no meme, so it is
never counted twice); :func:`rescan` recomputes it from the memes table to correct drift.
Scopes no user owns (single-user mode) have no limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.models import Meme, ScopeContext, User, UserDiskUsage, utcnow
from mewdex.platform.errors import PlatformError


@dataclass(frozen=True)
class Limits:
    """``None`` = unlimited."""

    storage_bytes: int | None
    memes: int | None
    analysis_cost_per_month: Decimal | None

    def as_dict(self) -> dict:
        cost = self.analysis_cost_per_month
        return {
            "storage_bytes": self.storage_bytes,
            "memes": self.memes,
            "analysis_cost_per_month": None if cost is None else float(cost),
        }


def limits_for(user: User) -> Limits:
    s = get_settings()
    cost = user.quota_analysis_cost_per_month
    if cost is None and s.quota_analysis_cost_per_month is not None:
        cost = Decimal(str(s.quota_analysis_cost_per_month))
    return Limits(
        storage_bytes=user.quota_storage_bytes if user.quota_storage_bytes is not None else s.quota_storage_bytes,
        memes=user.quota_memes if user.quota_memes is not None else s.quota_memes,
        analysis_cost_per_month=cost,
    )


def disk_usage(session: Session, user: User) -> dict:
    """``{"bytes_used", "file_count", "scanned_at"}`` (zeros before the user's first meme)."""
    row = session.get(UserDiskUsage, user.user_id)
    if row is None:
        return {"bytes_used": 0, "file_count": 0, "scanned_at": None}
    return {"bytes_used": row.bytes_used, "file_count": row.file_count, "scanned_at": row.scanned_at.isoformat()}


def check_upload(session: Session, scope: ScopeContext, nbytes: int, count: int = 1) -> None:
    """Reserve room for ``count`` memes of ``nbytes`` bytes in all, or raise 413 ``quota_exceeded``
    when that would pass the scope owner's ``storage_bytes`` or ``memes`` limit.

    Atomic: the owner's usage row is locked (``FOR UPDATE``) and uploads already journaled but not
    yet committed as memes (open ``upload`` storage operations of the scope) count as used, so the
    caller's own journal entry, written in this same transaction, is the reservation the next
    upload sees — parallel uploads cannot overshoot. Call it before anything is written (and not
    for an exact duplicate, which adds nothing), in the transaction that journals the upload.
    """
    from mewdex.db.models import StorageOperation
    from mewdex.platform.owners import user_for_scope
    from mewdex.storage.journal import OPEN

    user = user_for_scope(session, scope.scope_id)
    if user is None:
        return
    limits = limits_for(user)
    if limits.storage_bytes is None and limits.memes is None:
        return
    session.execute(
        insert(UserDiskUsage)
        .values(user_id=user.user_id, bytes_used=0, file_count=0, scanned_at=utcnow())
        .on_conflict_do_nothing()
    )
    row = session.execute(
        select(UserDiskUsage).where(UserDiskUsage.user_id == user.user_id).with_for_update()
    ).scalar_one()
    pending_bytes, pending_count = session.execute(
        select(func.coalesce(func.sum(StorageOperation.after_size), 0), func.count(StorageOperation.id)).where(
            StorageOperation.scope_id == scope.scope_id,
            StorageOperation.operation_type == "upload",
            StorageOperation.status.in_(OPEN),
        )
    ).one()
    used_bytes, used_count = row.bytes_used + int(pending_bytes or 0), row.file_count + int(pending_count)
    over = {}
    if limits.storage_bytes is not None and used_bytes + nbytes > limits.storage_bytes:
        over["storage_bytes"] = {"limit": limits.storage_bytes, "used": used_bytes, "requested": nbytes}
    if limits.memes is not None and used_count + count > limits.memes:
        over["memes"] = {"limit": limits.memes, "used": used_count, "requested": count}
    if over:
        raise PlatformError("quota_exceeded", "this upload would pass your storage quota", over)


def rescan_user(session: Session, user: User) -> dict | None:
    """Recompute one user's usage from the memes table; the drift corrected (``None`` = none).

    The usage row is locked first, so a meme insert racing with the scan either committed before
    (and is in the sum) or waits and adds itself after.
    """
    session.execute(
        insert(UserDiskUsage)
        .values(user_id=user.user_id, bytes_used=0, file_count=0, scanned_at=utcnow())
        .on_conflict_do_nothing()
    )
    row = session.execute(
        select(UserDiskUsage).where(UserDiskUsage.user_id == user.user_id).with_for_update()
    ).scalar_one()
    total, count = session.execute(
        select(func.coalesce(func.sum(Meme.size_bytes), 0), func.count(Meme.id)).where(Meme.scope_id == user.scope_id)
    ).one()
    drift = None
    if (row.bytes_used, row.file_count) != (int(total), int(count)):
        drift = {"bytes": int(total) - row.bytes_used, "files": int(count) - row.file_count}
        row.bytes_used, row.file_count = int(total), int(count)
    row.scanned_at = utcnow()
    return drift


def rescan(sessions) -> dict[str, dict]:
    """Full scan of every user (one short transaction each); ``{user_id: drift}`` for the corrected."""
    with sessions.begin() as session:
        ids = list(session.execute(select(User.user_id)).scalars())
    fixed = {}
    for user_id in ids:
        with sessions.begin() as session:
            session.execute(text("SET LOCAL lock_timeout = '5s'"))
            user = session.get(User, user_id)
            if user is not None and (drift := rescan_user(session, user)):
                fixed[str(user_id)] = drift
    return fixed
