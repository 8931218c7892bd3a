"""Saving from a chat (issue 42 item 1) in Telegram, against the fake Bot API: the owner's 收 as a
caption and as a reply saves the meme through the upload path, a second 收 of the same file says it
is already there, an altered copy of a saved meme is saved and called its variant, a 收 replying to
a message without a file has nothing to save, a stranger's 收 saves nothing; an image alone still
finds similar memes, with a Save button; ``/autosave on`` saves what the owner sends without a word.
The other channels' saving tests are in their own files
(``test_channels_{onebot,discord,wecom,clawbot}.py``, "saving")."""

from __future__ import annotations

import io
import random
import time

import pytest
from PIL import Image, ImageDraw

from channel_helpers import bind_telegram, image_bytes, new_user_id, saved_memes
from channel_helpers import sha256 as sha
from conftest import drain_queue
from mewdex.db.models import ScopeContext

pytestmark = pytest.mark.usefixtures("quick_pacing")

SYSTEM = ScopeContext("__system__")


def count_of(sessions, account) -> int:
    return len(saved_memes(sessions, account))


# ------------------------------------------------------------------ Telegram


def tg_run(sessions, account) -> None:
    from mewdex.channels.telegram import inbound as tg

    tg.poll_once(sessions, timeout=0)
    drain_queue(sessions, account.scope, SYSTEM, timeout=120)


def texts(fake, chat) -> list[str]:
    return [m.get("text") or m.get("caption") or "" for m in fake.sent_to(chat)]


def test_telegram_owner_saves_by_caption_and_by_reply_and_a_repeat_is_already_there(sessions, account, telegram):
    uid = new_user_id()
    bind_telegram(sessions, account, uid)
    before = count_of(sessions, account)

    first = image_bytes("png", seed=4201)
    telegram.user_message(uid, "收", photo=first)  # the caption form
    tg_run(sessions, account)
    assert sha(first) in saved_memes(sessions, account)
    assert "约" in texts(telegram, uid)[-1] and "秒后可以搜到" in texts(telegram, uid)[-1]
    assert [c for c in telegram.calls if c["method"] == "getFile"], "fetched through the Bot API"

    second = image_bytes("png", seed=4202)
    original = telegram.user_message(uid, None, sticker=second)["message"]  # a sticker alone: no save yet
    tg_run(sessions, account)
    assert sha(second) not in saved_memes(sessions, account)
    telegram.user_message(uid, "save", reply_to=original)  # the reply form
    tg_run(sessions, account)
    assert sha(second) in saved_memes(sessions, account)
    assert texts(telegram, uid)[-1].startswith("Saved to your mewdex library")
    assert count_of(sessions, account) == before + 2

    telegram.user_message(uid, "/save", photo=first)  # the same file again
    tg_run(sessions, account)
    name = saved_memes(sessions, account)[sha(first)]
    assert texts(telegram, uid)[-1] == f"Already in your library: {name}"
    assert count_of(sessions, account) == before + 2


def test_telegram_a_strangers_save_in_a_group_saves_nothing(sessions, account, telegram):
    """Telegram binds a person, so someone else in the owner's group is nobody's: their 收 saves
    nothing anywhere and the bot stays quiet (a QQ guest's is told why: the OneBot test)."""
    owner, stranger, group = new_user_id(), new_user_id(), -new_user_id()
    bind_telegram(sessions, account, owner)
    before = count_of(sessions, account)
    data = image_bytes("png", seed=4203)
    telegram.user_message(stranger, "收", chat_id=group, chat_type="group", photo=data)
    tg_run(sessions, account)
    assert count_of(sessions, account) == before
    assert not telegram.sent_to(group)
    telegram.user_message(owner, "收", chat_id=group, chat_type="group", photo=data)  # the owner's own does
    tg_run(sessions, account)
    assert sha(data) in saved_memes(sessions, account)
    assert "秒后可以搜到" in texts(telegram, group)[-1]


def test_telegram_an_image_alone_finds_similar_with_a_save_button_that_saves(sessions, account, telegram):
    uid = new_user_id()
    bind_telegram(sessions, account, uid)
    data = image_bytes("png", seed=4204)
    telegram.user_message(uid, None, photo=data)
    tg_run(sessions, account)
    assert sha(data) not in saved_memes(sessions, account), "an image alone is a search, not a save"
    [answer] = [m for m in telegram.sent_to(uid) if m.get("reply_markup")]
    [[button]] = answer["reply_markup"]["inline_keyboard"]
    assert button["text"] == "Save" and button["callback_data"].startswith("save:")
    pressed = telegram.press(uid, answer, button["callback_data"])
    tg_run(sessions, account)
    assert sha(data) in saved_memes(sessions, account)
    assert telegram.answered_callbacks == [pressed["callback_query"]["id"]], "the button stops spinning"


