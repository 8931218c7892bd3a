"""Channels (issue 17), WeCom against the fake WeCom server: the admin sets up the app, WeCom
verifies the callback URL, a member binds by sending a one-time code, sends a message and gets a
meme back as image media (a GIF as a file), a platform error (60020) surfaces in the delivery log,
and revoking stops both directions."""

from __future__ import annotations

import base64
import json
import os

import pytest
from sqlalchemy import select

from conftest import app_for, drain_queue
from fakes.wecom_server import FakeWeCom, message_callback, verification_query
from mewdex.channels.wecom.crypto import WXBizMsgCrypt
from mewdex.db.models import ChannelBinding, ChannelDelivery, ScopeContext

pytestmark = pytest.mark.usefixtures("quick_pacing")  # sends to one chat 0.05 s apart (channel_helpers)

SYSTEM = ScopeContext("__system__")
MEMBER = "zhangsan"


def drain(sessions, acct) -> None:
    drain_queue(sessions, acct.scope, SYSTEM, timeout=120)


def client(scope, admin: bool = False):
    from fastapi.testclient import TestClient

    from conftest import LOCAL_CLIENT
    from mewdex.web.deps import require_admin

    app = app_for(scope)
    if admin:
        app.dependency_overrides[require_admin] = lambda: None
    return TestClient(app, **LOCAL_CLIENT, raise_server_exceptions=False)


@pytest.fixture
def wecom(settings_env, sessions):
    """The fake WeCom and the app set up through the admin API; yields ``(fake, crypt)``."""
    from mewdex.channels.wecom import setup as wc
    from mewdex.platform import instance

    aes_key = base64.b64encode(os.urandom(32)).decode()[:43]
    with FakeWeCom(members=(MEMBER,)) as fake:
        settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([fake.host]))
        with client(ScopeContext("local"), admin=True) as c:
            r = c.put("/api/v1/channels/wecom/app", json={
                "corp_id": fake.corp_id, "agent_id": 1000002, "secret": fake.secret, "token": "cbToken42",
                "encoding_aes_key": aes_key, "base_url": fake.url,
            })  # fmt: skip
            assert r.status_code == 200, r.text
            status = r.json()
            assert status["configured"] and status["callback_url"].endswith("/channels/wecom/callback")
            assert fake.secret not in r.text and aes_key not in r.text and "cbToken42" not in r.text
        with sessions.begin() as session:  # sealed at rest
            stored = json.dumps(instance.get_setting(session, wc.APP_SETTING))
            assert fake.secret not in stored and aes_key not in stored
        yield fake, WXBizMsgCrypt("cbToken42", aes_key, fake.corp_id)
    with sessions.begin() as session:
        from sqlalchemy import text

        session.execute(text("DELETE FROM platform_settings WHERE key = :k"), {"k": wc.APP_SETTING})


def post_message(crypt, text: str, msg_id: str | None = None, from_user: str = MEMBER) -> None:
    query, body = message_callback(crypt, from_user, text, msg_id=msg_id)
    with client(None) as c:
        r = c.post("/channels/wecom/callback", params=query, content=body)
    assert r.status_code == 200 and r.text == "", r.text


def bind(sessions, acct, crypt) -> None:
    with client(acct.scope) as c:
        r = c.post("/api/v1/channels/wecom/link")
    assert r.status_code == 200, r.text
    post_message(crypt, f"bind {r.json()['code']}")
    drain(sessions, acct)
    post_message(crypt, "YES")  # the chat confirms the link it was asked about
    drain(sessions, acct)


def test_callback_url_verification(wecom):
    fake, crypt = wecom
    query, echo = verification_query(crypt)
    with client(None) as c:
        r = c.get("/channels/wecom/callback", params=query)
        assert r.status_code == 200 and r.text == echo
        bad = c.get("/channels/wecom/callback", params={**query, "msg_signature": "0" * 40})
        assert bad.status_code == 401 and bad.json()["error"]["code"] == "channel_webhook_secret_invalid"
        forged = message_callback(WXBizMsgCrypt("otherToken", base64.b64encode(os.urandom(32)).decode()[:43],
                                                fake.corp_id), MEMBER, "hi")  # fmt: skip
        assert c.post("/channels/wecom/callback", params=forged[0], content=forged[1]).status_code == 401


