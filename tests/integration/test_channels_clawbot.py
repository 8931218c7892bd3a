"""Channels (issue 17), WeChat ClawBot against the fake iLink server: bind by scanning the QR shown
by the API, long polling with the cursor kept in the binding, a message answered with a meme through
the CDN upload (decrypted and MD5-checked by the fake), the 24-hour / 10-message window refusing
proactive sends with ``channel_window_closed``, a platform ``ret`` in the delivery log, revoke."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from conftest import client_for, drain_queue
from fakes.clawbot_server import FakeClawBot
from mewdex.db.models import ChannelBinding, ChannelDelivery, Meme, ScopeContext, User

pytestmark = pytest.mark.usefixtures("quick_pacing")  # sends to one chat 0.05 s apart (channel_helpers)

SYSTEM = ScopeContext("__system__")
PERSON = "o9cq80_person@im.wechat"


def drain(sessions, acct) -> None:
    drain_queue(sessions, acct.scope, SYSTEM, timeout=120)


@pytest.fixture
def fake(settings_env):
    with FakeClawBot(long_poll_seconds=0.3) as server:
        settings_env(
            MEWDEX_CLAWBOT_API_URL=server.url,
            MEWDEX_CLAWBOT_CDN_URL=server.cdn_url,
            MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([server.host]),
        )
        yield server


def poll(sessions) -> int:
    from mewdex.channels.clawbot import inbound as clawbot

    return clawbot.poll_once(sessions, 1)


def binding_row(sessions, acct) -> ChannelBinding:
    with sessions.begin() as session:
        return session.execute(
            select(ChannelBinding).where(
                ChannelBinding.scope_id == acct.scope.scope_id, ChannelBinding.channel == "clawbot"
            )
        ).scalar_one()


def scan_and_bind(acct, fake) -> str:
    """The person scans the QR code the page shows and confirms; returns the bot token issued."""
    with client_for(acct.scope) as client:
        qr = client.post("/api/v1/channels/clawbot/login")
        assert qr.status_code == 200, qr.text
        qr = qr.json()
        assert qr["qr_svg"].startswith("<svg") and qr["qrcode_img_content"].startswith("https://")
        status = lambda: client.get(f"/api/v1/channels/clawbot/login/{qr['qrcode']}").json()  # noqa: E731
        assert status()["status"] == "wait"
        fake.scan(qr["qrcode"])
        assert status()["status"] == "scaned"
        token = fake.confirm(qr["qrcode"], PERSON)
        confirmed = status()
    assert confirmed["status"] == "confirmed"
    binding = confirmed["binding"]
    assert binding["identity"] == PERSON and binding["config"]["user_im_id"] == PERSON
    assert token not in json.dumps(confirmed), "the bot token is never shown"
    assert binding["config"]["pending_confirmation"] is True, "the chat has yet to confirm"
    return token


def confirm_in_chat(sessions, acct, fake, token: str) -> None:
    """The person writes to the bot, is asked to confirm the link, answers YES."""
    fake.user_says(token, "hi")
    poll(sessions)
    drain(sessions, acct)
    assert "Reply YES" in fake.sent[-1]["item_list"][0]["text_item"]["text"]
    fake.user_says(token, "YES")
    poll(sessions)
    drain(sessions, acct)
    assert "Linked" in fake.sent[-1]["item_list"][0]["text_item"]["text"]
    assert not binding_row(sessions, acct).config["pending_confirmation"]


def test_bind_message_meme_revoke(sessions, account, fake):
    token = scan_and_bind(account, fake)
    row = binding_row(sessions, account)
    assert token not in json.dumps(row.config), "sealed at rest"
    confirm_in_chat(sessions, account, fake, token)
    before = len(fake.sent)

    fake.user_says(token, "cat")
    assert poll(sessions) == 1
    assert binding_row(sessions, account).config["get_updates_buf"] == "3", "the cursor is kept in the binding"
    assert poll(sessions) == 0, "a message is taken in once"
    drain(sessions, account)
    images = [m for m in fake.sent[before:] if m["item_list"][0]["type"] == 2]
    texts = [m for m in fake.sent[before:] if m["item_list"][0]["type"] == 1]
    assert len(images) == 3 and texts and "cat" in texts[0]["item_list"][0]["text_item"]["text"]
    with sessions.begin() as session:
        originals = {
            m.sha256 for m in session.execute(select(Meme).where(Meme.scope_id == account.scope.scope_id)).scalars()
        }
    for message in images:
        param = message["item_list"][0]["image_item"]["media"]["encrypt_query_param"]
        assert hashlib.sha256(fake.images[param]).hexdigest() in originals
        assert message["to_user_id"] == PERSON and message["context_token"]

    with client_for(account.scope) as client:
        log = client.get("/api/v1/channels/deliveries", params={"channel": "clawbot"}).json()["deliveries"]
        assert log and all(d["status"] == "sent" for d in log)
        assert client.delete("/api/v1/channels/clawbot").json()["status"] == "revoked"
    sent = len(fake.sent)
    fake.user_says(token, "cat")
    assert poll(sessions) == 0, "a revoked binding takes nothing in"
    drain(sessions, account)
    assert len(fake.sent) == sent


def test_window_refuses_proactive_sends(sessions, account, fake):
    from mewdex.channels import bindings, delivery

    token = scan_and_bind(account, fake)
    confirm_in_chat(sessions, account, fake, token)
    with sessions.begin() as session:  # as if the person had not written since (no context token)
        binding = bindings.get(session, account.scope.scope_id, "clawbot", lock=True)
        bindings.update_config(session, binding, {"latest_context_token": None, "context_token_at": None})
    fake.sent.clear()

    def send(meme: str = "cat one") -> ChannelDelivery:
        with sessions.begin() as session:
            queued = delivery.send_meme(
                session, user_id=account.user_id, channel="clawbot", meme_id=account.memes[meme]
            )
            delivery_id = queued.delivery_id
        drain(sessions, account)
        with sessions.begin() as session:
            return session.get(ChannelDelivery, delivery_id)

    row = send()  # the person never wrote: closed
    assert (row.status, row.error_code, row.platform_code) == ("failed", "channel_window_closed", "no_context")
    assert fake.sent == []

    fake.user_says(token, "hi")
    poll(sessions)
    drain(sessions, account)  # the answer: 3 memes and a caption = 4 of the 10 messages
    used = len(fake.sent)
    assert binding_row(sessions, account).config["sends_since_ctx"] == used
    while len(fake.sent) < 10:
        assert send().status == "sent"
    row = send()
    assert (row.status, row.error_code, row.platform_code) == ("failed", "channel_window_closed", "quota")
    assert "send it a message" in row.platform_error and len(fake.sent) == 10

    fake.user_says(token, "again")  # writing reopens the window
    poll(sessions)
    drain(sessions, account)
    assert send().status == "sent"
    with sessions.begin() as session:  # 21 hours later (mewdex's margin under WeChat's 24 h)
        binding = bindings.get(session, account.scope.scope_id, "clawbot", lock=True)
        bindings.update_config(
            session, binding, {"context_token_at": (datetime.now(UTC) - timedelta(hours=21)).isoformat()}
        )
    sent = len(fake.sent)
    row = send()
    assert (row.error_code, row.platform_code) == ("channel_window_closed", "expired") and len(fake.sent) == sent
    assert row.platform_error.startswith("more than 20 hours since you last wrote")
    with sessions.begin() as session:  # the refusal is worded in the account's language
        session.get(User, account.user_id).language = "zh"
    try:
        row = send()
        assert row.platform_code == "expired" and "已超过 20 小时" in row.platform_error and len(fake.sent) == sent
    finally:
        with sessions.begin() as session:
            session.get(User, account.user_id).language = None


def test_platform_refusals_are_failed_deliveries(sessions, account, fake):
    from mewdex.channels import delivery

    token = scan_and_bind(account, fake)
    confirm_in_chat(sessions, account, fake, token)
    fake.advance(25 * 3600)  # WeChat's own clock says the context expired: ret -2, never a silent success
    with sessions.begin() as session:
        delivery_id = delivery.send_text(session, user_id=account.user_id, channel="clawbot", text="late").delivery_id
    drain(sessions, account)
    with sessions.begin() as session:
        row = session.get(ChannelDelivery, delivery_id)
        assert (row.status, row.error_code, row.platform_code) == ("failed", "channel_window_closed", "-2")

    fake.user_says(token, "hi again")
    poll(sessions)
    drain(sessions, account)
    fake.expire_session(token)
    assert poll(sessions) == 0
    assert binding_row(sessions, account).config["poll_error"] == "clawbot_session_expired"
    with sessions.begin() as session:
        delivery_id = delivery.send_text(session, user_id=account.user_id, channel="clawbot", text="x").delivery_id
    drain(sessions, account)
    with sessions.begin() as session:
        row = session.get(ChannelDelivery, delivery_id)
        assert (row.status, row.error_code, row.platform_code) == ("failed", "clawbot_session_expired", "-14")


def test_expired_qr(account, fake):
    with client_for(account.scope) as client:
        qr = client.post("/api/v1/channels/clawbot/login").json()
        fake.expire(qr["qrcode"])
        answer = client.get(f"/api/v1/channels/clawbot/login/{qr['qrcode']}").json()
        assert answer == {"status": "expired", "binding": None}
        assert client.get("/api/v1/channels").json()["bindings"] == []


def test_a_login_answers_only_the_account_that_started_it(sessions, account, fake):
    """A QR code id is not a credential: another account polling it gets 404 and iLink is not asked;
    a finished login cannot be completed a second time."""
    from channel_helpers import new_scope

    other = new_scope(sessions, "t-ch-other")
    with client_for(account.scope) as client:
        qr = client.post("/api/v1/channels/clawbot/login").json()
    fake.scan(qr["qrcode"])
    fake.confirm(qr["qrcode"], PERSON)
    with client_for(other) as intruder:
        stolen = intruder.get(f"/api/v1/channels/clawbot/login/{qr['qrcode']}")
        assert stolen.status_code == 404 and stolen.json()["error"]["code"] == "not_found"
        assert intruder.get("/api/v1/channels/clawbot/login/invented").status_code == 404
        assert intruder.get("/api/v1/channels").json()["bindings"] == []
    with client_for(account.scope) as client:
        assert client.get(f"/api/v1/channels/clawbot/login/{qr['qrcode']}").json()["status"] == "confirmed"
        assert client.get(f"/api/v1/channels/clawbot/login/{qr['qrcode']}").status_code == 404


def test_a_long_poll_that_times_out_is_an_empty_batch_and_keeps_the_cursor(fake):
    """The poll's timeout is told by egress's timeout code (``egress_timeout``), not by the text of
    the error: an unanswered long poll is no news, the cursor unchanged."""
    import time

    from mewdex.channels.clawbot import api as clawbot

    token = "1f2e3d@im.bot:timeout-test"
    fake.tokens[token] = {"bot_id": "1f2e3d@im.bot", "user_id": PERSON, "expired": False}
    fake.long_poll_seconds = 8.0  # holds past the client's read timeout (timeout + 5 s)
    started = time.monotonic()
    assert clawbot.get_updates(fake.url, token, "5", timeout=0.3) == ([], "5")
    assert 5.0 <= time.monotonic() - started < 8.0
    fake.long_poll_seconds = 0.3  # answered in time: an empty batch too, not an error
    assert clawbot.get_updates(fake.url, token, "5", timeout=2.0) == ([], "5")


# ------------------------------------------------------------------ saving from the chat (issue 42)


def test_clawbot_save_takes_the_last_image_sent_and_a_repeat_is_already_there(sessions, account, fake):
    """ClawBot's replies carry no media: 收 saves the last image the person sent within ten minutes
    (downloaded and decrypted from the CDN), into the upload path; the same image again is 已有同款."""
    from channel_helpers import image_bytes, saved_memes, sha256

    token = scan_and_bind(account, fake)
    confirm_in_chat(sessions, account, fake, token)
    data = image_bytes("png", seed=4601)

    def said() -> str:
        return [m for m in fake.sent if m["item_list"][0]["type"] == 1][-1]["item_list"][0]["text_item"]["text"]

    def says(text: str = "", image: bytes | None = None) -> None:
        fake.user_says(token, text, image=image)
        poll(sessions)
        drain(sessions, account)

    says(image=data)  # an image alone: similar memes, nothing saved
    assert sha256(data) not in saved_memes(sessions, account)
    says("收")
    assert sha256(data) in saved_memes(sessions, account) and "秒后可以搜到" in said()
    count = len(saved_memes(sessions, account))
    says("收", image=data)  # the caption form, the same file again
    assert said() == f"已有同款：{saved_memes(sessions, account)[sha256(data)]}"
    assert len(saved_memes(sessions, account)) == count


def test_clawbot_a_message_from_another_wechat_user_saves_nothing(sessions, account, fake):
    """A ClawBot bot is the 1:1 bot of the person who scanned it: iLink delivers only their messages.
    Should another user id's 收 (with an image) reach the poller anyway, it is not the owner's: not
    taken in, nothing saved, nothing said; the owner's own 收 after it still saves."""
    from channel_helpers import image_bytes, saved_memes, sha256

    token = scan_and_bind(account, fake)
    confirm_in_chat(sessions, account, fake, token)
    data = image_bytes("png", seed=4602)
    said_before = len(fake.sent)
    fake.user_says(token, "收", image=data, from_user="o9cq80_stranger@im.wechat")
    assert poll(sessions) == 0, "not attributed to the owner"
    drain(sessions, account)
    assert sha256(data) not in saved_memes(sessions, account) and len(fake.sent) == said_before
    fake.user_says(token, "收", image=data)  # the same from the owner
    assert poll(sessions) == 1
    drain(sessions, account)
    assert sha256(data) in saved_memes(sessions, account)
