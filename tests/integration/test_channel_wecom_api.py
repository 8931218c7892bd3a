"""The WeCom protocol layer (``mewdex.channels.wecom.api``) against the fake WeCom server: tokens,
uploads, sends, image conversion and WeCom's error codes, over real HTTP through the egress guard."""

from __future__ import annotations

import io
import json

import pytest
from PIL import Image

from fakes.wecom_server import FakeWeCom, message_callback
from mewdex.channels.platform import PlatformError
from mewdex.channels.wecom import api as wecom


@pytest.fixture
def fake(monkeypatch):
    from mewdex.config import get_settings

    with FakeWeCom(members=("zhangsan",)) as server:
        monkeypatch.setenv("MEWDEX_EGRESS_ALLOW_HOSTS", json.dumps([server.host]))
        get_settings.cache_clear()
        yield server
    get_settings.cache_clear()


def app_of(fake: FakeWeCom, secret: str | None = None) -> wecom.WeComApp:
    return wecom.WeComApp(
        corp_id=fake.corp_id, agent_id=1000002, secret=secret or fake.secret, token="cbtoken",
        encoding_aes_key="jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C", base_url=fake.url,
    )  # fmt: skip


def png(size=(40, 30), color=(200, 10, 10)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def test_send_image_uploads_once_and_sends_the_media(fake):
    app = app_of(fake)
    wecom.forget_token(app)
    result = wecom.send_image(app, "zhangsan", png())
    assert result["msgtype"] == "image"
    [sent] = fake.sent
    assert sent == {
        "touser": "zhangsan",
        "msgtype": "image",
        "agentid": 1000002,
        "image": {"media_id": result["media_id"]},
    }
    assert fake.uploads[result["media_id"]]["data"] == png()
    # the token is cached: one gettoken for both calls
    wecom.send_text(app, "zhangsan", "hi")
    assert len(fake.calls("/cgi-bin/gettoken")) == 1


def test_an_expired_token_is_fetched_again_once(fake):
    app = app_of(fake)
    wecom.forget_token(app)
    wecom.send_text(app, "zhangsan", "one")
    fake.expire_tokens()
    wecom.send_text(app, "zhangsan", "two")
    assert len(fake.calls("/cgi-bin/gettoken")) == 2
    assert [m["text"]["content"] for m in fake.sent] == ["one", "two"]


def test_untrusted_ip_is_a_clear_error(fake):
    app = app_of(fake)
    wecom.forget_token(app)
    fake.inject(60020, "not allow to access from your ip, hint: [1700000000_1_2], from ip: 203.0.113.9")
    with pytest.raises(PlatformError) as err:
        wecom.send_text(app, "zhangsan", "hi")
    assert err.value.code == "wecom_ip_not_trusted"
    assert err.value.platform_code == 60020
    assert "trusted IPs" in err.value.message
    assert not err.value.retryable
    assert fake.sent == []


def test_wrong_secret_and_unknown_member(fake):
    bad = app_of(fake, secret="wrong")
    wecom.forget_token(bad)
    with pytest.raises(PlatformError) as err:
        wecom.send_text(bad, "zhangsan", "hi")
    assert err.value.code == "wecom_credentials_invalid"
    assert "wrong" not in err.value.message
    app = app_of(fake)
    with pytest.raises(PlatformError) as err:
        wecom.send_text(app, "lisi", "hi")
    assert (err.value.code, err.value.platform_code) == ("wecom_user_invalid", 81013)


def test_busy_is_retryable(fake):
    app = app_of(fake)
    fake.inject(-1, "system busy")
    with pytest.raises(PlatformError) as err:
        wecom.send_text(app, "zhangsan", "hi")
    assert err.value.retryable


def test_images_wecom_cannot_show_are_converted():
    webp = io.BytesIO()
    Image.new("RGBA", (50, 50), (0, 128, 0, 128)).save(webp, "WEBP")
    prepared = wecom.prepare_image(webp.getvalue())
    assert (prepared.media_type, prepared.content_type) == ("image", "image/png")
    assert Image.open(io.BytesIO(prepared.data)).size == (50, 50)
    frames = [Image.new("RGB", (30, 30), c) for c in ((255, 0, 0), (0, 0, 255))]
    gif = io.BytesIO()
    frames[0].save(gif, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    assert wecom.prepare_image(gif.getvalue()).media_type == "file"
    still = io.BytesIO()
    frames[0].save(still, "GIF")
    assert wecom.prepare_image(still.getvalue()).content_type == "image/png"
    # a PNG over the size limit is scaled down until it fits
    import os

    noise = Image.frombytes("RGB", (1200, 1200), os.urandom(1200 * 1200 * 3))
    big = io.BytesIO()
    noise.save(big, "PNG")
    assert len(big.getvalue()) > wecom.IMAGE_MAX_BYTES
    prepared = wecom.prepare_image(big.getvalue())
    assert len(prepared.data) <= wecom.IMAGE_MAX_BYTES


def test_parse_callback_reads_a_signed_encrypted_message(fake):
    app = app_of(fake)
    query, body = message_callback(app.crypt(), "zhangsan", "无语", msg_id="123")
    message = wecom.parse_callback(app, query["msg_signature"], query["timestamp"], query["nonce"], body)
    assert (message.from_user, message.msg_type, message.content, message.msg_id) == ("zhangsan", "text", "无语", "123")


def test_download_media_fetches_a_members_file_by_its_media_id(fake):
    """``media/get``: the bytes of an inbound image's MediaId; a stale token is fetched again once;
    WeCom's JSON refusal (40007) and a file over the limit are errors, never bytes."""
    app = app_of(fake)
    data = png(color=(10, 200, 10))
    media_id = fake.member_file(data)
    assert wecom.download_media(app, media_id, 1 << 20) == data
    fake.expire_tokens()
    assert wecom.download_media(app, media_id, 1 << 20) == data
    with pytest.raises(PlatformError) as err:
        wecom.download_media(app, "3unknown", 1 << 20)
    assert (err.value.code, err.value.platform_code) == ("wecom_api_error", 40007)
    with pytest.raises(PlatformError) as err:
        wecom.download_media(app, media_id, len(data) - 1)
    assert err.value.code == "egress_too_large"
