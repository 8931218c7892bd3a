"""The ``webhook`` provider: an outgoing HTTP POST signed per Standard Webhooks
(https://www.standardwebhooks.com): headers ``webhook-id``, ``webhook-timestamp`` (the send time,
integer Unix seconds, as the specification requires) and ``webhook-signature: v1,<base64
HMAC-SHA256(key, "{id}.{timestamp}.{body}")>``, where the key is the base64 part of the ``whsec_…``
secret. The body is ``{"type", "timestamp", "data"}`` with ``timestamp`` the event's time in ISO
8601 UTC (``2026-12-03T08:30:15.250Z``), as the specification recommends; a retry resends the same
event time. Used by schedules and the webhook channel.

Config: ``{"url": "https://…"}`` (must pass the egress guard). Credentials: ``{"secret": "whsec_…"}``
(:func:`new_secret` makes one). :func:`send` posts one event and audits it (``webhook``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets as _random
import time
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.orm import sessionmaker

from mewdex.egress import EgressError, fetch
from mewdex.providers import connectors
from mewdex.providers.connectors import Connection, ProviderSpec, register_provider
from mewdex.providers.errors import ProviderError

PROVIDER = "webhook"
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A fresh ``whsec_`` secret (24 random bytes)."""
    return SECRET_PREFIX + base64.b64encode(_random.token_bytes(24)).decode()


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value (``v1,<base64>``) of one message."""
    key = base64.b64decode(secret[len(SECRET_PREFIX) :] if secret.startswith(SECRET_PREFIX) else secret)
    digest = hmac.new(key, f"{message_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def iso_time(moment: datetime) -> str:
    """``moment`` as ISO 8601 UTC with milliseconds and ``Z`` (a naive one is taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _validate_config(config: dict[str, Any]) -> dict[str, Any]:
    url = str(config.get("url") or "").strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        raise ProviderError("connector_config_invalid", "url must be an http(s) URL without credentials")
    return {"url": url}


register_provider(ProviderSpec(PROVIDER, _validate_config, ("secret",), None))


def send(
    sessions: sessionmaker,
    connection: Connection,
    event_type: str,
    data: dict[str, Any],
    *,
    task_id: str | None = None,
    message_id: str | None = None,
    occurred_at: datetime | None = None,
    timeout: float = 15.0,
) -> int:
    """POST ``{"type", "timestamp", "data"}`` to the connection's URL, signed; returns the status.
    ``timestamp``: ``occurred_at`` (the event's time; default now) in ISO 8601 UTC.
    Raises :class:`ProviderError` (``provider_failed`` for a non-2xx answer or no answer, retryable
    for 5xx, 408 and 429 — ``details["retry_after"]``: the seconds a 408/429 asked for; egress
    codes). The whole call ends within ``2 × timeout`` seconds. ``message_id`` (default a new
    ``msg_…``) lets a receiver drop a repeated delivery."""
    message_id = message_id or f"msg_{uuid.uuid4().hex}"
    timestamp = int(time.time())
    event_time = iso_time(occurred_at or datetime.now(UTC))
    body = json.dumps(
        {"type": event_type, "timestamp": event_time, "data": data}, ensure_ascii=False, separators=(",", ":")
    ).encode()
    headers = {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(connection.credentials["secret"], message_id, timestamp, body),
    }
    started = time.monotonic()
    status, size, error = None, None, None
    try:
        response = fetch(
            "POST",
            connection.config["url"],
            headers=headers,
            content=body,
            max_bytes=64 * 1024,
            timeout=timeout,
            deadline=2 * timeout,
            secret_headers=("webhook-signature",),
        )
        status, size = response.status, len(response.content)
        if not 200 <= status < 300:
            # 408/429 were already retried by egress while the wait fit; the rest is the queue's
            wait = response.retry_after if status in (408, 429) else None
            error = ProviderError(
                "provider_failed",
                f"the webhook answered {status}",
                {"retry_after": wait} if wait is not None else None,
                retryable=status >= 500 or status in (408, 429),
                status_code=status,
            )
    except EgressError as exc:
        error = ProviderError(exc.code, exc.message, retryable=exc.retryable)
    with sessions.begin() as session:
        connectors.audit(
            session,
            connection,
            event="webhook",
            outcome="ok" if error is None else "failed",
            status_code=status,
            duration_ms=int((time.monotonic() - started) * 1000),
            response_bytes=size,
            operation_id=message_id,
            task_id=task_id,
            detail={"type": event_type} if error is None else {"type": event_type, "code": error.code},
        )
    if error is not None:
        raise error
    assert status is not None  # no error: the receiver answered
    return status
