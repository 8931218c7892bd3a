"""Answering a message: the user's message and the run start in one short transaction, the reply is
computed and streamed as events, and the assistant's message, its artifacts and the run's end are
written in another. Cancel (``runs.cancel``) is seen between events.

Events (``(name, data)``): ``message`` (the user's message), ``delta`` (``{"text"}``), ``meme`` (a
card), ``done`` (``{"message", "run_status"}``), ``error`` (``{"code", "message"}``).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from sqlalchemy.orm import Session, sessionmaker

from mewdex.assistant import conversations, retrieval, runs
from mewdex.assistant.errors import AssistantError
from mewdex.config import get_settings
from mewdex.db.models import Artifact, Conversation, Message, ScopeContext
from mewdex.dto.errors import DomainError
from mewdex.dto.search import SearchHit
from mewdex.inference.errors import BackendUnavailable
from mewdex.library.images import ImageError

MAX_MESSAGE_CHARS = 2000
Event = tuple[str, dict[str, Any]]


@dataclass
class Run:
    scope: ScopeContext
    conversation_id: UUID
    owner: str
    text: str
    image: bytes | None
    user_message: dict[str, Any]


def message_view(message: Message) -> dict[str, Any]:
    """A message as the API shows it (``dto.assistant.MessageOut``)."""
    payload = message.payload or {}
    refs = message.artifact_refs
    return {
        "message_id": str(message.message_id),
        "idx": message.idx,
        "role": payload.get("role", "assistant"),
        "content": payload.get("content") or "",
        "kind": message.kind,
        "attachments": payload.get("attachments") or [],
        "memes": [card_from_ref(r) for r in refs or []],
        "artifact_refs": refs,
        "tokens_in": message.tokens_in,
        "tokens_out": message.tokens_out,
        "model_profile": message.model_profile,
        "created_at": message.created_at.isoformat(),
    }


def card(hit: SearchHit) -> dict[str, Any]:
    """A meme card: id, name, sha256, the original's and the thumbnail's URLs, the meme's page."""
    return {
        "meme_id": hit.id,
        "display_name": hit.display_name,
        "sha256": hit.sha256,
        "media_url": f"/media/{hit.id}",
        "thumbnail_url": f"/media/{hit.id}/thumbnail",
        "page_url": f"/memes/{hit.id}",
        "artifact_id": None,
    }


def card_from_ref(ref: dict[str, Any]) -> dict[str, Any]:
    meme_id = ref.get("meme_id")
    return {
        "meme_id": meme_id,
        "display_name": ref.get("display_name") or "",
        "sha256": ref.get("sha256") or "",
        "media_url": f"/media/{meme_id}",
        "thumbnail_url": f"/media/{meme_id}/thumbnail",
        "page_url": f"/memes/{meme_id}",
        "artifact_id": ref.get("artifact_id"),
    }


def _checked_text(text: str | None, has_image: bool) -> str:
    text = (text or "").replace("\x00", "").strip()
    if not text and not has_image:
        raise AssistantError("message_empty", "the message is empty")
    if len(text) > MAX_MESSAGE_CHARS:
        raise AssistantError("message_too_long", f"the message is over {MAX_MESSAGE_CHARS} characters")
    return text


def begin(
    sessions: sessionmaker[Session],
    scope: ScopeContext,
    conversation_id: Any,
    text: str | None,
    image: bytes | None = None,
) -> Run:
    """Store the user's message (next ``idx`` under the conversation's row lock) and start a run.

    Raises ``AssistantError``: ``not_found``, ``message_empty``, ``message_too_long`` (422)."""
    owner = runs.new_owner()
    with sessions.begin() as session:
        conversation = conversations.get(session, scope, conversation_id, lock=True)
        text = _checked_text(text, image is not None)  # after the lookup: another scope's id is 404 first
        payload: dict[str, Any] = {"role": "user", "content": text}
        if image is not None:
            payload["attachments"] = [
                {"type": "image", "sha256": hashlib.sha256(image).hexdigest(), "size_bytes": len(image)}
            ]
        message = conversations.append_message(session, conversation, payload)
        version = conversations.take_auto_title(conversation) if text else None  # an image alone: later
        runs.start(conversation, owner)
        session.flush()
        if version is not None and text:
            # Retrieval-only: the title is the first message itself (a chat model titles it later).
            conversation.name = " ".join(text.split())[: conversations.AUTO_TITLE_CHARS]
        view = message_view(message)
        cid = conversation.conversation_id
    return Run(scope, cid, owner, text, image, view)


