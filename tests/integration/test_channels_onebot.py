"""Channels (issue 17), QQ through OneBot v11: a fake NapCat dials mewdex's reverse WebSocket (real
uvicorn, real socket) with its headers and answers actions by ``echo``; bind on the API, send a
message, get a meme back as a ``base64://`` sticker, the group rule, a failed action in the delivery
log, revoke (the connection is closed, nothing more is sent); the HTTP POST mode with its HMAC-SHA1
signature."""

from __future__ import annotations

import base64
import json
import threading
import time

import httpx
import pytest
from sqlalchemy import select

from channel_helpers import account  # noqa: F401 - fixture
from conftest import app_for, client_for, drain_queue, wait_until
from fakes.onebot_client import FakeNapCat, FakeOneBotHTTP, group_event, private_event, signed_post
from mewdex.db.models import ChannelBinding, ChannelDelivery, ScopeContext

SYSTEM = ScopeContext("__system__")
BOT_QQ = 3889000111
FRIEND = 1234567890


def drain(sessions, acct) -> None:
    drain_queue(sessions, acct.scope, SYSTEM, timeout=120)


@pytest.fixture(scope="module")
def server(mewdex_env):
    """The real app served by uvicorn on a local socket (WebSockets through the ``websockets`` package)."""
    import uvicorn

    config = uvicorn.Config(
        app_for(None), host="127.0.0.1", port=0, log_level="warning", lifespan="off", ws="websockets-sansio"
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    wait_until(lambda: srv.started, timeout=30, what="uvicorn")
    port = srv.servers[0].sockets[0].getsockname()[1]
    yield f"127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)


def bind(acct, **body) -> dict:
    with client_for(acct.scope) as client:
        r = client.post("/api/v1/channels/onebot", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def sent_images(actions) -> list[bytes]:
    out = []
    for action in actions:
        for segment in action["params"]["message"]:
            if segment["type"] == "image":
                assert segment["data"]["sub_type"] == 1, "shown as a sticker"
                out.append(base64.b64decode(segment["data"]["file"].removeprefix("base64://")))
    return out


def test_bind_message_meme_group_rule_revoke(sessions, store, account, server):  # noqa: F811
    bound = bind(account, owner_qq=str(FRIEND))
    assert bound["ws_url"].endswith("/channels/onebot/ws") and bound["access_token"]
    assert bound["access_token"] not in json.dumps(bound["binding"])
    ws_url = f"ws://{server}/channels/onebot/ws"

    # A wrong token is refused before the handshake completes.
    from websockets.exceptions import InvalidStatus

    with pytest.raises(InvalidStatus):
        FakeNapCat(ws_url, BOT_QQ, "not-the-token")

    with FakeNapCat(ws_url, BOT_QQ, bound["access_token"]) as napcat:

        def connected():
            with sessions.begin() as session:
                row = session.execute(
                    select(ChannelBinding).where(ChannelBinding.scope_id == account.scope.scope_id)
                ).scalar_one()
                return row.identity == str(BOT_QQ) and row.config.get("connected")

        wait_until(connected, timeout=15, what="the binding to learn the bot's QQ number")
        napcat.heartbeat()
        napcat.private(FRIEND, "cat")
        wait_until(lambda: drain(sessions, account) is None and napcat.actions, timeout=30, what="a reply")
        actions = napcat.wait_actions(3)
        assert {a["action"] for a in actions} == {"send_private_msg"}
        assert all(a["params"]["user_id"] == FRIEND for a in actions)
        images = sent_images(actions)
        assert len(images) == 3
        from mewdex.db.models import Meme

        with sessions.begin() as session:
            originals = {
                m.sha256 for m in session.execute(select(Meme).where(Meme.scope_id == account.scope.scope_id)).scalars()
            }
        import hashlib

        assert {hashlib.sha256(i).hexdigest() for i in images} <= originals, "the meme's own bytes, inline"

        # Group: silent unless @-mentioned or a command.
        before = len(napcat.actions)
        napcat.group(555000, FRIEND, "cat")
        napcat.group(555000, FRIEND, "cat", at_self=True)
        napcat.group(555000, FRIEND, "/slacking off")
        time.sleep(0.5)
        drain(sessions, account)
        new = napcat.actions[before:]
        assert new and all(a["action"] == "send_group_msg" and a["params"]["group_id"] == 555000 for a in new)

        # A failed action is a failed delivery with the implementation's retcode and wording.
        from mewdex.channels import delivery

        napcat.fail_next(1200, "消息发送失败，请检查消息内容")
        with sessions.begin() as session:
            failed_id = delivery.send_text(session, user_id=account.user_id, channel="onebot", text="hi").delivery_id
        drain(sessions, account)  # the implementation refused it: not retried
        with sessions.begin() as session:
            row = session.get(ChannelDelivery, failed_id)
            assert (row.status, row.attempts, row.error_code) == ("failed", 1, "channel_platform_error")
            assert row.platform_code == "1200" and "消息发送失败" in row.platform_error
        with client_for(account.scope) as client:
            shown = {d["id"]: d for d in client.get("/api/v1/channels/deliveries").json()["deliveries"]}
            assert shown[str(failed_id)]["platform_code"] == "1200"

        # A send still queued when the binding is revoked is cancelled, never sent.
        with sessions.begin() as session:
            delivery_id = delivery.send_text(session, user_id=account.user_id, channel="onebot", text="x").delivery_id

        # Revoke: queued sends are cancelled and the connection is closed.
        with client_for(account.scope) as client:
            assert client.delete("/api/v1/channels/onebot").json()["status"] == "revoked"
        assert napcat.closed.wait(15), "the revoked binding's connection is closed"
        with sessions.begin() as session:
            assert session.get(ChannelDelivery, delivery_id).status == "cancelled"
    # The token no longer connects.
    with pytest.raises(InvalidStatus):
        FakeNapCat(ws_url, BOT_QQ, bound["access_token"])


def test_not_connected_is_a_clear_failure(sessions, account, server):  # noqa: F811
    from mewdex.channels import delivery

    bind(account, owner_qq=str(FRIEND))
    with sessions.begin() as session:  # no bot ever connected: the binding has no bot number yet
        queued = delivery.send_text(session, user_id=account.user_id, channel="onebot", text="hello")
        delivery_id = queued.delivery_id
    with pytest.raises(AssertionError):
        drain_queue(sessions, account.scope, timeout=3)
    with sessions.begin() as session:
        row = session.get(ChannelDelivery, delivery_id)
        assert row.status == "retrying" and row.error_code == "onebot_not_connected"
        assert row.retry_after_seconds == 30


def test_http_post_mode(sessions, settings_env, account, server):  # noqa: F811
    api = FakeOneBotHTTP(BOT_QQ + 1, token="")
    try:
        settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([api.host]))
        bound = bind(account, mode="http", self_id=str(BOT_QQ + 1), api_url=api.url)
        api.token = bound["access_token"]
        events = f"http://{server}/channels/onebot/events"
        body, headers = signed_post(bound["access_token"], private_event(BOT_QQ + 1, FRIEND, "cat", 77))
        assert httpx.post(events, content=body, headers=headers).status_code == 204
        forged = {**headers, "X-Signature": "sha1=" + "0" * 40}
        assert httpx.post(events, content=body, headers=forged).status_code == 401
        body, headers = signed_post(bound["access_token"], group_event(BOT_QQ + 1, 9, FRIEND, "cat"))
        assert httpx.post(events, content=body, headers=headers).status_code == 204  # not addressed: ignored
        drain(sessions, account)
        assert api.actions and {a["action"] for a in api.actions} == {"send_private_msg"}
        assert len(sent_images(api.actions)) == 3
    finally:
        api.close()
