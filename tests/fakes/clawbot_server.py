"""A fake WeChat ClawBot (iLink bot API + its CDN) for tests, with an injectable clock.

:class:`FakeClawBot` is a real HTTP server; ``fake.url`` stands in for ``https://ilinkai.weixin.qq.com``
and ``fake.cdn_url`` for ``https://novac2c.cdn.weixin.qq.com/c2c`` (tests allow ``fake.host`` with
``MEWDEX_EGRESS_ALLOW_HOSTS``).

* QR login: ``get_bot_qrcode`` makes a QR in state ``wait``; the test drives it with
  :meth:`scan` (``scaned``), :meth:`confirm` (``confirmed``, issuing a bot token for the scanning
  user) and :meth:`expire` (``expired``); ``get_qrcode_status`` reports it.
* Every ``/ilink/bot/*`` call but the QR ones needs ``AuthorizationType: ilink_bot_token``,
  ``Authorization: Bearer <issued token>`` and an ``X-WECHAT-UIN`` that is base64 of a decimal
  number (else HTTP 401/400). :meth:`expire_session` makes a token answer ``ret -14``.
* :meth:`user_says` queues a user message with a fresh ``context_token`` (this opens the window:
  the fake's clock time is noted and the send counter reset). ``getupdates`` holds until a message
  is queued or ``long_poll_seconds`` pass; the cursor ``get_updates_buf`` counts delivered messages.
* ``sendmessage`` delivers (into ``fake.sent``) only with the user's latest context token, within
  24 h of their last message on the fake clock (``fake.now``, moved with :meth:`advance`) and at
  most 10 sends since — else ``ret -2`` (what iLink answers). :meth:`fail_next` scripts a ``ret``.
* CDN: ``getuploadurl`` records the file key, AES key, sizes and MD5; ``POST /c2c/upload`` decrypts
  the AES-128-ECB body, checks size and MD5 (400 with ``x-error-message`` otherwise) and answers
  ``x-encrypted-param``; ``fake.images[param]`` holds the decrypted bytes. ``GET /c2c/download``
  serves an inbound image queued with ``user_says(..., image=bytes)``.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

WINDOW_SECONDS = 24 * 3600
WINDOW_SENDS = 10


def _ecb(key: bytes, data: bytes, encrypt: bool) -> bytes:
    cipher = Cipher(algorithms.AES(key), modes.ECB())
    if encrypt:
        padder = padding.PKCS7(128).padder()
        e = cipher.encryptor()
        return e.update(padder.update(data) + padder.finalize()) + e.finalize()
    d = cipher.decryptor()
    unpadder = padding.PKCS7(128).unpadder()
    return unpadder.update(d.update(data) + d.finalize()) + unpadder.finalize()


class FakeClawBot:
    def __init__(self, long_poll_seconds: float = 1.0):
        self.long_poll_seconds = long_poll_seconds
        self.now = 1_790_000_000.0  # the fake clock (seconds); move it with advance()
        self.qrcodes: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, dict[str, Any]] = {}  # bot_token -> {"bot_id", "user_id", "expired"}
        self.contexts: dict[tuple[str, str], dict[str, Any]] = {}  # (bot_id, user) -> {"token", "at", "sends"}
        self.inbox: dict[str, list[dict[str, Any]]] = {}  # bot_id -> all messages ever queued
        self.sent: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.uploads: dict[str, dict[str, Any]] = {}  # filekey -> getuploadurl body
        self.images: dict[str, bytes] = {}  # encrypted param -> decrypted bytes
        self.downloads: dict[str, bytes] = {}  # param -> ciphertext of inbound images
        self._fail: list[int] = []
        self._cond = threading.Condition()
        self._ids = itertools.count(7_000_000)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, status: int, payload: Any = None, raw: bytes | None = None, headers=None) -> None:
                body = raw if raw is not None else json.dumps(payload if payload is not None else {}).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json" if raw is None else "application/octet-stream")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

            def _handle(self, method: str) -> None:
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                fake.requests.append({"method": method, "path": parts.path, "query": query,
                                      "headers": dict(self.headers.items())})  # fmt: skip
                try:
                    self._reply(*fake._route(method, parts.path, query, body, self.headers))
                except BrokenPipeError:
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- test controls

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return self.url + "/c2c"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def scan(self, qrcode: str) -> None:
        self.qrcodes[qrcode]["status"] = "scaned"

    def expire(self, qrcode: str) -> None:
        self.qrcodes[qrcode]["status"] = "expired"

    def confirm(self, qrcode: str, user_id: str = "o9cq80_user@im.wechat") -> str:
        """The person ``user_id`` confirms the login; returns the bot token issued."""
        token = f"{secrets.token_hex(8)}@im.bot:{secrets.token_hex(16)}"
        bot_id = f"{secrets.token_hex(6)}@im.bot"
        self.tokens[token] = {"bot_id": bot_id, "user_id": user_id, "expired": False}
        self.qrcodes[qrcode].update(status="confirmed", bot_token=token, ilink_bot_id=bot_id, ilink_user_id=user_id)
        return token

    def latest_qrcode(self) -> str:
        return list(self.qrcodes)[-1]

    def expire_session(self, token: str) -> None:
        self.tokens[token]["expired"] = True

    def fail_next(self, ret: int) -> None:
        self._fail.append(ret)

    def user_says(
        self, token: str, text: str = "", image: bytes | None = None, from_user: str | None = None
    ) -> dict[str, Any]:
        """The bound person (or ``from_user``, someone iLink should not let reach this 1:1 bot) writes
        to the bot of ``token`` (opens the window); returns the message."""
        info = self.tokens[token]
        sender = from_user or info["user_id"]
        context_token = secrets.token_urlsafe(24)
        self.contexts[(info["bot_id"], sender)] = {"token": context_token, "at": self.now, "sends": 0}
        items: list[dict[str, Any]] = []
        if text:
            items.append({"type": 1, "text_item": {"text": text}})
        if image is not None:
            key = secrets.token_bytes(16)
            param = secrets.token_urlsafe(18)
            self.downloads[param] = _ecb(key, image, True)
            items.append({"type": 2, "image_item": {"media": {"encrypt_query_param": param,
                          "aes_key": base64.b64encode(key.hex().encode()).decode(), "encrypt_type": 1}}})  # fmt: skip
        message = {"seq": next(self._ids), "message_id": next(self._ids), "from_user_id": sender,
                   "to_user_id": info["bot_id"], "create_time_ms": int(self.now * 1000), "message_type": 1,
                   "message_state": 2, "context_token": context_token, "item_list": items}  # fmt: skip
        with self._cond:
            self.inbox.setdefault(info["bot_id"], []).append(message)
            self._cond.notify_all()
        return message

    def close(self) -> None:
        with self._cond:
            self._cond.notify_all()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeClawBot:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- routes

    def _route(self, method: str, path: str, query: dict, body: bytes, headers) -> tuple:
        if path == "/ilink/bot/get_bot_qrcode":
            qrcode = secrets.token_hex(16)
            self.qrcodes[qrcode] = {"status": "wait"}
            return 200, {
                "qrcode": qrcode,
                "qrcode_img_content": f"https://liteapp.weixin.qq.com/q/7GiQu1?qrcode={qrcode}&bot_type=3",
            }
        if path == "/ilink/bot/get_qrcode_status":
            state = self.qrcodes.get(query.get("qrcode", ""))
            if state is None:
                return 200, {"status": "expired"}
            out = dict(state)
            if out["status"] == "confirmed":
                out["baseurl"] = self.url
            return 200, out
        if path == "/c2c/upload" and method == "POST":
            return self._cdn_upload(query, body)
        if path == "/c2c/download":
            data = self.downloads.get(query.get("encrypted_query_param", ""))
            return (200, None, data) if data is not None else (404, {"error": "not found"})
        if not path.startswith("/ilink/bot/"):
            return 404, {"error": "not found"}
        if headers.get("AuthorizationType") != "ilink_bot_token":
            return 400, {"ret": -1, "errmsg": "AuthorizationType missing"}
        try:
            int(base64.b64decode(headers.get("X-WECHAT-UIN", ""), validate=True).decode())
        except ValueError:
            return 400, {"ret": -1, "errmsg": "X-WECHAT-UIN must be base64 of a number"}
        auth = headers.get("Authorization", "")
        info = self.tokens.get(auth[len("Bearer ") :]) if auth.startswith("Bearer ") else None
        if info is None:
            return 401, {"ret": -1, "errmsg": "unauthorized"}
        if info["expired"]:
            return 200, {"ret": -14, "errcode": -14, "errmsg": "session timeout"}
        data = json.loads(body or b"{}")
        name = path.rsplit("/", 1)[-1]
        if name == "getupdates":
            return 200, self._getupdates(info, data)
        if name == "sendmessage":
            return 200, self._sendmessage(info, data)
        if name == "getuploadurl":
            self.uploads[data["filekey"]] = data
            return 200, {"ret": 0, "upload_param": base64.b64encode(f"up:{data['filekey']}".encode()).decode()}
        return 404, {"ret": -1, "errmsg": f"unknown {name}"}

    def _getupdates(self, info: dict, data: dict) -> dict:
        cursor = int(data.get("get_updates_buf") or 0)
        deadline = time.monotonic() + self.long_poll_seconds
        with self._cond:
            while len(self.inbox.get(info["bot_id"], [])) <= cursor and time.monotonic() < deadline:
                self._cond.wait(max(0.01, deadline - time.monotonic()))
            msgs = self.inbox.get(info["bot_id"], [])[cursor:]
        return {"ret": 0, "msgs": msgs, "get_updates_buf": str(cursor + len(msgs)), "longpolling_timeout_ms": 35000}

    def _sendmessage(self, info: dict, data: dict) -> dict:
        if self._fail:
            return {"ret": self._fail.pop(0), "errmsg": "scripted failure"}
        msg = data.get("msg") or {}
        items = msg.get("item_list") or []
        if len(items) != 1:
            return {"ret": -1, "errmsg": "one item per message"}
        context = self.contexts.get((info["bot_id"], msg.get("to_user_id")))
        if (
            context is None
            or msg.get("context_token") != context["token"]
            or self.now - context["at"] > WINDOW_SECONDS
            or context["sends"] >= WINDOW_SENDS
        ):
            return {"ret": -2, "errmsg": "unknown error"}
        item = items[0]
        if item.get("type") == 2:
            param = item["image_item"]["media"]["encrypt_query_param"]
            if param not in self.images:
                return {"ret": -1, "errmsg": "media not found"}
        context["sends"] += 1
        self.sent.append(msg)
        return {"ret": 0}

    def _cdn_upload(self, query: dict, body: bytes) -> tuple:
        meta = self.uploads.get(query.get("filekey", ""))
        if meta is None:
            return 400, {}, None, {"x-error-message": "unknown filekey"}
        try:
            plain = _ecb(bytes.fromhex(meta["aeskey"]), body, False)
        except ValueError:
            return 400, {}, None, {"x-error-message": "decrypt failed"}
        if len(body) != meta["filesize"] or len(plain) != meta["rawsize"]:
            return 400, {}, None, {"x-error-message": "size mismatch"}
        if hashlib.md5(plain).hexdigest() != meta["rawfilemd5"]:
            return 400, {}, None, {"x-error-message": "md5 mismatch"}
        param = secrets.token_urlsafe(24)
        self.images[param] = plain
        return 200, {}, None, {"x-encrypted-param": param}
