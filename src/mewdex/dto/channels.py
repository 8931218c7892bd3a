"""Channel shapes (issue 17): bindings, the Telegram link, the webhook channel, the delivery log.
No shape carries a secret except :class:`WebhookCreated` (the one answer that shows it)."""

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
    name: str
    configured: bool = Field(description="The admin has set the channel up (e.g. a Telegram bot token)")
    mode: str | None = Field(None, description="Telegram: webhook (public URL) or polling")
    token_source: str | None = Field(
        None, description="Telegram: where the bot token comes from (environment | settings), None when unset"
    )
    token_hint: str | None = Field(None, description="Telegram: the token's last characters (never the token)")
    bind_code: bool = Field(
        False, description="Binds by a one-time code sent from the chat app (POST /api/v1/channels/{name}/code)"
    )


class BindCode(Dto):
    code: str = Field(description="Send it to the bot in the chat app; it works once")
    expires_in: int = Field(description="Seconds the code stays valid")


class TelegramTokenSet(Dto):
    token: str | None = Field(
        None, max_length=200, description="A bot token from @BotFather; empty or null removes the saved one"
    )


class TelegramTokenStatus(Dto):
    configured: bool
    source: str | None = Field(None, description="environment (MEWDEX_TELEGRAM_BOT_TOKEN wins) | settings | None")
    hint: str = Field(description="The token's last characters (never the token)")


class ChannelList(Dto):
    bindings: list[ChannelBinding]
    channels: list[ChannelInfo]


class TelegramLink(Dto):
    url: str = Field(description="https://t.me/<bot username>?start=<code>")
    code: str = Field(description="One-time bind code (valid 15 minutes)")


class WebhookCreate(Dto):
    url: str = Field(max_length=2000)


class WebhookCreated(Dto):
    binding: ChannelBinding
    secret: str = Field(description="The whsec_ signing secret; shown this once")


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
