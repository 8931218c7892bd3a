"""The OneBot relay: a worker's send reaches the process that holds the bot's reverse WebSocket.

Sends run in ``channel_delivery`` tasks, usually in a ``mewdex worker`` process, while the reverse
WebSocket lives in the web process that accepted it. The relay between them is PostgreSQL
LISTEN/NOTIFY: the worker notifies :data:`RELAY_OUT` with a small request (which meme or text, to
which target, through which bot: :func:`relay_send`); the process holding that bot's connection
(:class:`RelayListener`) loads the meme, calls the action and notifies :data:`RELAY_DONE` with the
outcome. No process answering within :data:`RELAY_TIMEOUT` is ``onebot_not_connected`` (retried).
:func:`hang_up` closes a scope's sockets wherever they are held.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets as _random
import threading
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from mewdex.channels.media import meme_file, remade
from mewdex.channels.onebot.protocol import ACTION_TIMEOUT, message_segments, parse_target, send_action
from mewdex.channels.onebot.transport import ActionChannel, registry
from mewdex.channels.platform import PlatformError, picture_bytes
from mewdex.db.engine import get_sessionmaker
from mewdex.dto.errors import DomainError

RELAY_OUT = "mewdex_onebot_out"
RELAY_DONE = "mewdex_onebot_done"
RELAY_TIMEOUT = ACTION_TIMEOUT + 15.0  # the holder's own action timeout, plus loading the meme
NOTIFY_MAX_BYTES = 7900
log = logging.getLogger(__name__)


def _notify(connection, channel: str, payload: dict[str, Any]) -> None:
    raw = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    connection.execute("SELECT pg_notify(%s, %s)", (channel, raw))


def _listen_connection():
    """A dedicated autocommit psycopg connection (LISTEN needs one outside the pool's transactions)."""
    import psycopg

    from mewdex.config import get_settings
    from mewdex.db.engine import database_url

    url = database_url(get_settings()).replace("postgresql+psycopg://", "postgresql://", 1)
    return psycopg.connect(url, autocommit=True, application_name="mewdex-onebot-relay")


def relay_send(self_id: str, request: dict[str, Any], timeout: float = RELAY_TIMEOUT) -> dict[str, Any]:
    """Ask the process holding ``self_id``'s connection to send ``request``; its ``data`` answer.
    Raises :class:`~mewdex.channels.platform.PlatformError`."""
    request = {**request, "req": _random.token_hex(12), "self_id": self_id}
    text = request.get("text") or ""
    while len(json.dumps(request, ensure_ascii=False).encode()) > NOTIFY_MAX_BYTES and text:
        text = text[: len(text) * 3 // 4]
        request["text"] = text + "…"
    with _listen_connection() as connection:
        connection.execute(f"LISTEN {RELAY_DONE}")
        _notify(connection, RELAY_OUT, request)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            for note in connection.notifies(timeout=left, stop_after=1):
                answer = json.loads(note.payload)
                if answer.get("req") != request["req"]:
                    continue
                if answer.get("ok"):
                    return answer.get("data") or {}
                raise PlatformError(
                    answer.get("code") or "onebot_action_failed", answer.get("message") or "OneBot failed",
                    answer.get("retcode"), answer.get("wording") or "", retryable=bool(answer.get("retryable")),
                )  # fmt: skip
    raise PlatformError("onebot_not_connected", f"the QQ bot {self_id} is not connected to mewdex", retryable=True)


def _load_meme_bytes(scope_id: str, meme_id: str | None, remake: dict[str, Any] | None = None) -> bytes:
    if remake is not None:  # an unsaved re-captioned image: made again here from its recipe
        try:
            return picture_bytes(remade(scope_id, remake))
        except DomainError as exc:
            raise PlatformError(
                "onebot_action_failed", f"the re-captioned image could not be made ({exc.code})"
            ) from None
    with get_sessionmaker().begin() as session:
        found = meme_file(session, scope_id, meme_id)
    if found is None:
        raise PlatformError("onebot_action_failed", "the meme was deleted before it was sent")
    return picture_bytes(found)


async def _serve_request(channel: ActionChannel, request: dict[str, Any]) -> dict[str, Any]:
    try:
        data = None
        if request.get("meme_id") or request.get("remake"):
            data = await asyncio.to_thread(
                _load_meme_bytes, request["scope_id"], request.get("meme_id"), request.get("remake")
            )
        kind, number = parse_target(request["target"])
        action, params = send_action(kind, number, message_segments(kind, data, request.get("text")))
        answer = await channel.call(action, params)
        return {"req": request["req"], "ok": True, "data": {"message_id": answer.get("message_id")}}
    except PlatformError as exc:
        return {"req": request["req"], "ok": False, "code": exc.code, "message": exc.message,
                "retcode": exc.platform_code, "wording": exc.platform_error, "retryable": exc.retryable}  # fmt: skip


class RelayListener:
    """The web process's side of the relay: one thread LISTENing on :data:`RELAY_OUT`, serving the
    requests for bots connected to this process. Started with the first connection."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def ensure_started(self) -> None:
        """Start the listener unless it runs (call after :meth:`ConnectionRegistry.add`)."""
        with self._lock:
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="onebot-relay", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        """Listen while this process holds a connection (the thread ends with the last one)."""
        while True:
            with self._lock:
                if self._stop.is_set() or not registry.count():
                    self._thread = None
                    return
            try:
                with _listen_connection() as connection:
                    connection.execute(f"LISTEN {RELAY_OUT}")
                    while not self._stop.is_set() and registry.count():
                        for note in connection.notifies(timeout=1.0):
                            self._dispatch(note.payload)
            except Exception:  # noqa: BLE001 - the listener must outlive a dropped database connection
                log.warning("onebot relay: listener connection lost; reconnecting", exc_info=True)
                self._stop.wait(1.0)

    def _dispatch(self, payload: str) -> None:
        try:
            request = json.loads(payload)
        except ValueError:
            return
        if request.get("hang_up"):  # an account was disabled, a binding revoked: close its sockets here
            for held in registry.of_scope(str(request["hang_up"])):
                held.hang_up()
            return
        channel = registry.get(str(request.get("self_id", "")))
        if channel is None or channel.scope_id != request.get("scope_id"):
            return  # another process holds this bot's connection (or none does)
        future = asyncio.run_coroutine_threadsafe(_serve_request(channel, request), channel.loop)

        def done(f) -> None:
            try:
                answer = f.result()
            except Exception as exc:  # noqa: BLE001
                answer = {"req": request.get("req"), "ok": False, "code": "onebot_action_failed", "message": str(exc)}
            try:
                with _listen_connection() as reply:
                    _notify(reply, RELAY_DONE, answer)
            except Exception:  # noqa: BLE001
                log.warning("onebot relay: could not answer a send request", exc_info=True)

        future.add_done_callback(done)


relay = RelayListener()


def hang_up(session: Session, scope_id: str) -> None:
    """Close ``scope_id``'s OneBot sockets in whichever process holds them, when ``session``
    commits (a NOTIFY on :data:`RELAY_OUT`; each socket also checks :func:`still_active` on every
    frame and every few seconds)."""
    from sqlalchemy import func as sql_func

    session.execute(select(sql_func.pg_notify(RELAY_OUT, json.dumps({"hang_up": scope_id}))))
