"""A fake Discord for tests: a real HTTP server in the test process that speaks the parts of the REST
API (v10) mewdex calls, and a user side that signs interactions with the application's test
Ed25519 key and POSTs them to mewdex's interactions endpoint over real HTTP, as Discord does.

API side (base URL :attr:`FakeDiscord.api_url`, ``Authorization: Bot <token>`` where Discord asks
for it; a wrong token is 401 ``{"code": 0}``):

- ``GET /applications/@me`` → ``{"id", "name", "verify_key"}``;
- ``PUT /applications/{id}/commands`` → the commands (kept in ``fake.commands``);
- ``POST /channels/{id}/messages`` (JSON or multipart ``payload_json`` + ``files[n]``) → the message;
  an unknown channel is 404 ``10003``, one in ``fake.forbidden`` 403 ``50013``;
- ``PATCH /webhooks/{app}/{token}/messages/@original`` and ``POST /webhooks/{app}/{token}`` (an
  interaction's answer and follow-ups; the token must be one the fake handed out, else 404 ``10015``).

Everything recorded is a dict ``{"kind": "message"|"edit"|"followup", "channel_id"|"token",
"payload", "files": [(filename, bytes)], "at"}`` in ``fake.sent``; :meth:`fail_next` scripts an
error for the next call of a kind (429 with ``retry_after``).

User side: :meth:`slash` (``/meme``, ``/link``), :meth:`message_command`, :meth:`press` (a button of
a message mewdex sent) build an interaction, :meth:`deliver` signs and POSTs it (``bad_signature``
signs with another key) and returns ``(status, answer)``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

_ids = itertools.count(int(time.time() * 1000) << 22)


def snowflake() -> str:
    return str(next(_ids))


class FakeDiscord:
    def __init__(self, name: str = "mewdex test app"):
        self.application_id = snowflake()
        self.name = name
        self.bot_token = f"{uuid.uuid4().hex}.{uuid.uuid4().hex}.{uuid.uuid4().hex[:20]}"
        self.key = Ed25519PrivateKey.generate()
        self.verify_key = self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
        self.channels: set[str] = {snowflake()}
        self.forbidden: set[str] = set()
        self.commands: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []
        self.tokens: set[str] = set()
        self.failures: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, answer = fake.route(self.command, self.path, dict(self.headers), body)
                payload = json.dumps(answer).encode() if answer is not None else b""
                self.send_response(status)
                if payload:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.api_url = f"http://127.0.0.1:{self.port}/api/v10"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeDiscord:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- the API side

    def fail_next(self, kind: str, status: int = 429, **body: Any) -> None:
        """The next call of ``kind`` (``message``, ``edit``, ``followup``) answers ``status`` with ``body``
        (``retry_after=`` for a 429)."""
        body.setdefault("message", "You are being rate limited." if status == 429 else "Scripted failure")
        body.setdefault("code", 0)
        self.failures.setdefault(kind, []).append((status, body))

    def _failure(self, kind: str) -> tuple[int, dict[str, Any]] | None:
        with self.lock:
            queued = self.failures.get(kind)
            return queued.pop(0) if queued else None

    @staticmethod
    def _parse(headers: dict[str, str], body: bytes) -> tuple[dict[str, Any], list[tuple[str, bytes]]]:
        content_type = headers.get("Content-Type") or headers.get("content-type") or ""
        if not content_type.startswith("multipart/form-data"):
            return (json.loads(body) if body else {}), []
        message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
        payload: dict[str, Any] = {}
        files: list[tuple[str, bytes]] = []
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if name == "payload_json":
                payload = json.loads(part.get_payload(decode=True))
            elif name and name.startswith("files["):
                files.append((part.get_filename(), part.get_payload(decode=True)))
        return payload, files

    def route(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if not path.startswith("/api/v10/"):
            return 404, {"message": "404: Not Found", "code": 0}
        parts = path[len("/api/v10/") :].split("/")
        authorized = (headers.get("Authorization") or headers.get("authorization")) == f"Bot {self.bot_token}"
        if parts[0] == "webhooks" and len(parts) >= 3:
            app, token = parts[1], parts[2]
            kind = "edit" if method == "PATCH" and parts[3:] == ["messages", "@original"] else "followup"
            if app != self.application_id or token not in self.tokens:
                return 404, {"message": "Unknown Webhook", "code": 10015}
            failed = self._failure(kind)
            if failed:
                return failed
            payload, files = self._parse(headers, body)
            return 200, self._record(kind, {"token": token}, payload, files)
        if not authorized:
            return 401, {"message": "401: Unauthorized", "code": 0}
        if parts == ["applications", "@me"] and method == "GET":
            return 200, {"id": self.application_id, "name": self.name, "verify_key": self.verify_key}
        if parts[:1] == ["applications"] and parts[2:] == ["commands"] and method == "PUT":
            if parts[1] != self.application_id:
                return 403, {"message": "Missing Access", "code": 50001}
            self.commands = [{**c, "id": snowflake(), "application_id": self.application_id} for c in json.loads(body)]
            return 200, self.commands
        if parts[:1] == ["channels"] and parts[2:] == ["messages"] and method == "POST":
            channel = parts[1]
            if channel in self.forbidden:
                return 403, {"message": "Missing Permissions", "code": 50013}
            if channel not in self.channels:
                return 404, {"message": "Unknown Channel", "code": 10003}
            failed = self._failure("message")
            if failed:
                return failed
            payload, files = self._parse(headers, body)
            return 200, self._record("message", {"channel_id": channel}, payload, files)
        return 404, {"message": "404: Not Found", "code": 0}

    def _record(self, kind: str, where: dict[str, str], payload: dict[str, Any], files) -> dict[str, Any]:
        entry = {"kind": kind, **where, "payload": payload, "files": files, "at": time.monotonic()}
        with self.lock:
            self.sent.append(entry)
        return {
            "id": snowflake(),
            "content": payload.get("content", ""),
            "components": payload.get("components", []),
            "attachments": [{"id": snowflake(), "filename": f} for f, _ in files],
        }

    def answers(self, token: str) -> list[dict[str, Any]]:
        """What mewdex sent for the interaction of ``token`` (edits and follow-ups, in order)."""
        with self.lock:
            return [e for e in self.sent if e.get("token") == token]

    def messages(self, channel_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.sent if e.get("channel_id") == channel_id]

    # ---------------------------------------------------------------- the user's side

    def _interaction(self, kind: int, user_id: str, data: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
        token = f"aW50ZXJhY3Rpb246{uuid.uuid4().hex}{uuid.uuid4().hex}"
        self.tokens.add(token)
        interaction = {
            "id": snowflake(),
            "application_id": self.application_id,
            "type": kind,
            "token": token,
            "version": 1,
            "locale": extra.pop("locale", "en-US"),
            "channel_id": next(iter(self.channels)),
            "guild_id": "1",
            "member": {"user": {"id": user_id, "username": f"user{user_id[-4:]}"}, "roles": []},
            **extra,
        }
        if data is not None:
            interaction["data"] = data
        return interaction

    def ping(self) -> dict[str, Any]:
        return {"id": snowflake(), "application_id": self.application_id, "type": 1, "token": "x", "version": 1}

    def slash(self, user_id: str, name: str, **options: str) -> dict[str, Any]:
        """A slash command (``/meme query:…``, ``/link code:…``) by ``user_id`` in a server."""
        data = {
            "id": snowflake(),
            "name": name,
            "type": 1,
            "options": [{"name": k, "type": 3, "value": v} for k, v in options.items()],
        }
        return self._interaction(2, user_id, data)

    def message_command(self, user_id: str, content: str) -> dict[str, Any]:
        """The message command "Find a meme for this" on a message saying ``content``."""
        target = snowflake()
        data = {
            "id": snowflake(),
            "name": "Find a meme for this",
            "type": 3,
            "target_id": target,
            "resolved": {"messages": {target: {"id": target, "content": content, "author": {"id": snowflake()}}}},
        }
        return self._interaction(2, user_id, data)

    def press(self, user_id: str, message: dict[str, Any]) -> dict[str, Any]:
        """``user_id`` presses the first button of ``message`` (a payload mewdex sent)."""
        button = message["components"][0]["components"][0]
        data = {"custom_id": button["custom_id"], "component_type": 2}
        return self._interaction(3, user_id, data, message={"id": snowflake(), **message})

    def deliver(
        self, url: str, interaction: dict[str, Any], *, bad_signature: bool = False, unsigned: bool = False
    ) -> tuple[int, dict[str, Any]]:
        """Sign ``interaction`` (timestamp + body) and POST it to ``url``: ``(status, JSON answer)``."""
        body = json.dumps(interaction).encode()
        timestamp = str(int(time.time()))
        key = Ed25519PrivateKey.generate() if bad_signature else self.key
        headers = {"Content-Type": "application/json", "User-Agent": "Discord-Interactions/1.0"}
        if not unsigned:
            headers["X-Signature-Ed25519"] = key.sign(timestamp.encode() + body).hex()
            headers["X-Signature-Timestamp"] = timestamp
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
