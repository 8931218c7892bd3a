"""Artifacts (seed 004): the stable identity of what a conversation delivered (a meme pick) or
produced (an exported package), with trash and restore. Scope-checked like conversations."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.orm import Session

from mewdex.assistant.errors import AssistantError
from mewdex.db.models import Artifact, ScopeContext, utcnow


def get(session: Session, scope: ScopeContext, artifact_id: Any, *, lock: bool = False) -> Artifact:
    """The scope's artifact; ``not_found`` otherwise."""
    try:
        uid = artifact_id if isinstance(artifact_id, UUID) else UUID(str(artifact_id))
    except ValueError:
        raise AssistantError("not_found", "no such artifact") from None
    stmt = select(Artifact).where(Artifact.artifact_id == uid, Artifact.scope_id == scope.scope_id)
    found = session.execute(stmt.with_for_update() if lock else stmt).scalar_one_or_none()
    if found is None:
        raise AssistantError("not_found", "no such artifact")
    return found


def list_artifacts(
    session: Session,
    scope: ScopeContext,
    *,
    conversation_id: UUID | None = None,
    status: str = "active",
    limit: int = 100,
) -> list[Artifact]:
    """The scope's artifacts (``status`` active or trashed), newest first, optionally of one conversation."""
    stmt = select(Artifact).where(Artifact.scope_id == scope.scope_id, Artifact.status == status)
    if conversation_id is not None:
        stmt = stmt.where(Artifact.origin_conversation_id == conversation_id)
    return list(session.execute(stmt.order_by(Artifact.created_at.desc()).limit(limit)).scalars())


def trash(session: Session, scope: ScopeContext, artifact_id: Any) -> Artifact:
    """Move to the trash (``status`` trashed, ``deleted_at``); the meme itself is untouched."""
    artifact = get(session, scope, artifact_id, lock=True)
    if artifact.status != "trashed":
        artifact.status, artifact.deleted_at = "trashed", utcnow()
    return artifact


def restore(session: Session, scope: ScopeContext, artifact_id: Any) -> Artifact:
    """Back from the trash."""
    artifact = get(session, scope, artifact_id, lock=True)
    artifact.status, artifact.deleted_at, artifact.trash_path = "active", None, None
    return artifact
