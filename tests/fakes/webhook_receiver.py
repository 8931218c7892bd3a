"""A receiver of Standard Webhooks (https://www.standardwebhooks.com) for tests: a real HTTP server
that verifies each POST independently of mewdex's code — ``webhook-id``, ``webhook-timestamp``
(at most 5 minutes off), ``webhook-signature`` (space-separated ``v1,<base64 HMAC-SHA256(key,
"{id}.{timestamp}.{body}")>`` entries, key = the base64 part of the ``whsec_`` secret) — and drops a
repeated ``webhook-id``.

``receiver.secret`` must be set (the secret mewdex showed) before deliveries arrive. Verified events
are in ``receiver.events`` (the JSON bodies), every request in ``receiver.requests`` (``{"headers",
"body", "verdict"}``: ``ok``, ``bad_signature``, ``stale``, ``duplicate``). ``receiver.statuses``: a
FIFO of statuses to answer (e.g. ``[500]``) before the normal 204.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOLERANCE_SECONDS = 300


def verify(secret: str, headers: dict[str, str], body: bytes, now: float | None = None) -> str:
    """``ok`` or why not (``missing``, ``stale``, ``bad_signature``)."""
    msg_id, ts, signatures = (
        headers.get("webhook-id"),
        headers.get("webhook-timestamp"),
        headers.get("webhook-signature"),
    )
    if not (msg_id and ts and signatures and ts.isdigit()):
        return "missing"
    if abs((now or time.time()) - int(ts)) > TOLERANCE_SECONDS:
        return "stale"
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()).decode()
    for entry in signatures.split(" "):
        version, _, value = entry.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return "ok"
    return "bad_signature"


class WebhookReceiver:
    def __init__(self):
        self.secret: str | None = None
        self.events: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self.seen: set[str] = set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = receiver.receive({k.lower(): v for k, v in self.headers.items()}, body)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hooks/mewdex"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def receive(self, headers: dict[str, str], body: bytes) -> int:
        verdict = verify(self.secret or "", headers, body) if self.secret else "no_secret"
        if verdict == "ok" and headers["webhook-id"] in self.seen:
            verdict = "duplicate"
        self.requests.append({"headers": headers, "body": body, "verdict": verdict})
        if verdict not in ("ok", "duplicate"):
            return 401
        if self.statuses:
            return self.statuses.pop(0)
        if verdict == "ok":
            self.seen.add(headers["webhook-id"])
            self.events.append(json.loads(body))
        return 204

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> WebhookReceiver:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
