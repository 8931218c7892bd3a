"""A fake OneBot v11 implementation (NapCat-like) for tests.

:class:`FakeNapCat` dials mewdex's reverse WebSocket (``ws://…/channels/onebot/ws``) the way NapCat's
``websocket-client.ts`` does — headers ``X-Self-ID``, ``X-Client-Role: Universal``,
``Authorization: Bearer <token>``, ``User-Agent: OneBot/11`` — sends the lifecycle ``connect`` event,
then message events on demand (:meth:`private`, :meth:`group`), and answers every action frame
``{"action", "params", "echo"}`` with ``{"status": "ok", "retcode": 0, "data": {"message_id"},
"echo"}`` (1404 for an unknown action, or what :meth:`fail_next` scripts); ``get_login_info`` with the
QQ it is logged in as (``login_id``, by default its ``self_id``; counted in ``fake.login_queries``,
not in ``fake.actions``). Actions received are in ``fake.actions`` (newest last). ``fake.closed`` is
set when mewdex closes the socket (its close code in ``fake.close_code``).

:class:`FakeOneBotHTTP` is the HTTP side of the HTTP POST mode: an HTTP API server answering
``POST /<action>`` (Bearer token checked) and :meth:`FakeOneBotHTTP.post_event` to post an event to
mewdex signed with ``X-Signature: sha1=<HMAC-SHA1>``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

KNOWN_ACTIONS = {"send_private_msg", "send_group_msg", "send_msg", "get_login_info", "get_status"}


def _answer(action: dict[str, Any], message_ids, failures: list[tuple[int, str]]) -> dict[str, Any]:
    echo = action.get("echo")
    if failures:
        retcode, wording = failures.pop(0)
        return {
            "status": "failed",
            "retcode": retcode,
            "data": None,
            "message": wording,
            "wording": wording,
            "echo": echo,
        }
    if action.get("action") not in KNOWN_ACTIONS:
        return {"status": "failed", "retcode": 1404, "data": None, "message": "不支持的Api", "echo": echo}
    return {"status": "ok", "retcode": 0, "data": {"message_id": next(message_ids)}, "echo": echo}


class FakeNapCat:
    def __init__(
        self,
        url: str,
        self_id: int,
        token: str | None,
        *,
        role: str = "Universal",
        connect_now=True,
        login_id: int | None = None,
        sock=None,
    ):
        self.url, self.self_id, self.token, self.role = url, self_id, token, role
        self.login_id = self_id if login_id is None else login_id
        self.login_queries = 0
        self.actions: list[dict[str, Any]] = []
        self.closed = threading.Event()
        self.close_code: int | None = None
        self._failures: list[tuple[int, str]] = []
        self._message_ids = itertools.count(1000)
        self._ids = itertools.count(1)
        self._ws = None
        self._thread: threading.Thread | None = None
        self._sock = sock  # a connected socket to speak over (e.g. to a proxy), the URL naming the Host
        if connect_now:
            self.connect()

    def connect(self) -> None:
        headers = {"X-Self-ID": str(self.self_id), "X-Client-Role": self.role, "User-Agent": "OneBot/11"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        self._ws = connect(self.url, sock=self._sock, additional_headers=headers, open_timeout=10).__enter__()
        # the lifecycle event goes out before anything is answered: a server that refuses the login
        # answer closes the socket, and a send after that would race the close
        self._send({"time": int(time.time()), "self_id": self.self_id, "post_type": "meta_event",
                    "meta_event_type": "lifecycle", "sub_type": "connect"})  # fmt: skip
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _send(self, frame: dict[str, Any]) -> None:
        assert self._ws is not None
        self._ws.send(json.dumps(frame, ensure_ascii=False))

    def _read(self) -> None:
        assert self._ws is not None
        try:
            for raw in self._ws:
                frame = json.loads(raw)
                if frame.get("action") == "get_login_info":
                    self.login_queries += 1
                    info = {"user_id": self.login_id, "nickname": "fake bot"}
                    self._send({"status": "ok", "retcode": 0, "data": info, "echo": frame.get("echo")})
                elif "action" in frame:
                    self.actions.append(frame)
                    self._send(_answer(frame, self._message_ids, self._failures))
        except ConnectionClosed:
            pass
        finally:
            rcvd = getattr(self._ws, "close_rcvd", None)
            self.close_code = rcvd.code if rcvd is not None else None
            self.closed.set()

    def fail_next(self, retcode: int, wording: str) -> None:
        self._failures.append((retcode, wording))

    def heartbeat(self) -> None:
        status = {"online": True, "good": True}
        self._send({"time": int(time.time()), "self_id": self.self_id, "post_type": "meta_event",
                    "meta_event_type": "heartbeat", "status": status, "interval": 30000})  # fmt: skip

    def private(self, user_id: int, text: str, *, self_id: int | None = None) -> int:
        """Send a private message event from ``user_id`` (``self_id``: the bot the event names, by
        default this one's); returns its message id."""
        message_id = next(self._ids)
        self._send(private_event(self.self_id if self_id is None else self_id, user_id, text, message_id))
        return message_id

    def group(self, group_id: int, user_id: int, text: str, *, at_self: bool = False) -> int:
        message_id = next(self._ids)
        self._send(group_event(self.self_id, group_id, user_id, text, message_id, at_self=at_self))
        return message_id

    def group_segments(self, group_id: int, user_id: int, segments: list[dict[str, Any]]) -> int:
        """A group message event of ``segments`` (an image's ``url``, a ``reply`` segment); its message id."""
        message_id = next(self._ids)
        event = group_event(self.self_id, group_id, user_id, "", message_id)
        event["message"] = segments
        self._send(event)
        return message_id

    def wait_actions(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.actions) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"got {len(self.actions)} OneBot actions, wanted {count}")
            time.sleep(0.05)
        return self.actions

    def close(self) -> None:
        if self._ws is not None:
            self._ws.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeNapCat:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def private_event(self_id: int, user_id: int, text: str, message_id: int = 1) -> dict[str, Any]:
    return {
        "time": int(time.time()), "self_id": self_id, "post_type": "message", "message_type": "private",
        "sub_type": "friend", "message_id": message_id, "user_id": user_id, "message_format": "array",
        "message": [{"type": "text", "data": {"text": text}}], "raw_message": text, "font": 14,
        "sender": {"user_id": user_id, "nickname": "tester", "sex": "unknown", "age": 0},
    }  # fmt: skip


