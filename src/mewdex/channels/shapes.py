"""The shapes every channel shares (issue 17), the request and response models of
:mod:`mewdex.channels.routes`: bindings, a channel's entry, a bind code, the delivery log. A channel's
own set-up shapes are its package's (``mewdex/channels/<name>/shapes.py``); no shape here carries a
secret."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from mewdex.dto.common import Dto, Timestamp


class ChannelBinding(Dto):
    channel: str
    status: str = Field(description="active | revoked")
    identity: str | None = Field(None, description="The platform identity inbound messages are matched on")
    config: dict[str, Any] = Field(description="The binding's config without its secret fields")
    conversation_id: str | None = Field(None, description="The standing conversation (config.chat_task_id)")
    created_at: Timestamp
    updated_at: Timestamp
    revoked_at: Timestamp | None = None


class SaveAll(Dto):
    save_all: bool = Field(description="Save every image the binding's owner sends in the chat, without a word")


class Pool(Dto):
    collection_id: str | None = Field(
        description="The collection the chat answers from and saves into (one of the caller's); null: the whole library"
    )


class ChannelInfo(Dto):
    """A channel's entry of ``GET /api/v1/channels``; each channel may add fields of its own (its
    package's ``CHANNEL.info``, gathered into the documented shape by
    :func:`mewdex.channels.routes.list_routes`)."""

    name: str
    configured: bool = Field(description="The admin has set the channel up (e.g. a bot token)")
    bind_code: bool = Field(
        False, description="Binds by a one-time code sent from the chat app (POST /api/v1/channels/{name}/code)"
    )


class BindCode(Dto):
    code: str = Field(description="Send it to the bot in the chat app; it works once")
    expires_in: int = Field(description="Seconds the code stays valid")


class Delivery(Dto):
    id: str
    channel: str
    target: str
    kind: str = Field(description="meme | text")
    meme_id: str | None = None
    text: str | None = None
    source: str
    conversation_id: str | None = None
    status: str = Field(description="queued | retrying | sent | failed | cancelled | unknown")
    attempts: int
    error_code: str | None = None
    platform_code: str | None = None
    platform_error: str | None = None
    retry_after_seconds: int | None = None
    platform_message_id: str | None = None
    created_at: Timestamp
    updated_at: Timestamp
    sent_at: Timestamp | None = None


class DeliveryList(Dto):
    deliveries: list[Delivery]
