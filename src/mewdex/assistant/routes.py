"""The assistant's routes (issue 16), imported by the web layer only, which mounts :data:`router`:
``/api/v1/conversations`` and their messages, then the chat page ``/chat`` (``?c=<conversation id>``
opens one; ``assistant/page.html``, whose script ``/static/chat.js`` — this package's ``static/`` —
talks to the API).

Errors: 404 ``not_found`` (missing, deleted, or another scope's), 409 ``conversation_not_deleted`` /
``run_not_active``, 422 ``message_empty`` / ``message_too_long`` / ``invalid_request``, 413/415/422
for an attached image (as search by image).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from mewdex.assistant import chat, conversations, runs
from mewdex.assistant import shapes as dto
from mewdex.assistant.conversations import Conversation
from mewdex.capability import web_kit
from mewdex.config import get_settings
from mewdex.dto.cursor import decode_cursor, encode_cursor
from mewdex.dto.errors import DomainError
from mewdex.dto.scopes import ScopeContext

#: The web layer's dependencies (lent once per process: mewdex.capability.lend).
web = web_kit()
current_scope, db_session, streaming_scope = web.current_scope, web.db_session, web.streaming_scope

api = APIRouter(prefix="/api/v1/conversations", tags=["assistant"])


def view(c: Conversation) -> dict[str, Any]:
    """A conversation as :class:`mewdex.assistant.shapes.Conversation`."""
    return {
        "id": str(c.conversation_id),
        "name": c.name,
        "title_source": c.title_source,
        "auto_title_pending": c.auto_title_pending,
        "channel": c.channel,
        "run_status": c.run_status,
        "run_error": c.run_error,
        "next_message_idx": c.next_message_idx,
        "tokens_prompt": c.tokens_prompt,
        "tokens_completion": c.tokens_completion,
        "cost_cny": float(c.cost_cny or 0),
        "created_at": c.created_at.isoformat(),
        "updated_at": c.updated_at.isoformat(),
        "deleted_at": c.deleted_at.isoformat() if c.deleted_at else None,
    }


@api.post("", response_model=dto.Conversation, status_code=201)
def create(
    body: dto.ConversationCreate, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
):
    """A new conversation (``name`` optional: the first message titles it); its user is the scope's owner."""
    c = conversations.create(session, scope, name=body.name)
    return view(c)


@api.get("", response_model=dto.ConversationList)
def list_all(
    q: str | None = Query(None, max_length=200),
    deleted: bool = False,
    limit: int = Query(50, ge=1, le=200),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """``{"items"}`` most recently updated first; ``q`` matches titles and message text; ``deleted``: the trash."""
    return {
        "items": [view(c) for c in conversations.list_conversations(session, scope, q=q, deleted=deleted, limit=limit)]
    }


@api.get("/{conversation_id}", response_model=dto.Conversation)
def read(conversation_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    return view(conversations.get(session, scope, conversation_id))


@api.patch("/{conversation_id}", response_model=dto.Conversation)
def patch(
    conversation_id: str,
    body: dto.ConversationPatch,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """Rename (a manual title; a pending auto-title is dropped)."""
    return view(conversations.rename(session, scope, conversation_id, body.name))


@api.delete("/{conversation_id}", response_model=dto.Conversation)
def remove(conversation_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    """Soft delete (restorable; messages kept)."""
    return view(conversations.soft_delete(session, scope, conversation_id))


@api.post("/{conversation_id}/restore", response_model=dto.Conversation)
def restore(conversation_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    return view(conversations.restore(session, scope, conversation_id))


@api.post("/{conversation_id}/cancel", response_model=dto.Conversation)
def cancel(conversation_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    """Stop the reply being written (``cancelling``; the stream ends it ``cancelled``); 409 ``run_not_active``."""
    return view(runs.cancel(session, scope, conversation_id))


@api.get("/{conversation_id}/messages", response_model=dto.MessagePage)
def list_messages(
    conversation_id: str,
    cursor: str | None = Query(None, max_length=2048, description="``next_cursor`` of the previous page"),
    limit: int = Query(50, ge=1, le=200),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """The newest ``limit`` messages (with ``cursor``: those before the previous page), in ``idx``
    order; ``next_cursor`` pages to older ones (null at the start; 422 ``invalid_cursor``)."""
    before = decode_cursor(cursor, (int,))[0] if cursor else None
    _c, rows = conversations.messages(session, scope, conversation_id, before_idx=before, limit=limit)
    first = rows[0].idx if rows else None
    return {"items": [chat.message_view(m) for m in rows], "next_cursor": encode_cursor([first]) if first else None}


MESSAGE_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["content"],
                    "properties": {"content": {"type": "string", "maxLength": 2000}},
                }
            },
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {"file": {"type": "string", "format": "binary"}, "content": {"type": "string"}},
                }
            },
        },
    }
}


