"""Re-captioning from a chat (issue 44 item 3) in Telegram, against the fake Bot API: the owner's
``改字 新文字`` in reply to a meme the bot sent gets the re-captioned image back, nothing saved;
``/caption save …`` saves it as a new meme naming the original as its template and sends it; a
stranger's 改字 in a group does nothing. OneBot's: ``test_channels_onebot.py`` (re-caption)."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from channel_helpers import add_captioned_meme, bind_telegram, new_user_id, saved_memes
from conftest import drain_queue
from mewdex.db.models import ScopeContext

pytestmark = pytest.mark.usefixtures("quick_pacing")

SYSTEM = ScopeContext("__system__")


def run(sessions, account) -> None:
    from mewdex.channels.telegram import inbound as tg

    tg.poll_once(sessions, timeout=0)
    drain_queue(sessions, account.scope, SYSTEM, timeout=60)


def sent_meme(sessions, account, telegram, uid, meme_id) -> dict:
    """The bot sends ``meme_id`` to ``uid``; its sent message."""
    from mewdex.channels import delivery

    with sessions.begin() as session:
        delivery.send_meme(session, user_id=account.user_id, channel="telegram", meme_id=meme_id)
    drain_queue(sessions, account.scope, SYSTEM, timeout=60)
    return telegram.sent_to(uid)[-1]


def pixels(telegram, sent) -> Image.Image:
    return Image.open(io.BytesIO(telegram.files[sent["file_id"]])).convert("RGB")


def test_telegram_owner_recaptions_a_sent_meme_and_saves_on_asking(sessions, store, account, telegram):
    from mewdex.db.models import Meme

    uid = new_user_id()
    bind_telegram(sessions, account, uid)
    original_id = add_captioned_meme(sessions, store, account)
    original = sent_meme(sessions, account, telegram, uid, original_id)
    before = dict(saved_memes(sessions, account))

    telegram.user_message(uid, "改字 好的", reply_to=original["message"])
    run(sessions, account)
    answer = telegram.sent_to(uid)[-1]
    assert answer["method"] == "sendPhoto" and answer["uploaded"], answer
    assert answer["file_id"] != original["file_id"], "a new picture"
    assert pixels(telegram, answer).size == (200, 80)
    assert pixels(telegram, answer).tobytes() != pixels(telegram, original).tobytes()
    assert saved_memes(sessions, account) == before, "nothing saved"

    telegram.user_message(uid, "/caption save 世界", reply_to=original["message"])
    run(sessions, account)
    [new_sha] = set(saved_memes(sessions, account)) - set(before)
    answer = telegram.sent_to(uid)[-1]
    assert answer["method"] == "sendPhoto" and "已收进" in answer["caption"]  # in the chat's language
    with sessions.begin() as session:
        made = session.query(Meme).filter_by(scope_id=account.scope.scope_id, sha256=new_sha).one()
        assert made.provenance["template_id"] == original_id and made.provenance["caption"] == "世界"


def test_telegram_a_strangers_recaption_does_nothing(sessions, store, account, telegram):
    owner, stranger, group = new_user_id(), new_user_id(), -new_user_id()
    bind_telegram(sessions, account, owner)
    original = telegram.user_message(owner, "收", chat_id=group, chat_type="group", photo=_png())["message"]
    run(sessions, account)
    before, sent = dict(saved_memes(sessions, account)), len(telegram.sent_to(group))
    telegram.user_message(stranger, "改字 收 hi", chat_id=group, chat_type="group", reply_to=original)
    run(sessions, account)
    assert saved_memes(sessions, account) == before
    assert not [m for m in telegram.sent_to(group)[sent:] if m["method"] != "sendMessage"], "no picture"


def test_the_caption_command_is_parsed():
    from mewdex.channels.captioning import parse

    assert parse("改字 好的") == ("好的", False)
    assert parse("改字 收 好 的") == ("好 的", True)
    assert parse("/caption save new words") == ("new words", True)
    assert parse("/caption") == ("", False)
    assert parse("/captions please") is None and parse("收") is None and parse("hello") is None


def _png() -> bytes:
    from channel_helpers import image_bytes

    return image_bytes("png", seed=4401)
