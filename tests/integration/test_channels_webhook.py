"""The webhook channel (issue 17): the user gives a URL, mewdex signs per Standard Webhooks and shows
the secret once; a receiver that verifies signatures on its own gets each meme once (a retried
delivery keeps its webhook-id); errors land in the delivery log; revoke stops sending."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import datetime
from urllib.parse import urlsplit

import pytest
from sqlalchemy import select

from conftest import client_for, drain_queue
from fakes.webhook_receiver import WebhookReceiver
from mewdex.db.models import ChannelDelivery


@pytest.fixture
def receiver(settings_env):
    with WebhookReceiver() as r:
        settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([f"127.0.0.1:{r.port}"]))
        yield r


def _send(sessions, acct, name="cat one", caption=None):
    from mewdex.channels import delivery

    with sessions.begin() as session:
        row = delivery.send_meme(
            session, user_id=acct.user_id, channel="webhook", meme_id=acct.memes[name], caption=caption
        )
        delivery_id = row.delivery_id
    drain_queue(sessions, acct.scope, timeout=120)
    with sessions.begin() as session:
        row = session.get(ChannelDelivery, delivery_id)
        return {"status": row.status, "attempts": row.attempts, "code": row.error_code, "platform": row.platform_code}


def test_webhook_bind_sign_deliver_retry_fail_revoke(sessions, store, account, receiver):
    with client_for(account.scope) as client:
        made = client.post("/api/v1/channels/webhook", json={"url": receiver.url})
        assert made.status_code == 201, made.text
        secret = made.json()["secret"]
        assert secret.startswith("whsec_") and made.json()["binding"]["config"] == {"url": receiver.url}
        listed = client.get("/api/v1/channels").text
        assert secret not in listed and secret.removeprefix("whsec_") not in listed, "the secret is shown once"
    receiver.secret = secret

    assert _send(sessions, account, caption="for you") == {
        "status": "sent",
        "attempts": 1,
        "code": None,
        "platform": None,
    }
    [event] = receiver.events
    assert event["type"] == "channel.meme" and event["data"]["meme_id"] == account.memes["cat one"]
    assert event["data"]["caption"] == "for you"
    with sessions.begin() as session:
        queued = session.execute(select(ChannelDelivery.created_at).order_by(ChannelDelivery.created_at.desc())).first()
    # the body's timestamp: when the delivery was queued, ISO 8601 UTC; the signed header: Unix seconds
    assert event["timestamp"].endswith("Z") and datetime.fromisoformat(event["timestamp"]) == queued[0].replace(
        microsecond=queued[0].microsecond // 1000 * 1000
    )
    assert receiver.requests[-1]["headers"]["webhook-timestamp"].isdigit()
    # no MEWDEX_PUBLIC_URL: no address to link to, so a small image goes inline
    assert "image_url" not in event["data"]
    image = base64.b64decode(event["data"]["image_base64"])
    assert hashlib.sha256(image).hexdigest() == event["data"]["sha256"]

    receiver.statuses = [503]  # one failure, then the retry gets through with the same webhook-id
    assert _send(sessions, account, "cat two")["status"] == "sent"
    first, second = receiver.requests[-2:]
    assert first["headers"]["webhook-id"] == second["headers"]["webhook-id"]
    assert len(receiver.events) == 2

    receiver.statuses = [410]  # a 4xx is not retried and says why
    assert _send(sessions, account, "cat three") == {
        "status": "failed",
        "attempts": 1,
        "code": "channel_platform_error",
        "platform": "410",
    }

    receiver.secret = "whsec_" + base64.b64encode(b"another key of 24 bytes!").decode()  # signatures must match
    assert _send(sessions, account)["platform"] == "401"
    assert receiver.requests[-1]["verdict"] == "bad_signature"

    with client_for(account.scope) as client:
        log = client.get("/api/v1/channels/deliveries?channel=webhook").json()["deliveries"]
        assert [d["status"] for d in log] == ["failed", "failed", "sent", "sent"]
        assert client.delete("/api/v1/channels/webhook").json()["status"] == "revoked"
    from mewdex.channels import delivery
    from mewdex.channels.errors import ChannelError

    with sessions.begin() as session, pytest.raises(ChannelError) as refused:
        delivery.send_meme(session, user_id=account.user_id, channel="webhook", meme_id=account.memes["cat one"])
    assert refused.value.code == "channel_not_bound"


def test_webhook_url_must_pass_the_egress_guard(account):
    with client_for(account.scope) as client:
        for url in ("http://10.1.2.3/hook", "ftp://example.org/x", "https://user:pw@example.org/x"):
            refused = client.post("/api/v1/channels/webhook", json={"url": url})
            assert refused.status_code == 422 and refused.json()["error"]["code"] == "channel_config_invalid", url
        assert client.get("/api/v1/channels").json()["bindings"] == []


def test_send_meme_validates_its_input(sessions, account):
    from mewdex.channels import delivery
    from mewdex.channels.errors import ChannelError

    cases = [
        ({"channel": "nope", "meme_id": account.memes["cat one"]}, "channel_unknown"),
        ({"channel": "telegram", "meme_id": "not-a-uuid"}, "not_found"),
        ({"channel": "telegram", "meme_id": account.memes["cat one"]}, "channel_not_bound"),
        ({"channel": "telegram", "meme_id": account.memes["cat one"], "caption": "x" * 2000}, "invalid_request"),
    ]
    for kwargs, code in cases:
        with sessions.begin() as session, pytest.raises(ChannelError) as refused:
            delivery.send_meme(session, user_id=account.user_id, **kwargs)
        assert refused.value.code == code, kwargs


def test_send_text_refuses_an_unknown_source_as_send_meme_does(sessions, account):
    from mewdex.channels import delivery
    from mewdex.channels.errors import ChannelError

    meme = {"meme_id": account.memes["cat one"]}
    for send, what in ((delivery.send_text, {"text": "hi"}), (delivery.send_meme, meme)):
        with sessions.begin() as session, pytest.raises(ChannelError) as refused:
            send(session, user_id=account.user_id, channel="webhook", source="spam", **what)
        assert refused.value.code == "invalid_request"


def test_a_meme_goes_as_a_signed_expiring_link_under_the_public_url(
    sessions,
    store,
    account,
    receiver,
    settings_env,
):
    """With ``MEWDEX_PUBLIC_URL`` the body carries no image bytes but a signed link that opens that
    one file until it expires; without it a large image is left out rather than inlined."""
    import time

    from mewdex.channels.webhook import adapter as channel

    with client_for(account.scope) as client:
        receiver.secret = client.post("/api/v1/channels/webhook", json={"url": receiver.url}).json()["secret"]
    settings_env(MEWDEX_PUBLIC_URL="https://memes.example.org/", MEWDEX_MEDIA_URL_TTL_SECONDS="600")
    assert _send(sessions, account, "dancing cat")["status"] == "sent"
    data = receiver.events[-1]["data"]
    assert "image_base64" not in data and len(receiver.requests[-1]["body"]) < 2048
    link = urlsplit(data["image_url"])
    assert (link.scheme, link.netloc, link.path) == (
        "https",
        "memes.example.org",
        f"/media/{account.memes['dancing cat']}",
    )
    expires = datetime.fromisoformat(data["image_expires_at"]).timestamp()
    assert 590 <= expires - time.time() <= 601
    with client_for() as anonymous:  # the link alone opens the file: no session, no token
        opened = anonymous.get(f"{link.path}?{link.query}")
        assert opened.status_code == 200 and hashlib.sha256(opened.content).hexdigest() == data["sha256"]
        tampered = anonymous.get(f"/media/{account.memes['cat one']}?{link.query}")
        assert tampered.status_code == 401 and tampered.json()["error"]["code"] == "signature_invalid"

    settings_env(MEWDEX_PUBLIC_URL="")
    small = channel.INLINE_IMAGE_BYTES
    channel.INLINE_IMAGE_BYTES = 16  # every test meme is "large" now
    try:
        assert _send(sessions, account, "cat two")["status"] == "sent"
    finally:
        channel.INLINE_IMAGE_BYTES = small
    data = receiver.events[-1]["data"]
    assert data["image_omitted"] == "public_url_missing" and "image_base64" not in data and "image_url" not in data
