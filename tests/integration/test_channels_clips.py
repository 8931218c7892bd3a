"""Clips and stickers sent to chats (issue 42 item 2): to Telegram a WebM video sticker goes with
``sendSticker`` (its caption after it as a text), an MP4 with ``sendAnimation`` and an AVIF as a PNG
photo; to QQ (OneBot) a clip goes as an animated GIF of its frames. Against the fake servers."""

from __future__ import annotations

import base64
import io
import json
import random

import pytest
from PIL import Image
from sqlalchemy import select

from channel_helpers import add_meme, bind_telegram, new_user_id
from clip_helpers import clip, still
from conftest import client_for, drain_queue
from fakes.onebot_client import FakeOneBotHTTP
from mewdex.db.models import ChannelBinding, ScopeContext

pytestmark = pytest.mark.usefixtures("quick_pacing")

SYSTEM = ScopeContext("__system__")


@pytest.fixture
def clips(sessions, store, account):
    """``{"webm", "mp4", "avif"}`` → meme id: a transparent VP9 sticker, an H.264 clip, an AVIF photo."""
    made = {
        "webm": clip("webm", "libvpx-vp9", "HI", frames=6, size=(96, 96), alpha=True),
        "mp4": clip("mp4", "libx264", "YO", frames=6, size=(96, 64)),
        "avif": still("avif", seed=7),
    }
    return {kind: add_meme(sessions, store, account.scope, f"clip {kind}", kind, data) for kind, data in made.items()}


def send(sessions, account, channel: str, meme_id: str, caption: str | None = None, timeout: float = 60) -> None:
    from mewdex.channels import delivery

    with sessions.begin() as session:
        delivery.send_meme(session, user_id=account.user_id, channel=channel, meme_id=meme_id, caption=caption)
    drain_queue(sessions, account.scope, SYSTEM, timeout=timeout)


def test_telegram_sends_a_webm_as_a_sticker_an_mp4_as_an_animation_an_avif_as_a_png(sessions, account, telegram, clips):
    uid = new_user_id()
    bind_telegram(sessions, account, uid)
    send(sessions, account, "telegram", clips["webm"], caption="a sticker")
    sticker, caption = telegram.sent_to(uid)[-2:]
    assert sticker["method"] == "sendSticker" and sticker["filename"] == "meme.webm" and sticker["uploaded"]
    assert telegram.files[sticker["file_id"]][:4] == b"\x1a\x45\xdf\xa3", "the WebM itself, uploaded"
    assert caption["method"] == "sendMessage" and caption["text"] == "a sticker"

    send(sessions, account, "telegram", clips["mp4"])
    animation = telegram.sent_to(uid)[-1]
    assert animation["method"] == "sendAnimation" and animation["filename"] == "meme.mp4"
    assert telegram.files[animation["file_id"]][4:8] == b"ftyp"

    send(sessions, account, "telegram", clips["avif"])
    photo = telegram.sent_to(uid)[-1]
    assert photo["method"] == "sendPhoto" and photo["filename"] == "meme.png"
    assert Image.open(io.BytesIO(telegram.files[photo["file_id"]])).format == "PNG"

    send(sessions, account, "telegram", clips["webm"])  # again: the cached sticker id, no upload
    again = telegram.sent_to(uid)[-1]
    assert again["method"] == "sendSticker" and again["file_id"] == sticker["file_id"] and not again["uploaded"]


def test_onebot_gets_a_clip_as_an_animated_gif(sessions, settings_env, account, clips):
    from mewdex.channels.onebot import setup as onebot_setup

    qq = random.randrange(10**9, 4 * 10**9)
    api = FakeOneBotHTTP(qq, token="")
    try:
        settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([api.host]))
        with client_for(account.scope) as client:
            bound = client.post(
                "/api/v1/channels/onebot",
                json={"mode": "http", "self_id": str(qq), "api_url": api.url, "owner_qq": "12345"},
            )
        assert bound.status_code == 201, bound.text
        api.token = bound.json()["access_token"]
        with sessions.begin() as session:  # as the bot's first signed event proves its number
            row = session.execute(
                select(ChannelBinding).where(
                    ChannelBinding.scope_id == account.scope.scope_id, ChannelBinding.channel == "onebot"
                )
            ).scalar_one()
            onebot_setup.attach(session, row, str(qq), connected=False)
        send(sessions, account, "onebot", clips["mp4"])
        [action] = api.actions
        [segment] = [s for s in action["params"]["message"] if s["type"] == "image"]
        data = base64.b64decode(segment["data"]["file"].removeprefix("base64://"))
        with Image.open(io.BytesIO(data)) as gif:
            assert gif.format == "GIF" and gif.n_frames == 6 and gif.size == (96, 64)
            assert gif.info.get("loop") == 0, "loops forever"
    finally:
        api.close()


def test_a_clip_as_a_gif_fits_the_gif_limits(monkeypatch):
    from mewdex.channels import base

    data = clip("webm", "libvpx-vp9", "BIG", frames=4, size=(640, 320))
    meme = base.MemeFile("m", data, ".webm", "0" * 64, "big")
    assert meme.animated and meme.clip
    with Image.open(io.BytesIO(meme.as_gif())) as gif:
        assert max(gif.size) == base.GIF_MAX_SIDE and gif.n_frames == 4
    monkeypatch.setattr(base, "GIF_MAX_BYTES", 200)  # never small enough: its first frame as a still
    with Image.open(io.BytesIO(meme.as_gif())) as fallback:
        assert fallback.format == "PNG"


def test_a_stickers_still_keeps_its_transparency():
    from mewdex.channels import base

    data = clip("webm", "libvpx-vp9", "HI", frames=3, size=(64, 64), alpha=True)
    with Image.open(io.BytesIO(base.MemeFile("m", data, ".webm", "0" * 64, "s").as_png())) as still_png:
        assert still_png.format == "PNG" and still_png.mode == "RGBA"
        assert still_png.getchannel("A").getextrema()[0] == 0, "the clear background stays clear"