def _chunks(text: str) -> list[str]:
    """The reply in small pieces to stream (words; CJK a few characters at a time)."""
    return [
        p
        for p in re.findall(r"\S+\s*|\s+", text)
        for p in ([p] if len(p) <= 4 else [p[i : i + 4] for i in range(0, len(p), 4)])
    ]


def stream(sessions: sessionmaker[Session], run: Run) -> Iterator[Event]:
    """The run's events; always ends the run (also when the consumer stops early)."""
    yield "message", run.user_message
    sent_text, shown = "", []
    reply: retrieval.Reply | None = None
    error: tuple[str, str] | None = None
    finished = False
    delay = get_settings().assistant_stream_delay_ms / 1000
    try:
        try:
            reply = retrieval.answer(sessions, run.scope, run.conversation_id, run.text, run.image)
        except BackendUnavailable as exc:
            error = ("backend_unavailable", str(exc))
        except (DomainError, ImageError) as exc:
            error = (exc.code, exc.message)
        if error is not None:
            yield "error", {"code": error[0], "message": error[1]}
        else:
            assert reply is not None
            for piece in _chunks(reply.text):
                if _stopped(sessions, run):
                    break
                sent_text += piece
                yield "delta", {"text": piece}
                if delay:
                    time.sleep(delay)
            for hit in reply.memes:
                if _stopped(sessions, run):
                    break
                shown.append(hit)
                yield "meme", card(hit)
                if delay:
                    time.sleep(delay)
        message, status = finish(sessions, run, sent_text, shown, reply, error)
        finished = True
        yield "done", {"message": message, "run_status": status}
    finally:
        if not finished:
            finish(sessions, run, sent_text, shown, reply, error)


def _stopped(sessions: sessionmaker[Session], run: Run) -> bool:
    with sessions.begin() as session:
        return runs.status(session, run.conversation_id, run.owner) == "cancelling"


def finish(
    sessions: sessionmaker[Session],
    run: Run,
    text: str,
    shown: list[SearchHit],
    reply: retrieval.Reply | None,
    error: tuple[str, str] | None,
) -> tuple[dict[str, Any] | None, str]:
    """Write the assistant's message (what was sent; a stopped reply keeps what it showed) with an
    artifact per shown meme, and end the run. ``(message view or None, run status)``."""
    with sessions.begin() as session:
        conversation = conversations.get(session, run.scope, run.conversation_id, lock=True, include_deleted=True)
        view = None
        if error is None and reply is not None:
            refs = _artifact_refs(session, conversation, shown)
            payload: dict[str, Any] = {"role": "assistant", "content": text}
            if reply.state is not None:
                state = dict(reply.state)
                # A stop before every card was shown: the next "another" starts after the last one shown.
                if len(shown) < len(reply.memes):
                    state["offset"] = state["offset"] - (len(reply.memes) - len(shown))
                payload["mewdex"] = state
            message = conversations.append_message(session, conversation, payload, artifact_refs=refs)
            session.flush()
            view = message_view(message)
        status = runs.finish(conversation, run.owner, error=error[0] if error else None)
        return view, status


def _artifact_refs(session: Session, conversation: Conversation, shown: list[SearchHit]) -> list[dict[str, Any]]:
    refs = []
    for hit in shown:
        artifact = Artifact(
            scope_id=conversation.scope_id,
            user_id=conversation.user_id,
            origin_conversation_id=conversation.conversation_id,
            kind="meme_pick",
            meme_id=UUID(hit.id),
            label=hit.display_name,
            content_sha256=hit.sha256,
        )
        session.add(artifact)
        session.flush()
        refs.append(
            {
                "artifact_id": str(artifact.artifact_id),
                "meme_id": hit.id,
                "display_name": hit.display_name,
                "sha256": hit.sha256,
            }
        )
    return refs


def post(
    sessions: sessionmaker[Session],
    scope: ScopeContext,
    conversation_id: Any,
    text: str | None,
    image: bytes | None = None,
) -> dict[str, Any]:
    """Answer without streaming: ``{"user_message", "reply", "run_status", "error"}``."""
    run = begin(sessions, scope, conversation_id, text, image)
    result: dict[str, Any] = {"user_message": run.user_message, "reply": None, "run_status": "idle", "error": None}
    for name, data in stream(sessions, run):
        if name == "done":
            result["reply"], result["run_status"] = data["message"], data["run_status"]
        elif name == "error":
            result["error"] = data
    return result