# With ``Accept: text/event-stream``: a stream of ``event: <name>`` / ``data: <JSON>`` blocks.
SSE_EVENT = {
    "type": "object",
    "description": "one server-sent event (``event:`` and ``data:`` lines)",
    "properties": {
        "event": {"type": "string", "enum": ["message", "delta", "meme", "done", "error"]},
        "data": {
            "type": "object",
            "description": "message: a Message; delta: {text}; meme: a MemeCard; "
            "done: {message, run_status}; error: {code, message}",
        },
    },
}


def _sse(events: Iterator[tuple[str, dict[str, Any]]]) -> Iterator[str]:
    for name, data in events:
        yield f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


@api.post(
    "/{conversation_id}/messages",
    response_model=dto.PostedMessage,
    openapi_extra=MESSAGE_BODY,
    responses={200: {"content": {"text/event-stream": {"schema": SSE_EVENT}}}},
)
async def post_message(
    conversation_id: str,
    request: Request,
    scope: ScopeContext = Depends(streaming_scope),
    sessions: sessionmaker[Session] = Depends(web.sessions),
):
    """Send a message and get the reply. ``Accept: text/event-stream``: events ``message`` (the stored
    user message), ``delta`` (``{"text"}``), ``meme`` (a card), ``done`` (``{"message", "run_status"}``),
    ``error`` (``{"code", "message"}``); otherwise JSON (:class:`PostedMessage`). Body: JSON
    ``{"content"}``, or multipart with an image ``file`` (a search by image) and an optional ``content``."""
    image: bytes | None = None
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        async with web.upload_slot(scope.scope_id):
            image, _name, fields = await web.read_query_image(request, max_bytes=get_settings().max_upload_bytes)
        if not image:
            raise DomainError("image_corrupt", "the file is empty")
        content = (fields.get("content") or [""])[-1]
    else:
        try:
            content = dto.MessageCreate.model_validate(json.loads(await request.body() or b"null")).content
        except (ValueError, ValidationError):
            content = None
    if content is None:
        # Another scope's conversation answers 404 before the body's fault is told.
        await run_in_threadpool(_exists, sessions, scope, conversation_id)
        raise DomainError("invalid_request", 'the body must be {"content": "…"} (at most 2000 characters)')
    lang = web.page_language(request)
    if "text/event-stream" in request.headers.get("accept", ""):
        run = await run_in_threadpool(chat.begin, sessions, scope, conversation_id, content, image, lang)
        return StreamingResponse(
            _sse(chat.stream(sessions, run)),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
    return await run_in_threadpool(chat.post, sessions, scope, conversation_id, content, image, lang)


def _exists(sessions, scope: ScopeContext, conversation_id: str) -> None:
    with sessions.begin() as session:
        conversations.get(session, scope, conversation_id)


pages = APIRouter(include_in_schema=False)


@pages.get("/chat")
def chat_page(request: Request, c: str | None = None, scope: ScopeContext = Depends(current_scope)):
    try:
        conversation_id = str(UUID(c)) if c else None
    except ValueError:
        conversation_id = None
    return web.render(request, "assistant/page.html", {"page": "chat", "conversation_id": conversation_id})


#: What the web layer mounts: the API, then the page.
router = APIRouter()
router.include_router(api)
router.include_router(pages)