def test_telegram_autosave_saves_every_image_the_owner_sends(sessions, account, telegram):
    from conftest import client_for

    uid = new_user_id()
    bind_telegram(sessions, account, uid)
    telegram.user_message(uid, "/autosave on")
    tg_run(sessions, account)
    assert "every image you send here is saved" in texts(telegram, uid)[-1]
    data = image_bytes("png", seed=4205)
    telegram.user_message(uid, None, photo=data)
    tg_run(sessions, account)
    assert sha(data) in saved_memes(sessions, account)

    with client_for(account.scope) as client:  # the same setting through the API
        off = client.put("/api/v1/channels/telegram/save-all", json={"save_all": False})
        assert off.status_code == 200 and off.json()["config"]["save_all"] is False, off.text
        assert client.put("/api/v1/channels/discord/save-all", json={"save_all": True}).status_code == 404
    later = image_bytes("png", seed=4206)
    telegram.user_message(uid, None, photo=later)
    tg_run(sessions, account)
    assert sha(later) not in saved_memes(sessions, account), "off: an image alone is a search again"


def drawn_image(seed: int, size: int = 96) -> bytes:
    """A PNG of a few coloured shapes: a picture with a perceptual hash of its own (flat pictures
    all hash alike)."""
    rng = random.Random(seed)
    image = Image.new("RGB", (size, size), tuple(rng.randrange(256) for _ in range(3)))
    draw = ImageDraw.Draw(image)
    for _ in range(6):
        x, y = rng.randrange(size), rng.randrange(size)
        box = (x, y, x + rng.randrange(10, size), y + rng.randrange(10, size))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=tuple(rng.randrange(256) for _ in range(3)))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def test_telegram_an_altered_copy_is_saved_as_a_variant_of_the_saved_meme(sessions, account, telegram):
    """A saved meme, then the same picture enlarged and re-encoded as JPEG (other bytes, a perceptual
    hash within the near-duplicate distance): saved, and the chat is told whose variant it looks
    like, in its language; a different picture is only saved."""
    uid = new_user_id()
    bind_telegram(sessions, account, uid)
    original = drawn_image(4210)
    telegram.user_message(uid, "收", photo=original)
    tg_run(sessions, account)  # processed: its perceptual hash is stored
    name = saved_memes(sessions, account)[sha(original)]

    picture = Image.open(io.BytesIO(original))
    out = io.BytesIO()
    picture.resize((120, 120), Image.Resampling.BICUBIC).save(out, "JPEG", quality=85)
    altered = out.getvalue()
    telegram.user_message(uid, "收", photo=altered)
    tg_run(sessions, account)
    assert sha(altered) in saved_memes(sessions, account), "a variant is a meme of its own"
    assert texts(telegram, uid)[-1].startswith(f"已收进你的 mewdex 表情库，像是「{name}」的另一个版本")
    other = drawn_image(4310)
    telegram.user_message(uid, "save", photo=other)
    tg_run(sessions, account)
    assert sha(other) in saved_memes(sessions, account)
    assert texts(telegram, uid)[-1].startswith("Saved to your mewdex library. It can be found")


def test_telegram_save_replying_to_a_message_without_a_file_has_nothing_to_save(sessions, account, telegram):
    """收 replying to a text-only message saves nothing, not even the person's last image (the
    "last image" rule is for a bare 收 where replies carry no files), and says why in the chat's
    language."""
    uid = new_user_id()
    bind_telegram(sessions, account, uid)
    recent = image_bytes("png", seed=4207)
    telegram.user_message(uid, None, photo=recent)  # an image alone: a search, remembered
    tg_run(sessions, account)
    words = {"message_id": 987654, "date": int(time.time()), "chat": {"id": uid, "type": "private"},
             "from": {"id": uid, "is_bot": False, "first_name": "Tester"}, "text": "just words"}  # fmt: skip
    before = count_of(sessions, account)
    telegram.user_message(uid, "收", reply_to=words)
    tg_run(sessions, account)
    assert texts(telegram, uid)[-1] == "没有可收藏的：把“收”作为图片的说明发送，或回复一张图片“收”。"
    telegram.user_message(uid, "save", reply_to=words)
    tg_run(sessions, account)
    assert texts(telegram, uid)[-1] == (
        "Nothing to save: send “save” as the caption of an image, or as a reply to one."
    )
    assert count_of(sessions, account) == before and sha(recent) not in saved_memes(sessions, account)
