"""The Telegram adapter (the framework's contract, :mod:`mewdex.channels.base`): texts with
``sendMessage``, memes with :func:`.api.send_file`, inbound photos through ``getFile``, and the
reply mode ``inline``: an inline query's answer (:func:`.inbound.answer`, :func:`.inbound.send_inline`)."""

from __future__ import annotations

from typing import Any, ClassVar

from mewdex.channels.base import Adapter, Binding, Inbound, MemeFile, Reply, ReplyMode, Sent
from mewdex.channels.platform import fetch_image
from mewdex.channels.registry import register_adapter
from mewdex.channels.telegram import NAME, setup
from mewdex.channels.telegram.api import bot_id, call, configured_token, send_file, token
from mewdex.channels.telegram.settings import settings
from mewdex.config import get_settings


class TelegramAdapter(Adapter):
    name: ClassVar[str] = NAME
    polls: ClassVar[bool] = True
    buttons: ClassVar[bool] = True

    def poll_seconds(self) -> float:
        return float(settings().telegram_poll_seconds)

    def poll(self, sessions: Any, seconds: float) -> dict[str, Any]:
        from mewdex.channels.telegram.inbound import run_poll

        return run_poll(sessions, seconds)

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

    def fetch_image(self, ref: str) -> bytes:
        info = call("getFile", {"file_id": ref})
        path = str(info.get("file_path") or "")
        url = f"{settings().telegram_api_url.rstrip('/')}/file/bot{token()}/{path}"
        return fetch_image(url, max_bytes=get_settings().max_upload_bytes, content_types=None)

    def acknowledge(self, inbound: Inbound) -> None:
        """A pressed button (the Save button) stops spinning in the person's app: ``answerCallbackQuery``."""
        if inbound.extra.get("callback_query_id"):
            call("answerCallbackQuery", {"callback_query_id": inbound.extra["callback_query_id"]})

    def answer(self, mode: ReplyMode, found: list[MemeFile] | None) -> Reply:
        from mewdex.channels.telegram.inbound import answer

        return answer(mode, found)

    def send(self, binding: Binding | None, target: str, reply: Reply) -> Sent:
        """A :class:`Reply` with its buttons as an inline keyboard (one row; ``callback_data`` = the
        action); an inline query's answer (reply mode ``inline``)."""
        if reply.mode is not None and reply.mode.kind == "inline":
            from mewdex.channels.telegram.inbound import send_inline

            send_inline(binding, reply)
            return Sent(None)
        if not reply.buttons:
            return super().send(binding, target, reply)
        keyboard = {"inline_keyboard": [[{"text": b.label, "callback_data": b.action[:64]} for b in reply.buttons]]}
        if reply.meme is None:
            result = call(
                "sendMessage", {"chat_id": target, "text": (reply.text or "")[:4096], "reply_markup": keyboard}
            )
            return Sent(str(result.get("message_id")))
        params: dict[str, Any] = {"chat_id": target, "reply_markup": keyboard}
        if reply.text:
            params["caption"] = reply.text[:1024]
        return Sent(str(send_file(target, reply.meme, params).get("message_id")))

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
