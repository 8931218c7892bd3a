"""Assistant shapes: conversations, messages, meme cards, the answer to a posted message."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mewdex.dto.common import Dto, Timestamp

RunStatus = Literal["idle", "running", "cancelling", "error", "cancelled"]


class ConversationCreate(BaseModel):
    """``POST /api/v1/conversations``: an optional ``name`` (without one, the first message titles it)."""

    model_config = ConfigDict(extra="ignore")
    name: str | None = Field(None, max_length=200)


class ConversationPatch(BaseModel):
    """``PATCH /api/v1/conversations/{id}``: a new ``name`` (a manual title)."""

    model_config = ConfigDict(extra="ignore")
    name: str = Field(max_length=200)


class MessageCreate(BaseModel):
    """``POST …/messages`` as JSON: ``content`` 1–2000 characters."""

    model_config = ConfigDict(extra="ignore")
    content: str = Field(max_length=2000)


class Conversation(Dto):
    id: str
    name: str
    title_source: Literal["auto", "manual", "fixed"]
    auto_title_pending: bool
    channel: str
    run_status: RunStatus
    run_error: str | None
    next_message_idx: int
    tokens_prompt: int
    tokens_completion: int
    cost_cny: float
    created_at: Timestamp
    updated_at: Timestamp
    deleted_at: Timestamp | None


class ConversationList(Dto):
    items: list[Conversation]


class MemeCard(Dto):
    """A meme shown in a reply: identity, name, the original's / thumbnail's / page's URLs."""

    meme_id: str
    display_name: str
    sha256: str
    media_url: str
    thumbnail_url: str
    page_url: str
    artifact_id: str | None = None


class Message(Dto):
    message_id: str
    idx: int
    role: str
    content: str
    kind: str | None
    attachments: list[dict[str, Any]]
    memes: list[MemeCard]
    artifact_refs: list[dict[str, Any]] | None
    tokens_in: int | None
    tokens_out: int | None
    cost_cny: float | None = None  # what the chat model's calls for this reply cost (None: no model)
    model_profile: str | None
    created_at: Timestamp


class MessagePage(Dto):
    """Messages in ``idx`` order; pass ``next_cursor`` back as ``cursor`` for older ones (null at the start)."""

    items: list[Message]
    next_cursor: str | None


class ReplyError(Dto):
    code: str
    message: str


class PostedMessage(Dto):
    """The non-streaming answer to ``POST …/messages``: the stored user message, the reply (None when the
    run failed: see ``error``) and the run's final status."""

    user_message: Message
    reply: Message | None
    run_status: RunStatus
    error: ReplyError | None
