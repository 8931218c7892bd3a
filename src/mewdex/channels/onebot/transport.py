"""OneBot's transports: the action side of a reverse-WebSocket connection (:class:`ActionChannel`),
this process's open connections (:data:`registry`) and the implementation's HTTP API (:func:`call_http`).

The socket itself is served by the channel's route (:mod:`.routes`); a send from a worker reaches it
through :mod:`.relay`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from mewdex.channels.onebot.protocol import ACTION_TIMEOUT, check_answer
from mewdex.channels.platform import PlatformError, call_json


class ActionChannel:
    """The action side of one reverse-WebSocket connection: :meth:`call` sends an action frame through
    ``send`` and waits for the frame with its ``echo`` (given to :meth:`resolve` by the reader)."""

    _echo = itertools.count(1)

    def __init__(
        self,
        self_id: str,
        send: Callable[[str], Awaitable[None]],
        scope_id: str | None = None,
        close: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ):
        self.self_id = self_id
        self.scope_id = scope_id  # the binding the connection's token authenticated
        self._send = send
        self._close = close
        self._pending: dict[str, asyncio.Future] = {}
        self.loop = asyncio.get_running_loop()

    async def call(self, action: str, params: dict[str, Any], timeout: float = ACTION_TIMEOUT) -> dict[str, Any]:
        echo = f"mewdex-{next(self._echo)}"
        future: asyncio.Future = self.loop.create_future()
        self._pending[echo] = future
        try:
            await self._send(json.dumps({"action": action, "params": params, "echo": echo}, ensure_ascii=False))
            answer = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise PlatformError(
                "onebot_timeout", f"OneBot did not answer {action} in {timeout:.0f} s", retryable=True
            ) from None
        finally:
            self._pending.pop(echo, None)
        return check_answer(answer, action)

    def resolve(self, frame: dict[str, Any]) -> bool:
        """True when ``frame`` answered an action of this channel (the reader then drops it)."""
        echo = frame.get("echo")
        if echo is None or "post_type" in frame:
            return False
        future = self._pending.get(str(echo))
        if future is not None and not future.done():
            future.set_result(frame)
        return True

    def hang_up(self) -> None:
        """Close the socket from any thread (the account was disabled, the binding revoked)."""
        if self._close is not None:
            asyncio.run_coroutine_threadsafe(self._close(), self.loop)

    def close(self) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(
                    PlatformError("onebot_not_connected", "the OneBot connection closed", retryable=True)
                )

    def call_sync(self, action: str, params: dict[str, Any], timeout: float = ACTION_TIMEOUT) -> dict[str, Any]:
        """:meth:`call` from a thread other than the connection's event loop (a worker thread)."""
        future = asyncio.run_coroutine_threadsafe(self.call(action, params, timeout), self.loop)
        try:
            return future.result(timeout + 5)
        except TimeoutError:
            future.cancel()
            raise PlatformError("onebot_timeout", f"OneBot did not answer {action}", retryable=True) from None


class ConnectionRegistry:
    """This process's open reverse-WebSocket connections, by the bot's QQ number (a new connection
    of the same bot replaces the old one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, ActionChannel] = {}

    def add(self, channel: ActionChannel) -> None:
        with self._lock:
            self._by_key[channel.self_id] = channel

    def remove(self, channel: ActionChannel) -> None:
        with self._lock:
            if self._by_key.get(channel.self_id) is channel:
                del self._by_key[channel.self_id]
        channel.close()

    def get(self, self_id: str) -> ActionChannel | None:
        with self._lock:
            return self._by_key.get(self_id)

    def count(self) -> int:
        with self._lock:
            return len(self._by_key)

    def of_scope(self, scope_id: str) -> list[ActionChannel]:
        """This process's connections authenticated as ``scope_id``'s binding."""
        with self._lock:
            return [c for c in self._by_key.values() if c.scope_id == scope_id]


registry = ConnectionRegistry()


def call_http(api_url: str, access_token: str, action: str, params: dict[str, Any]) -> dict[str, Any]:
    """One action through the implementation's HTTP API (``POST <api_url>/<action>``, Bearer token,
    :func:`mewdex.channels.platform.call_json`). Raises :class:`PlatformError`."""
    headers = {"content-type": "application/json"}
    if access_token:
        headers["authorization"] = f"Bearer {access_token}"
    answer = call_json(
        "POST", f"{api_url.rstrip('/')}/{action}", platform="OneBot", what=action, error_code="onebot_action_failed",
        headers=headers, json=params, timeout=30.0, errors_in_body=True,
        refused={401: "onebot_action_failed", 403: "onebot_action_failed"},  # the access token was refused
    )  # fmt: skip
    return check_answer(answer.data, action)