def test_bind_message_meme_revoke(sessions, account, wecom):
    fake, crypt = wecom
    bind(sessions, account, crypt)
    assert "Linked" in fake.sent[-1]["text"]["content"]
    with sessions.begin() as session:
        row = session.execute(
            select(ChannelBinding).where(ChannelBinding.scope_id == account.scope.scope_id)
        ).scalar_one()
        assert (row.channel, row.status, row.identity) == ("wecom", "active", MEMBER)
        assert row.config["wecom_userid"] == MEMBER and row.config["chat_task_id"]

    before = len(fake.sent)
    post_message(crypt, "cat", msg_id="1001")
    drain(sessions, account)
    sent = fake.sent[before:]
    images = [m for m in sent if m["msgtype"] == "image"]
    assert len(images) == 3 and all(m["touser"] == MEMBER and m["agentid"] == 1000002 for m in images)
    for message in images:
        upload = fake.uploads[message["image"]["media_id"]]
        assert upload["type"] == "image" and upload["data"][:8] == b"\x89PNG\r\n\x1a\n"
    assert any(m["msgtype"] == "text" and "cat" in m["text"]["content"] for m in sent), "the assistant's text follows"

    post_message(crypt, "dancing cat gif", msg_id="1002")
    drain(sessions, account)
    assert any(m["msgtype"] == "file" for m in fake.sent), "an animated GIF goes as a file"

    # The same meme again reuses its cached media_id (uploaded once).
    uploads = len(fake.uploads)
    with sessions.begin() as session:
        from mewdex.channels import delivery

        delivery.send_meme(session, user_id=account.user_id, channel="wecom", meme_id=account.memes["cat one"])
    drain(sessions, account)
    assert len(fake.uploads) == uploads and fake.sent[-1]["msgtype"] == "image"

    with client(account.scope) as c:
        log = c.get("/api/v1/channels/deliveries", params={"channel": "wecom"}).json()["deliveries"]
        assert log and all(d["status"] == "sent" for d in log)
        assert c.delete("/api/v1/channels/wecom").json()["status"] == "revoked"

    # Inbound stops at once: the member is unbound again and gets only the how-to-bind answer.
    before = len(fake.sent)
    post_message(crypt, "cat", msg_id="1003")
    drain(sessions, account)
    after = fake.sent[before:]
    assert [m["msgtype"] for m in after] == ["text"] and "not linked" in after[0]["text"]["content"]


def test_untrusted_ip_surfaces_in_the_delivery_log(sessions, account, wecom):
    from mewdex.channels import delivery

    fake, crypt = wecom
    bind(sessions, account, crypt)
    fake.inject(60020, "not allow to access from your ip, hint: [1764570000_9], from ip: 203.0.113.7")
    with sessions.begin() as session:
        queued = delivery.send_meme(session, user_id=account.user_id, channel="wecom", meme_id=account.memes["cat two"])
        delivery_id = queued.delivery_id
    drain(sessions, account)
    with sessions.begin() as session:
        row = session.get(ChannelDelivery, delivery_id)
        assert row.status == "failed" and row.attempts == 1, "60020 is not retried: the admin must act"
        assert (row.error_code, row.platform_code) == ("wecom_ip_not_trusted", "60020")
        assert "203.0.113.7" in row.platform_error
    with client(account.scope) as c:
        [shown] = [d for d in c.get("/api/v1/channels/deliveries").json()["deliveries"] if d["id"] == str(delivery_id)]
        assert shown["error_code"] == "wecom_ip_not_trusted" and shown["platform_code"] == "60020"


def test_a_repeated_callback_is_answered_once(sessions, account, wecom):
    fake, crypt = wecom
    bind(sessions, account, crypt)
    before = len(fake.sent)
    post_message(crypt, "slacking off", msg_id="2001")
    post_message(crypt, "slacking off", msg_id="2001")  # WeCom's retry after 5 s
    drain(sessions, account)
    from uuid import UUID

    from mewdex.db.models import Conversation

    with sessions.begin() as session:
        row = session.execute(
            select(ChannelBinding).where(ChannelBinding.scope_id == account.scope.scope_id)
        ).scalar_one()
        conversation = session.get(Conversation, UUID(row.config["chat_task_id"]))
        assert conversation.next_message_idx == 2, "one question, one answer"
    assert [m for m in fake.sent[before:] if m["msgtype"] == "image"]


def test_admin_only_and_link_needs_the_app(auth_app):
    alice, admin = auth_app.new("alice"), auth_app.new("adm", admin=True)
    body = {"corp_id": "ww1", "agent_id": 1, "secret": "s", "token": "t", "encoding_aes_key": "short"}
    r = alice.client.put("/api/v1/channels/wecom/app", headers={"X-CSRF-Token": alice.csrf}, json=body)
    assert r.status_code == 404, "the app is the admin's"
    r = alice.client.post("/api/v1/channels/wecom/link", headers={"X-CSRF-Token": alice.csrf})
    assert r.status_code == 409 and r.json()["error"]["code"] == "channel_not_configured"
    r = admin.client.put("/api/v1/channels/wecom/app", headers={"X-CSRF-Token": admin.csrf}, json=body)
    assert r.status_code == 422 and r.json()["error"]["code"] == "channel_config_invalid"
    assert admin.client.get("/api/v1/channels/wecom/app").json()["configured"] is False


def test_channels_page_offers_qq_wecom_and_wechat(account):
    from conftest import client_for

    with client_for(account.scope) as c:
        page = c.get("/settings/channels")
        assert page.status_code == 200
        for marker in (
            'data-channel-form="onebot-bind"',
            'data-action="clawbot-login"',
            "wecom-admin",
            "channel_card.js",
        ):
            assert marker in page.text, marker
        assert "连接 QQ 机器人" in c.get("/settings/channels", headers={"Accept-Language": "zh"}).text