def group_event(self_id: int, group_id: int, user_id: int, text: str, message_id: int = 1, *, at_self=False) -> dict:
    message = [{"type": "text", "data": {"text": text}}]
    raw = text
    if at_self:
        message.insert(0, {"type": "at", "data": {"qq": str(self_id)}})
        raw = f"[CQ:at,qq={self_id}] {text}"
    return {
        "time": int(time.time()), "self_id": self_id, "post_type": "message", "message_type": "group",
        "sub_type": "normal", "message_id": message_id, "group_id": group_id, "user_id": user_id,
        "message_format": "array", "message": message, "raw_message": raw, "font": 14,
        "sender": {"user_id": user_id, "nickname": "tester", "card": "", "role": "member"},
    }  # fmt: skip


class FakeOneBotHTTP:
    """The HTTP API of a OneBot implementation (``POST /<action>``, ``Authorization: Bearer``)."""

    def __init__(self, self_id: int, token: str):
        self.self_id, self.token = self_id, token
        self.actions: list[dict[str, Any]] = []
        self._failures: list[tuple[int, str]] = []
        self._message_ids = itertools.count(5000)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("authorization") != f"Bearer {fake.token}":
                    self.send_response(403)
                    self.end_headers()
                    return
                action = {"action": self.path.strip("/"), "params": json.loads(body or b"{}")}
                fake.actions.append(action)
                answer = json.dumps(_answer(action, fake._message_ids, fake._failures)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def fail_next(self, retcode: int, wording: str) -> None:
        self._failures.append((retcode, wording))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def signed_post(secret: str, event: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """The body and headers of an HTTP POST event signed as NapCat signs it."""
    import hashlib
    import hmac

    body = json.dumps(event, ensure_ascii=False).encode()
    return body, {
        "content-type": "application/json",
        "X-Self-ID": str(event.get("self_id", "")),
        "X-Signature": "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest(),
    }
