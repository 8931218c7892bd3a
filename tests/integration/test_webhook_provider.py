"""The webhook provider: Standard Webhooks signing (verified by the reference library
``standardwebhooks``), the body's ISO 8601 event time, egress guard, audits."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import select, text
from standardwebhooks import Webhook, WebhookVerificationError


@pytest.fixture
def receiver(settings_env):
    received = []

    class Handler(BaseHTTPRequestHandler):
        status = 204

        def log_message(self, *a):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(Handler.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([f"127.0.0.1:{server.server_address[1]}"]))
    yield server, Handler, received
    server.shutdown()
    server.server_close()


def test_webhook_is_signed_per_standard_webhooks_and_audited(receiver, sessions):
    from mewdex.db.models import ExternalSystemAudit
    from mewdex.providers import connectors, webhook
    from mewdex.providers.connectors import Connection
    from mewdex.providers.errors import ProviderError

    server, handler, received = receiver
    secret = webhook.new_secret()
    with sessions.begin() as session:
        d = connectors.create_definition(
            session,
            provider="webhook",
            name=f"hook-{uuid.uuid4().hex[:6]}",
            config={"url": f"http://127.0.0.1:{server.server_address[1]}/in"},
            credentials={"secret": secret},
        )
        definition_id, revision = d.definition_id, d.revision
    conn = Connection(
        definition_id,
        "webhook",
        "hook",
        revision,
        {"url": f"http://127.0.0.1:{server.server_address[1]}/in"},
        None,
        {"secret": secret},
        "local",
        None,
    )
    occurred = datetime(2026, 12, 3, 8, 30, 15, 250000, tzinfo=timezone(timedelta(hours=8)))
    assert webhook.send(sessions, conn, "schedule.finished", {"ok": True}, occurred_at=occurred) == 204
    headers, body = received[0]
    # the specification's reference library verifies the signature (not a reader of ours)
    assert Webhook(secret).verify(body, headers) == json.loads(body)
    assert headers["webhook-timestamp"].isdigit()  # the signed header: integer Unix seconds
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
    # the body's timestamp: the event's time, ISO 8601 in UTC
    assert json.loads(body)["timestamp"] == "2026-12-03T00:30:15.250Z"
    assert datetime.fromisoformat(json.loads(body)["timestamp"]) == occurred
    with pytest.raises(WebhookVerificationError):
        Webhook(webhook.new_secret()).verify(body, headers)
    assert json.loads(body)["data"] == {"ok": True} and secret not in json.dumps(headers)
    handler.status = 500
    with pytest.raises(ProviderError) as err:
        webhook.send(sessions, conn, "schedule.finished", {})
    assert err.value.code == "provider_failed" and err.value.retryable
    blocked = Connection(
        definition_id,
        "webhook",
        "hook",
        revision,
        {"url": "http://10.1.2.3/in"},
        None,
        {"secret": secret},
        "local",
        None,
    )
    with pytest.raises(ProviderError) as err:
        webhook.send(sessions, blocked, "x", {})
    assert err.value.code.startswith("egress_")
    with sessions.begin() as session:
        audits = (
            session.execute(
                select(ExternalSystemAudit)
                .where(ExternalSystemAudit.definition_id == definition_id)
                .order_by(ExternalSystemAudit.created_at)
            )
            .scalars()
            .all()
        )
        assert [(a.outcome, a.status_code) for a in audits] == [("ok", 204), ("failed", 500), ("failed", None)]
        assert secret not in json.dumps([a.detail for a in audits])
        session.execute(text("DELETE FROM external_system_audits WHERE definition_id = :d"), {"d": definition_id})
        session.execute(text("DELETE FROM external_system_definitions WHERE definition_id = :d"), {"d": definition_id})
