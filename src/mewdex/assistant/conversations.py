"""Conversations and messages (seed 004): create, list, rename, soft delete/restore, clear, the
message counter under the row lock, and the auto-title with its ABA guard.

Every function takes the caller's ``Session`` and a ``ScopeContext``; another scope's (or a
deleted, where it says so) conversation raises ``AssistantError("not_found")``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import delete, or_, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session

from mewdex.assistant.errors import AssistantError
from mewdex.db.models import Conversation, Message, ScopeContext, utcnow
from mewdex.library.listing import escape_like
from mewdex.platform import owners

MAX_TITLE_CHARS = 200
AUTO_TITLE_CHARS = 40
DEFAULT_TITLE = "New chat"
#: A message payload's mark of a guest's turn (someone other than a chat binding's owner) and its
#: reply: kept in the conversation, never in the chat model's context (a stranger's words must not
#: steer the owner's later turns and their write tools).
GUEST_KEY = "mewdex_guest"


def _id(value: Any) -> UUID:
    try:
        return value if isinstance(value, UUID) else UUID(str(value))
    except ValueError:
        raise AssistantError("not_found", "no such conversation") from None


def get(
    session: Session, scope: ScopeContext, conversation_id: Any, *, lock: bool = False, include_deleted: bool = False
) -> Conversation:
    """The scope's conversation (``lock``: ``FOR UPDATE``); ``not_found`` otherwise."""
    stmt = select(Conversation).where(
        Conversation.conversation_id == _id(conversation_id), Conversation.scope_id == scope.scope_id
    )
    if not include_deleted:
        stmt = stmt.where(Conversation.deleted_at.is_(None))
    if lock:
        stmt = stmt.with_for_update()
    found = session.execute(stmt).scalar_one_or_none()
    if found is None:
        raise AssistantError("not_found", "no such conversation")
    return found


def _title(value: Any) -> str:
    title = " ".join(str(value or "").replace("\x00", "").split())
    if not title:
        raise AssistantError("invalid_request", "the title is empty")
    if len(title) > MAX_TITLE_CHARS:
        raise AssistantError("invalid_request", f"the title is over {MAX_TITLE_CHARS} characters")
    return title


def create(
    session: Session,
    scope: ScopeContext,
    *,
    user_id: UUID | None = None,
    name: str | None = None,
    channel: str = "web",
    scheduled_job_id: UUID | None = None,
) -> Conversation:
    """A new conversation; without ``name`` it is titled automatically from its first message
    (``title_source`` auto, ``auto_title_pending``). ``user_id`` defaults to the scope's owner (None for
    the local scope of single-user mode)."""
    auto = name is None or not str(name).strip()
    if user_id is None:
        owner = owners.user_for_scope(session, scope.scope_id)
        user_id = owner.user_id if owner is not None else None
    conversation = Conversation(
        scope_id=scope.scope_id,
        user_id=user_id,
        name=DEFAULT_TITLE if auto else _title(name),
        title_source="auto" if auto else "manual",
        auto_title_pending=auto,
        channel=channel,
        scheduled_job_id=scheduled_job_id,
    )
    session.add(conversation)
    session.flush()
    return conversation


def list_conversations(
    session: Session,
    scope: ScopeContext,
    *,
    q: str | None = None,
    deleted: bool = False,
    limit: int = 50,
    before: datetime | None = None,
) -> list[Conversation]:
    """The scope's conversations, most recently updated first (``deleted``: the trash instead);
    ``q`` matches the title or any message text (case-insensitive substring)."""
    stmt = select(Conversation).where(Conversation.scope_id == scope.scope_id, Conversation.scheduled_job_id.is_(None))
    stmt = stmt.where(Conversation.deleted_at.is_not(None) if deleted else Conversation.deleted_at.is_(None))
    if q and q.strip():
        pattern = f"%{escape_like(q.strip())}%"
        in_messages = (
            select(Message.conversation_id)
            .where(
                Message.conversation_id == Conversation.conversation_id,
                Message.payload["content"].astext.ilike(pattern, escape="\\"),
            )
            .exists()
        )
        stmt = stmt.where(or_(Conversation.name.ilike(pattern, escape="\\"), in_messages))
    if before is not None:
        stmt = stmt.where(Conversation.updated_at < before)
    stmt = stmt.order_by(Conversation.updated_at.desc(), Conversation.conversation_id.desc()).limit(limit)
    return list(session.execute(stmt).scalars())


def rename(session: Session, scope: ScopeContext, conversation_id: Any, name: Any) -> Conversation:
    """A manual title: ``title_source`` manual, and a pending auto-title is dropped (version + 1)."""
    conversation = get(session, scope, conversation_id, lock=True)
    conversation.name = _title(name)
    conversation.title_source = "manual"
    conversation.auto_title_pending = False
    conversation.auto_title_version += 1
    return conversation


