"""A receiver of Standard Webhooks (https://www.standardwebhooks.com) for tests: a real HTTP server
that verifies each POST with the specification's reference library (``standardwebhooks`` from
PyPI), independently of mewdex's code — ``webhook-id``, ``webhook-timestamp`` (at most 5 minutes
off), ``webhook-signature`` — and drops a repeated ``webhook-id``.

``receiver.secret`` must be set (the secret mewdex showed) before deliveries arrive. Verified events
are in ``receiver.events`` (the JSON bodies), every request in ``receiver.requests`` (``{"headers",
"body", "verdict"}``: ``ok``, ``missing``, ``bad_signature``, ``stale``, ``duplicate``).
``receiver.statuses``: a FIFO of statuses to answer (e.g. ``[500]``) before the normal 204.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError


def verify(secret: str, headers: dict[str, str], body: bytes) -> str:
    """``ok`` or why not (``missing``, ``stale``, ``bad_signature``), as the reference library says."""
    try:
        Webhook(secret).verify(body, headers, json_parse=False)
    except WebhookVerificationError as exc:
        reason = str(exc)
        if "timestamp" in reason.lower() and "too" in reason.lower():
            return "stale"
        return "missing" if "header" in reason.lower() or "timestamp" in reason.lower() else "bad_signature"
    return "ok"


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
