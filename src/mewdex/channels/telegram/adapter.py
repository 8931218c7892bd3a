"""The Telegram adapter (the framework's contract, :mod:`mewdex.channels.base`): texts with
``sendMessage``, memes with :func:`.api.send_file`, inbound photos through ``getFile``."""

from __future__ import annotations

from typing import Any, ClassVar

from mewdex.channels.base import Binding, Inbound, MemeFile, Sent
from mewdex.channels.platform import fetch_image
from mewdex.channels.registry import register_adapter
from mewdex.channels.telegram import NAME, setup
from mewdex.channels.telegram.api import bot_id, call, configured_token, send_file, token
from mewdex.config import get_settings
from mewdex.dto.i18n import translate


class TelegramAdapter:
    name: ClassVar[str] = NAME
    secret_fields: ClassVar[tuple[str, ...]] = ()
    min_send_interval: ClassVar[float] = 1.0
    command_prefixes: ClassVar[tuple[str, ...]] = ("/",)
    outbound_only: ClassVar[bool] = False

    def configured(self) -> bool:
        return configured_token()[0] is not None

    def status(self) -> dict[str, Any]:
        """The Channels page's entry: ``configured``, ``mode`` (``webhook`` with a public URL, else
        ``polling``), ``token_source`` and ``token_hint`` (never the token)."""
        found = setup.token_status()
        return {
            "configured": found["configured"],
            "mode": "webhook" if get_settings().public_url else "polling",
            "token_source": found["source"],
            "token_hint": found["hint"],
        }

    def target_of(self, binding: Binding) -> str:
        return str(binding.config.get("chat_id") or binding.identity)

    def binding_config(self, message: Inbound) -> dict[str, Any]:
        return {"chat_id": message.sender, "bot_id": bot_id()}

    def bind_help(self, lang: str) -> str:
        return translate(lang, "bot.bind_help.telegram")

    def fetch_image(self, ref: str) -> bytes:
        info = call("getFile", {"file_id": ref})
        path = str(info.get("file_path") or "")
        url = f"{get_settings().telegram_api_url.rstrip('/')}/file/bot{token()}/{path}"
        return fetch_image(url, max_bytes=get_settings().max_upload_bytes, content_types=None)

    def send_text(self, binding: Binding | None, target: str, text: str) -> Sent:
        result = call("sendMessage", {"chat_id": target, "text": text[:4096]})
        return Sent(str(result.get("message_id")))

    def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent:
        params: dict[str, Any] = {"chat_id": target}
        if caption:
            params["caption"] = caption[:1024]
        result = send_file(target, meme, params)
        return Sent(str(result.get("message_id")))


ADAPTER = register_adapter(TelegramAdapter())