def conversation_length(sessions, acct) -> int:
    from uuid import UUID

    from mewdex.db.models import Conversation

    with sessions.begin() as session:
        row = session.execute(select(ChannelBinding).where(ChannelBinding.scope_id == acct.scope.scope_id)).scalar_one()
        return session.get(Conversation, UUID(row.config["chat_task_id"])).next_message_idx


def test_replay_window_and_signature_bytes(sessions, account, wecom):
    """A captured callback sent again after its first task ended is taken in once; one more than 5
    minutes old is refused; a msg_signature with characters outside ASCII is a 401, not a 500."""
    import time

    fake, crypt = wecom
    with client(account.scope) as c:  # one app for the whole test (each start-up costs seconds)
        for text in (f"bind {c.post('/api/v1/channels/wecom/link').json()['code']}", "YES"):
            query, body = message_callback(crypt, MEMBER, text)
            assert c.post("/channels/wecom/callback", params=query, content=body).status_code == 200
            drain(sessions, account)
        query, body = message_callback(crypt, MEMBER, "qqzxv")
        crafted = c.post("/channels/wecom/callback", params={**query, "msg_signature": "é" * 40}, content=body)
        assert crafted.status_code == 401 and crafted.json()["error"]["code"] == "channel_webhook_secret_invalid"
        check, _echo = verification_query(crypt)
        crafted = c.get("/channels/wecom/callback", params={**check, "msg_signature": "签名" * 20})
        assert crafted.status_code == 401
        query, body = message_callback(crypt, MEMBER, "qqzxv")
        assert c.post("/channels/wecom/callback", params=query, content=body).status_code == 200
        drain(sessions, account)
        assert conversation_length(sessions, account) == 2
        assert c.post("/channels/wecom/callback", params=query, content=body).status_code == 200
        drain(sessions, account)
        assert conversation_length(sessions, account) == 2, "the replayed callback was not taken in again"
        query, body = message_callback(crypt, MEMBER, "qqzxv", timestamp=int(time.time()) - 400)
        stale = c.post("/channels/wecom/callback", params=query, content=body)
        assert stale.status_code == 401 and stale.json()["error"]["code"] == "channel_request_expired"
    assert conversation_length(sessions, account) == 2


# ------------------------------------------------------------------ saving from the chat (issue 42)


def test_wecom_save_takes_the_last_image_sent_and_a_repeat_is_already_there(
    sessions, account, wecom, settings_env, media_server
):
    """WeCom's replies carry no media: 收 saves the last image the same person sent within ten
    minutes, fetched through the media API by its MediaId (its PicUrl only without one: here a URL
    that serves nothing), into the upload path; the same image again (by PicUrl alone) is already
    there; another member of the same app is not the owner: their 收 saves nothing, not even the
    owner's last image."""
    from channel_helpers import image_bytes, saved_memes, sha256

    fake, crypt = wecom
    settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([fake.host, media_server.host]))
    bind(sessions, account, crypt)
    data, owners_next = image_bytes("png", seed=4501), image_bytes("png", seed=4502)

    def image(picture: bytes, from_user: str = MEMBER, media: bool = True) -> None:
        if media:
            kw = {"media_id": fake.member_file(picture), "pic_url": f"http://{media_server.host}/nothing-here.png"}
        else:
            kw = {"pic_url": media_server.url(picture)}
        query, body = message_callback(crypt, from_user, "", msg_type="image", **kw)
        with client(None) as c:
            assert c.post("/channels/wecom/callback", params=query, content=body).status_code == 200
        drain(sessions, account)

    def said(to: str = MEMBER) -> str:
        return [m for m in fake.sent if m["msgtype"] == "text" and m["touser"] == to][-1]["text"]["content"]

    image(data)  # an image alone: similar memes, nothing saved
    assert sha256(data) not in saved_memes(sessions, account)
    post_message(crypt, "收")
    drain(sessions, account)
    assert sha256(data) in saved_memes(sessions, account) and "秒后可以搜到" in said()
    fetched = [r["query"].get("media_id") for r in fake.calls("/cgi-bin/media/get")]
    assert len(fetched) >= 2 and len(set(fetched)) == 1, "the image and its save, through media/get"
    count = len(saved_memes(sessions, account))
    image(data, media=False)
    post_message(crypt, "save")
    drain(sessions, account)
    assert said() == f"Already in your library: {saved_memes(sessions, account)[sha256(data)]}"
    assert len(saved_memes(sessions, account)) == count

    fake.members.add("lisi")  # a guest: another member of the corp's app, proved by WeCom's signature
    image(owners_next)  # the owner's last image, not saved
    post_message(crypt, "收", from_user="lisi")
    drain(sessions, account)
    assert len(saved_memes(sessions, account)) == count and sha256(owners_next) not in saved_memes(sessions, account)
    assert said("lisi").startswith("还没有绑定 mewdex 账户"), "told how to link their own"