def soft_delete(session: Session, scope: ScopeContext, conversation_id: Any) -> Conversation:
    """Hide it (``deleted_at``); messages stay; a run in flight is asked to stop."""
    conversation = get(session, scope, conversation_id, lock=True)
    conversation.deleted_at = utcnow()
    if conversation.run_status == "running":
        conversation.run_status = "cancelling"
    return conversation


def restore(session: Session, scope: ScopeContext, conversation_id: Any) -> Conversation:
    """Undo :func:`soft_delete`; ``conversation_not_deleted`` (409) when it is not deleted."""
    conversation = get(session, scope, conversation_id, lock=True, include_deleted=True)
    if conversation.deleted_at is None:
        raise AssistantError("conversation_not_deleted", "the conversation is not deleted")
    conversation.deleted_at = None
    return conversation


def clear(session: Session, scope: ScopeContext, conversation_id: Any) -> Conversation:
    """Remove every message and start over: the counter and context window reset; an auto title goes
    back to pending with ``auto_title_version`` + 1, so a title still in flight is dropped (ABA)."""
    conversation = get(session, scope, conversation_id, lock=True)
    session.execute(delete(Message).where(Message.conversation_id == conversation.conversation_id))
    conversation.next_message_idx = 0
    conversation.context_base_idx = 0
    conversation.context_summary = None
    if conversation.title_source == "auto":
        conversation.auto_title_version += 1
        conversation.auto_title_pending = True
        conversation.name = DEFAULT_TITLE
    return conversation


def new_topic(session: Session, scope: ScopeContext, conversation_id: Any) -> Conversation:
    """ "New topic": the model's context starts at the next message, without a folded summary."""
    conversation = get(session, scope, conversation_id, lock=True)
    conversation.context_base_idx = conversation.next_message_idx
    conversation.context_summary = None
    return conversation


def append_message(
    session: Session,
    conversation: Conversation,
    payload: dict[str, Any],
    *,
    artifact_refs: list[dict[str, Any]] | None = None,
    kind: str | None = None,
    tokens_in: int | None = None,
    tokens_out: int | None = None,
    model_profile: str | None = None,
) -> Message:
    """Append a message with the next ``idx``. ``conversation`` must be locked by the caller
    (:func:`get` with ``lock=True``): that lock serialises the counter, and ``uq (conversation_id,
    idx)`` backs it."""
    message = Message(
        conversation_id=conversation.conversation_id,
        idx=conversation.next_message_idx,
        payload=payload,
        artifact_refs=artifact_refs,
        kind=kind,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        model_profile=model_profile,
    )
    conversation.next_message_idx += 1
    conversation.updated_at = utcnow()
    session.add(message)
    return message


def take_auto_title(conversation: Conversation) -> int | None:
    """Claim the pending auto-title (call under the row lock): the version a title result must
    carry back to :func:`apply_auto_title`, or None when none is pending."""
    if conversation.title_source != "auto" or not conversation.auto_title_pending:
        return None
    conversation.auto_title_pending = False
    return conversation.auto_title_version


def apply_auto_title(session: Session, scope: ScopeContext, conversation_id: Any, version: int, title: str) -> bool:
    """Store an auto-title result only if the conversation is still on ``version`` with an auto title
    (a result that comes back after a clear or a rename is dropped: the ABA guard). True if stored."""
    title = " ".join(title.replace("\x00", "").split())[:AUTO_TITLE_CHARS]
    if not title:
        return False
    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]  # an UPDATE gives a CursorResult
        update(Conversation)
        .where(
            Conversation.conversation_id == _id(conversation_id),
            Conversation.scope_id == scope.scope_id,
            Conversation.title_source == "auto",
            Conversation.auto_title_version == version,
            Conversation.deleted_at.is_(None),
        )
        .values(name=title)
    )
    return result.rowcount == 1


def messages(
    session: Session, scope: ScopeContext, conversation_id: Any, *, before_idx: int | None = None, limit: int = 50
) -> tuple[Conversation, list[Message]]:
    """Up to ``limit`` messages before ``before_idx`` (all when None), in ``idx`` order."""
    conversation = get(session, scope, conversation_id)
    stmt = select(Message).where(Message.conversation_id == conversation.conversation_id)
    if before_idx is not None:
        stmt = stmt.where(Message.idx < before_idx)
    rows = list(session.execute(stmt.order_by(Message.idx.desc()).limit(limit)).scalars())
    return conversation, rows[::-1]
