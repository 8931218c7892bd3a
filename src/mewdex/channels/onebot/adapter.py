"""The ``onebot`` adapter (the framework's contract, :mod:`mewdex.channels.base`): a send goes
through the bot's HTTP API (http mode) or the relay to its reverse WebSocket (ws mode).

A binding's identity is its bot's QQ number; everyone who writes to that bot is answered from the
binding owner's library. Targets are ``private:<qq>`` and ``group:<group id>``.
"""

from __future__ import annotations

from typing import ClassVar

from sqlalchemy.orm import Session

from mewdex.channels.base import Adapter, Binding, DeliveryFailed, MemeFile, Sent
from mewdex.channels.errors import ChannelError
from mewdex.channels.onebot import NAME
from mewdex.channels.onebot.protocol import message_segments, parse_target, send_action
from mewdex.channels.onebot.relay import hang_up, relay_send
from mewdex.channels.onebot.transport import call_http
from mewdex.channels.platform import PlatformError, failure, fetch_image, picture_bytes
from mewdex.channels.registry import register_adapter

#: OneBot's codes as a delivery's
CODES = {"onebot_not_connected": "onebot_not_connected", "onebot_timeout": "channel_unreachable"}


class OneBotAdapter(Adapter):
    """The ``onebot`` channel (module doc; binding model in the comment above the relay)."""

    name: ClassVar[str] = NAME
    secret_fields: ClassVar[tuple[str, ...]] = ("access_token",)
    command_prefixes: ClassVar[tuple[str, ...]] = ("/", "#")

    def target_of(self, binding: Binding) -> str:
        owner = binding.config.get("owner_qq")
        if not owner:
            raise ChannelError(
                "channel_config_invalid", "this QQ binding has no owner QQ number to send to (set owner_qq)"
            )
        return f"private:{owner}"

    def fetch_image(self, ref: str) -> bytes:
        return fetch_image(ref)

    def owner_gone(self, session: Session, scope_id: str) -> None:
        """The owner was disabled or deleted: close their sockets (:func:`.relay.hang_up`)."""
        hang_up(session, scope_id)

    def _send(self, binding: Binding | None, target: str, meme: MemeFile | None, text: str | None) -> Sent:
        http = binding is not None and binding.config.get("mode") == "http"
        if binding is None or not binding.identity or not (http or binding.config.get("connected")):
            raise DeliveryFailed(
                "onebot_not_connected", "no QQ bot has connected and proven its number for this binding", retry_after=30
            )
        try:
            kind, number = parse_target(target)
        except PlatformError as exc:
            raise failure(exc) from None
        try:
            if http:
                picture = picture_bytes(meme) if meme else None
                action, params = send_action(kind, number, message_segments(kind, picture, text))
                data = call_http(binding.config["api_url"], binding.config["access_token"], action, params)
            else:
                request = {"scope_id": binding.scope_id, "target": target, "text": text,
                           "meme_id": meme.meme_id if meme else None,
                           "remake": meme.remake if meme else None}  # fmt: skip
                data = relay_send(binding.identity, request)
        except PlatformError as exc:
            failed = failure(exc, CODES)
            if failed.code == "onebot_not_connected":  # the bot may reconnect: try again in a while
                failed.retry_after, failed.retryable = 30.0, True
            raise failed from None
        message_id = data.get("message_id")
        return Sent(str(message_id) if message_id is not None else None)

    def send_text(self, binding: Binding | None, target: str, text: str) -> Sent:
        return self._send(binding, target, None, text)

    def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent:
        return self._send(binding, target, meme, caption)


register_adapter(OneBotAdapter())
