"""The ``clawbot`` adapter (the framework's contract, :mod:`mewdex.channels.base`): sends within
WeChat's window (:func:`.api.window_state`), places reserved before sending."""

from __future__ import annotations

from typing import Any, ClassVar

from mewdex.channels import bindings
from mewdex.channels.base import Adapter, Binding, DeliveryFailed, Inbound, MemeFile, Sent
from mewdex.channels.clawbot import NAME
from mewdex.channels.clawbot.api import (
    WINDOW_SECONDS,
    WINDOW_SENDS,
    download_image,
    send_message,
    text_item,
    upload_image,
    window_state,
)
from mewdex.channels.clawbot.settings import settings
from mewdex.channels.clawbot.setup import cdn_url
from mewdex.channels.errors import ChannelError
from mewdex.channels.platform import PlatformError, failure, picture_bytes
from mewdex.channels.registry import register_adapter
from mewdex.db.engine import get_sessionmaker
from mewdex.dto.i18n import translate
from mewdex.platform import owners

#: iLink's codes as a delivery's (``channel_window_closed`` stays as it is)
CODES = {"clawbot_session_expired": "clawbot_session_expired"}


def window_text(state: str, lang: str = "en") -> str:
    """Why a send does not fit the window (:func:`.api.window_state`'s ``state``) in ``lang`` (``en``/``zh``;
    the delivery's failure, in the language its account set, else English)."""
    return translate(lang, f"bot.clawbot.window.{state}", hours=WINDOW_SECONDS // 3600, sends=WINDOW_SENDS)


class ClawBotAdapter(Adapter):
    """The ``clawbot`` channel (module doc): one bot per person, bound by scanning a QR code."""

    name: ClassVar[str] = NAME
    secret_fields: ClassVar[tuple[str, ...]] = ("bot_token", "latest_context_token")
    polls: ClassVar[bool] = True

    def poll_seconds(self) -> float:
        return float(settings().clawbot_poll_seconds)

    def poll(self, sessions: Any, seconds: float) -> dict[str, Any]:
        """Long-poll every active binding at once (:func:`.inbound.poll_once`). ``{"messages"}``."""
        from mewdex.channels.clawbot.inbound import poll_once

        return {"messages": poll_once(sessions, seconds)}

    def target_of(self, binding: Binding) -> str:
        return str(binding.config.get("user_im_id") or binding.identity or "")

    def binding_config(self, inbound: Inbound) -> dict[str, Any]:
        raise ChannelError(
            "channel_config_invalid", "WeChat ClawBot binds by scanning the QR code on the Channels page"
        )

    def fetch_image(self, ref: str) -> bytes:
        return download_image(ref, cdn_url())

    def _use_window(self, binding: Binding, sends: int) -> dict[str, Any]:
        """Reserve ``sends`` messages of the window (row-locked, counted before sending: a send
        that fails still used its place); raises ``channel_window_closed`` when they do not fit."""
        with get_sessionmaker().begin() as session:
            row = bindings.get(session, binding.scope_id, NAME, lock=True)
            if row is None or row.status != "active":
                raise DeliveryFailed("channel_binding_revoked", "the WeChat binding was revoked")
            config = bindings.open_config(row.scope_id, NAME, row.config or {})
            used = int(config.get("sends_since_ctx") or 0)
            state = window_state(config.get("context_token_at"), used + sends - 1)
            if state != "open":
                owner = owners.user_for_scope(session, row.scope_id)  # its words in the account's language
                text = window_text(state, (owner.language if owner is not None else None) or "en")
                raise DeliveryFailed("channel_window_closed", text, platform_code=state)
            bindings.update_config(session, row, {"sends_since_ctx": used + sends})
            return config

    def _send_items(self, binding: Binding | None, target: str, items: list) -> Sent:
        if binding is None:
            raise DeliveryFailed("channel_not_bound", "WeChat ClawBot sends only to a bound person")
        config = self._use_window(binding, len(items))
        client_id = None
        try:
            for make in items:
                sent = send_message(
                    config["base_url"],
                    config["bot_token"],
                    target,
                    config.get("latest_context_token") or "",
                    make(config),
                )
                client_id = client_id or sent
        except PlatformError as exc:
            raise failure(exc, CODES) from None
        return Sent(client_id)

    def send_text(self, binding: Binding | None, target: str, text: str) -> Sent:
        return self._send_items(binding, target, [lambda _c: text_item(text)])

    def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent:
        def image(config: dict[str, Any]) -> dict[str, Any]:
            return upload_image(config["base_url"], config["bot_token"], target, picture_bytes(meme), cdn_url())

        items = [image] + ([lambda _c: text_item(caption)] if caption else [])
        return self._send_items(binding, target, items)


register_adapter(ClawBotAdapter())
