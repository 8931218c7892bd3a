"""The ClawBot protocol layer (``mewdex.channels.clawbot.api``) against the fake iLink server: QR login,
long polling with the cursor, sends within and past the window, the CDN upload with its MD5 check."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from PIL import Image

from fakes.clawbot_server import FakeClawBot
from mewdex.channels.clawbot import api as clawbot
from mewdex.channels.platform import PlatformError


@pytest.fixture
def fake(monkeypatch):
    from mewdex.config import get_settings

    with FakeClawBot(long_poll_seconds=0.5) as server:
        monkeypatch.setenv("MEWDEX_EGRESS_ALLOW_HOSTS", json.dumps([server.host]))
        get_settings.cache_clear()
        yield server
    get_settings.cache_clear()


def login(fake: FakeClawBot, user_id: str = "wxid_person@im.wechat") -> dict:
    qr = clawbot.get_bot_qrcode(fake.url)
    assert clawbot.get_qrcode_status(fake.url, qr["qrcode"])["status"] == "wait"
    fake.scan(qr["qrcode"])
    assert clawbot.get_qrcode_status(fake.url, qr["qrcode"])["status"] == "scaned"
    fake.confirm(qr["qrcode"], user_id)
    return clawbot.get_qrcode_status(fake.url, qr["qrcode"])


def png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (20, 20), (1, 2, 3)).save(buf, "PNG")
    return buf.getvalue()


def test_qr_login_returns_the_seed_fields(fake):
    status = login(fake)
    assert status["status"] == "confirmed"
    assert status["ilink_user_id"] == "wxid_person@im.wechat"
    assert status["bot_token"] and status["ilink_bot_id"] and status["baseurl"] == fake.url
    [req] = [r for r in fake.requests if r["path"].endswith("get_bot_qrcode")]
    assert req["query"]["bot_type"] == "3"


def test_expired_qr(fake):
    qr = clawbot.get_bot_qrcode(fake.url)
    fake.expire(qr["qrcode"])
    assert clawbot.get_qrcode_status(fake.url, qr["qrcode"])["status"] == "expired"


def test_long_poll_keeps_the_cursor(fake):
    token = login(fake)["bot_token"]
    msgs, cursor = clawbot.get_updates(fake.url, token, "", timeout=2)
    assert msgs == [] and cursor == "0"
    fake.user_says(token, "无语")
    msgs, cursor = clawbot.get_updates(fake.url, token, cursor, timeout=2)
    [message] = [clawbot.parse_message(m) for m in msgs]
    assert message.text == "无语" and message.context_token and message.from_user_id == "wxid_person@im.wechat"
    msgs, cursor2 = clawbot.get_updates(fake.url, token, cursor, timeout=2)
    assert msgs == [] and cursor2 == cursor
    # every request carried the iLink headers
    assert all(
        r["headers"].get("AuthorizationType") == "ilink_bot_token" for r in fake.requests if "getupdates" in r["path"]
    )


def test_image_send_through_the_cdn(fake):
    token = login(fake)["bot_token"]
    message = clawbot.parse_message(fake.user_says(token, "hi"))
    item = clawbot.upload_image(fake.url, token, message.from_user_id, png(), cdn_url=fake.cdn_url)
    assert item["image_item"]["mid_size"] == clawbot.padded_size(len(png()))
    clawbot.send_message(fake.url, token, message.from_user_id, message.context_token, item)
    [sent] = fake.sent
    param = sent["item_list"][0]["image_item"]["media"]["encrypt_query_param"]
    assert fake.images[param] == png()
    assert clawbot.aes_key_of(item["image_item"]["media"]["aes_key"]) and len(fake.uploads) == 1


def test_window_quota_and_expiry_are_failed_deliveries(fake):
    token = login(fake)["bot_token"]
    message = clawbot.parse_message(fake.user_says(token, "hi"))
    for i in range(10):
        clawbot.send_message(fake.url, token, message.from_user_id, message.context_token, clawbot.text_item(str(i)))
    with pytest.raises(PlatformError) as err:
        clawbot.send_message(fake.url, token, message.from_user_id, message.context_token, clawbot.text_item("11"))
    assert (err.value.code, err.value.platform_code) == ("channel_window_closed", -2)
    message = clawbot.parse_message(fake.user_says(token, "again"))
    clawbot.send_message(fake.url, token, message.from_user_id, message.context_token, clawbot.text_item("ok"))
    fake.advance(25 * 3600)
    with pytest.raises(PlatformError) as err:
        clawbot.send_message(fake.url, token, message.from_user_id, message.context_token, clawbot.text_item("late"))
    assert err.value.code == "channel_window_closed"
    assert len(fake.sent) == 11


def test_session_expiry_and_other_rets(fake):
    token = login(fake)["bot_token"]
    message = clawbot.parse_message(fake.user_says(token, "hi"))
    fake.fail_next(-5)
    with pytest.raises(PlatformError) as err:
        clawbot.send_message(fake.url, token, message.from_user_id, message.context_token, clawbot.text_item("x"))
    assert (err.value.code, err.value.platform_code) == ("clawbot_send_failed", -5)
    fake.expire_session(token)
    with pytest.raises(PlatformError) as err:
        clawbot.get_updates(fake.url, token, "0", timeout=2)
    assert err.value.code == "clawbot_session_expired"


def test_inbound_image_is_downloaded_and_decrypted(fake):
    token = login(fake)["bot_token"]
    message = clawbot.parse_message(fake.user_says(token, "", image=png()))
    assert clawbot.download_image(message.images[0], cdn_url=fake.cdn_url) == png()


def test_window_state():
    now = datetime(2026, 12, 1, tzinfo=UTC)
    assert clawbot.window_state(None, 0, now) == "no_context"
    assert clawbot.window_state((now - timedelta(hours=1)).isoformat(), 3, now) == "open"
    assert clawbot.window_state((now - timedelta(hours=1)).isoformat(), 10, now) == "quota"
    assert clawbot.window_state((now - timedelta(hours=21)).isoformat(), 0, now) == "expired"
