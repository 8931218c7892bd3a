"""The ``discord`` channel's adapter: scheduled memes and texts to the channel the owner chose
(``POST /channels/{channel_id}/messages`` with the binding's bot token and the meme attached), and
the answers to the commands in the reply mode ``interaction`` (the deferred response edited with
the interaction's token, or its follow-up: :func:`.interactions.answer`, :func:`.interactions.send_answer`)."""

from __future__ import annotations

from typing import Any, ClassVar

from mewdex.channels.base import Adapter, Binding, DeliveryFailed, MemeFile, Reply, ReplyMode, Sent
from mewdex.channels.discord import api, interactions
from mewdex.channels.errors import ChannelError
from mewdex.channels.platform import PlatformError, fetch_image
from mewdex.channels.registry import register_adapter
from mewdex.config import get_settings


class DiscordAdapter(Adapter):
    name: ClassVar[str] = interactions.NAME
    secret_fields: ClassVar[tuple[str, ...]] = ("bot_token",)
    #: the framework issues the one-time code (POST /api/v1/channels/discord/code); ``/link`` redeems it
    binds_by_code: ClassVar[bool] = True

    def target_of(self, binding: Binding) -> str:
        channel_id = binding.config.get("channel_id")
        if not channel_id:
            raise ChannelError(
                "channel_config_invalid", "choose the Discord channel for scheduled memes on the Channels page"
            )
        return str(channel_id)

    def bind_help(self, lang: str) -> str:
        return interactions.say(lang, "help")

    def answer(self, mode: ReplyMode, found: list[MemeFile] | None) -> Reply:
        return interactions.answer(mode, found)

    def send(self, binding: Binding | None, target: str, reply: Reply) -> Sent:
        """A reply mode ``interaction``'s answer (no bot token needed: the interaction's own), else the default."""
        if reply.mode is None or reply.mode.kind != "interaction":
            return super().send(binding, target, reply)
        try:
            answered = interactions.send_answer(reply)
        except PlatformError as exc:
            raise api.failure(exc) from None
        return Sent(str(answered.get("id") or "") or None)

    def fetch_image(self, ref: str) -> bytes:
        """An attachment's bytes (its CDN URL; "Save to mewdex"), images and clips."""
        return fetch_image(ref, max_bytes=get_settings().max_upload_bytes, content_types=("image/", "video/"))

    def _token(self, binding: Binding | None) -> str:
        token = (binding.config if binding is not None else {}).get("bot_token")
        if not token:
            raise DeliveryFailed("channel_config_invalid", "this Discord binding has no bot token")
        return str(token)

    def send_text(self, binding: Binding | None, target: str, text: str) -> Sent:
        payload = {"content": text[: api.MAX_CONTENT], "allowed_mentions": {}}
        try:
            return Sent(api.post_message(self._token(binding), target, payload) or None)
        except PlatformError as exc:
            raise api.failure(exc) from None

    def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent:
        payload: dict[str, Any] = {"allowed_mentions": {}}
        if caption:
            payload["content"] = caption[: api.MAX_CONTENT]
        try:
            return Sent(api.post_message(self._token(binding), target, payload, meme) or None)
        except PlatformError as exc:
            raise api.failure(exc) from None


register_adapter(DiscordAdapter())
