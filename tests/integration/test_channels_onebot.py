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
import uuid

import httpx
import pytest
from sqlalchemy import select, text

from conftest import app_for, client_for, drain_queue, wait_until
from fakes.onebot_client import FakeNapCat, FakeOneBotHTTP, group_event, private_event, signed_post
from mewdex.db.models import ChannelBinding, ChannelDelivery, ScopeContext

pytestmark = pytest.mark.usefixtures("quick_pacing")  # sends to one chat 0.05 s apart (channel_helpers)

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
        app_for(None),
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="off",
        ws="websockets-sansio",
        proxy_headers=False,
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


def test_bind_message_meme_group_rule_revoke(sessions, store, account, server):
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


def test_not_connected_is_a_clear_failure(sessions, account, server):
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


def test_http_post_mode(sessions, settings_env, account, server):
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


# ------------------------------------------------------------------ tenants (issue 31)

VICTIM_QQ = 3889000222
ATTACKER_QQ = 3889000333
STRANGER = 55555


def connected_as(sessions, acct, qq) -> bool:
    with sessions.begin() as session:
        row = session.execute(
            select(ChannelBinding).where(
                ChannelBinding.scope_id == acct.scope.scope_id, ChannelBinding.channel == "onebot"
            )
        ).scalar_one()
        return row.identity == str(qq) and bool(row.config.get("connected"))


def scope_rows(sessions, acct, model) -> list:
    with sessions.begin() as session:
        return list(session.execute(select(model).where(model.scope_id == acct.scope.scope_id)).scalars())


def test_a_socket_is_its_own_bindings_only(sessions, account, other_account, server):
    """The attacker's own token and bot, events naming the victim's bot: nothing reaches the victim
    (no task in its scope, no conversation, no send through its bot), and the attacker's claim of the
    victim's number on a second socket is refused."""
    from websockets.exceptions import InvalidStatus

    from mewdex.db.models import Conversation, Task

    ws_url = f"ws://{server}/channels/onebot/ws"
    victim, attacker = account, other_account
    victim_token = bind(victim, owner_qq=str(FRIEND))["access_token"]
    attacker_token = bind(attacker, owner_qq=str(FRIEND + 1))["access_token"]
    with FakeNapCat(ws_url, VICTIM_QQ, victim_token) as real, FakeNapCat(ws_url, ATTACKER_QQ, attacker_token) as evil:
        wait_until(lambda: connected_as(sessions, victim, VICTIM_QQ), timeout=15, what="the victim's bot")
        wait_until(lambda: connected_as(sessions, attacker, ATTACKER_QQ), timeout=15, what="the attacker's bot")
        evil.private(STRANGER, "cat", self_id=VICTIM_QQ)
        evil.group(777, STRANGER, "cat", at_self=True)  # a real event of its own bot: answered in its scope
        wait_until(lambda: scope_rows(sessions, attacker, Task), timeout=15, what="the attacker's own event")
        drain_queue(sessions, victim.scope, attacker.scope, SYSTEM, timeout=120)
        assert not scope_rows(sessions, victim, Task), "nothing was queued in the victim's scope"
        assert not scope_rows(sessions, victim, Conversation), "the victim's assistant never ran"
        assert not scope_rows(sessions, victim, ChannelDelivery) and real.actions == []
        assert all(a["params"].get("group_id") == 777 for a in evil.actions), "only the attacker's own chat"
        # Claiming the victim's number on the attacker's token (a bot that lies about its login).
        try:
            with FakeNapCat(ws_url, VICTIM_QQ, attacker_token, login_id=VICTIM_QQ) as squat:
                assert squat.closed.wait(15), "the attacker's claim of the victim's QQ is refused"
        except InvalidStatus:
            pass  # refused at the handshake: refused as well
        assert connected_as(sessions, victim, VICTIM_QQ), "the victim's bot keeps its binding"
        assert not real.closed.is_set()
        assert real.login_queries == 1 and evil.login_queries == 1, "each bot proved its number"


def test_the_bot_proves_its_number(sessions, account, other_account, server):
    """A number typed in (HTTP mode) or claimed in ``X-Self-ID`` is not an identity until the bot
    proves it; a bot whose login differs from its claim is refused; a proven number held by another
    account is refused with the way to reclaim it."""
    from mewdex.channels.errors import ChannelError
    from mewdex.channels.onebot import setup as onebot

    ws_url = f"ws://{server}/channels/onebot/ws"
    squatter = bind(other_account, mode="http", self_id=str(VICTIM_QQ), api_url="http://127.0.0.1:9")
    assert squatter["binding"]["identity"] is None, "a typed-in number is only a claim"
    token = bind(account, owner_qq=str(FRIEND))["access_token"]
    with FakeNapCat(ws_url, VICTIM_QQ, token, login_id=ATTACKER_QQ) as liar:
        assert liar.closed.wait(15), "X-Self-ID differs from the logged-in QQ: refused"
    assert not connected_as(sessions, account, VICTIM_QQ)
    with FakeNapCat(ws_url, VICTIM_QQ, token):
        wait_until(lambda: connected_as(sessions, account, VICTIM_QQ), timeout=15, what="the real owner's bot")
    with sessions.begin() as session:
        row = onebot.bindings.get(session, other_account.scope.scope_id, "onebot", lock=True)
        with pytest.raises(ChannelError) as taken:
            onebot.attach(session, row, str(VICTIM_QQ))
    assert taken.value.code == "channel_identity_taken"
    assert (
        "Channels page" in taken.value.message and f"mewdex channels release onebot {VICTIM_QQ}" in taken.value.message
    )

    # The admin's way to reclaim it: the holder's binding is revoked, the number is free again.
    from typer.testing import CliRunner

    from mewdex.cli import app

    released = CliRunner().invoke(app, ["channels", "release", "onebot", str(VICTIM_QQ)])
    assert released.exit_code == 0, released.output
    with sessions.begin() as session:
        assert onebot.bindings.get(session, account.scope.scope_id, "onebot").status == "revoked"
        row = onebot.bindings.get(session, other_account.scope.scope_id, "onebot", lock=True)
        onebot.attach(session, row, str(VICTIM_QQ), connected=False)  # now it may hold the number
    assert CliRunner().invoke(app, ["channels", "release", "onebot", "10001"]).exit_code == 4


def test_http_events_replay_window(sessions, settings_env, account, server):
    """HTTP POST mode: an event outside ±5 minutes is refused, a repeated one too."""
    api = FakeOneBotHTTP(BOT_QQ + 2, token="")
    try:
        settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([api.host]))
        bound = bind(account, mode="http", self_id=str(BOT_QQ + 2), api_url=api.url, owner_qq=str(FRIEND))
        events = f"http://{server}/channels/onebot/events"
        body, headers = signed_post(bound["access_token"], group_event(BOT_QQ + 2, 9, FRIEND, "cat", 501))
        assert httpx.post(events, content=body, headers=headers).status_code == 204
        again = httpx.post(events, content=body, headers=headers)
        assert again.status_code == 409 and again.json()["error"]["code"] == "channel_request_replayed"
        stale = {**group_event(BOT_QQ + 2, 9, FRIEND, "cat", 502), "time": int(time.time()) - 360}
        body, headers = signed_post(bound["access_token"], stale)
        old = httpx.post(events, content=body, headers=headers)
        assert old.status_code == 401 and old.json()["error"]["code"] == "channel_request_expired"
    finally:
        api.close()


def test_a_non_ascii_signature_is_a_401(sessions, account, server):
    """A crafted ``X-Signature`` with characters outside ASCII is refused (401), not a 500."""
    from mewdex.channels.onebot import setup as onebot

    bound = bind(account, mode="http", self_id=str(BOT_QQ + 3), api_url="http://127.0.0.1:9")
    with sessions.begin() as session:  # as if its first signed event had proven the number
        row = onebot.bindings.get(session, account.scope.scope_id, "onebot", lock=True)
        if row.identity is None:
            onebot.attach(session, row, str(BOT_QQ + 3), connected=False)
    body, headers = signed_post(bound["access_token"], group_event(BOT_QQ + 3, 9, FRIEND, "cat", 601))
    for forged in ("sha1=\xe9\xe9".encode("latin-1"), "sha1=签名".encode()):
        crafted = httpx.post(
            f"http://{server}/channels/onebot/events", content=body, headers={**headers, "X-Signature": forged}
        )
        assert crafted.status_code == 401 and crafted.json()["error"]["code"] == "channel_webhook_secret_invalid"


def test_crafted_ids_in_a_signed_event_are_not_a_500(sessions, account, server):
    """A signed event whose ids are not QQ numbers (a 2,000-character message id, a group id that is
    an object, a user id with letters) is not a message: 204 with nothing queued, never a 500."""
    from mewdex.db.models import Task

    bound = bind(account, mode="http", self_id=str(BOT_QQ + 4), api_url="http://127.0.0.1:9")
    events = f"http://{server}/channels/onebot/events"
    crafted = [
        {**private_event(BOT_QQ + 4, FRIEND, "cat"), "message_id": "9" * 2000},
        {**group_event(BOT_QQ + 4, 9, FRIEND, "cat", 602, at_self=True), "group_id": {"x": "y" * 2000}},
        {**private_event(BOT_QQ + 4, FRIEND, "cat", 603), "user_id": "1" * 1500},
        {**private_event(BOT_QQ + 4, FRIEND, "cat", 604), "user_id": "12ab"},
    ]
    for event in crafted:
        body, headers = signed_post(bound["access_token"], event)
        r = httpx.post(events, content=body, headers=headers)
        assert r.status_code == 204, r.text
    with sessions.begin() as session:
        queued = session.execute(
            select(Task).where(Task.scope_id == account.scope.scope_id, Task.task_type == "channel_inbound")
        ).all()
    assert queued == []


def test_disabling_the_owner_stops_chats_sends_and_schedules(sessions, account, server):
    """Disabling an account closes its open socket at once, cancels its queued sends, refuses its
    bot and pauses its schedules; enabling restores them; deleting removes bindings and jobs."""
    from websockets.exceptions import InvalidStatus

    from mewdex.channels import delivery
    from mewdex.channels.errors import ChannelError
    from mewdex.db.models import ScheduledJob, User
    from mewdex.platform import users
    from mewdex.schedules import jobs

    ws_url = f"ws://{server}/channels/onebot/ws"
    token = bind(account, owner_qq=str(FRIEND))["access_token"]
    viewer = jobs.Viewer(account.scope)
    with sessions.begin() as session:
        job_id = jobs.create(session, viewer, {"name": "daily", "prompt": "cat", "cron": "0 9 * * *"}).job_id
    with FakeNapCat(ws_url, VICTIM_QQ, token) as napcat:
        wait_until(lambda: connected_as(sessions, account, VICTIM_QQ), timeout=15, what="the bot")
        with sessions.begin() as session:
            queued = delivery.send_text(session, user_id=account.user_id, channel="onebot", text="x").delivery_id
            users.set_disabled(session, session.get(User, account.user_id), True)
        assert napcat.closed.wait(4), "the socket closes at once (not at the next periodic check)"
    with pytest.raises(InvalidStatus):
        FakeNapCat(ws_url, VICTIM_QQ, token)
    with sessions.begin() as session:
        assert session.get(ChannelDelivery, queued).status == "cancelled"
        job = session.get(ScheduledJob, job_id)
        assert (job.enabled, job.disabled_reason) == (False, jobs.OWNER_DISABLED_REASON)
        with pytest.raises(ChannelError) as refused:
            delivery.send_text(session, user_id=account.user_id, channel="onebot", text="x")
        assert refused.value.code == "channel_owner_disabled"

    with sessions.begin() as session:
        users.set_disabled(session, session.get(User, account.user_id), False)
    with sessions.begin() as session:
        job = session.get(ScheduledJob, job_id)
        assert job.enabled and job.disabled_reason is None
    with FakeNapCat(ws_url, VICTIM_QQ, token):
        wait_until(lambda: connected_as(sessions, account, VICTIM_QQ), timeout=15, what="the bot after enabling")

    with sessions.begin() as session:
        users.delete_user(session, session.get(User, account.user_id))
    assert not scope_rows(sessions, account, ChannelBinding)
    with sessions.begin() as session:
        assert session.get(ScheduledJob, job_id) is None
    with pytest.raises(InvalidStatus):
        FakeNapCat(ws_url, VICTIM_QQ, token)


def user_messages(sessions, acct) -> int:
    from mewdex.db.models import Conversation, Message

    with sessions.begin() as session:
        return len(
            session.execute(
                select(Message.message_id)
                .join(Conversation, Conversation.conversation_id == Message.conversation_id)
                .where(Conversation.scope_id == acct.scope.scope_id, Message.payload["role"].astext == "user")
            ).all()
        )


def test_strangers_get_retrieval_only_within_a_rate_limit(sessions, settings_env, account, server):
    """In a QQ group, only the binding's owner (owner_qq) reaches the chat model and its write tools;
    a stranger's messages get plain search answers, a few a minute per chat."""
    import uuid

    from fakes.openai_server import FakeOpenAI, Reply
    from mewdex.db.models import MemeCollection, Task
    from mewdex.providers import connectors

    with FakeOpenAI() as fake:
        settings_env(
            MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([fake.host_port]),
            MEWDEX_PROVIDER_MAX_RETRIES="0",
            MEWDEX_CHANNEL_GUEST_MESSAGES_PER_MINUTE="2",
        )
        fake.handler = lambda body: (
            Reply.text("done") if fake.tool_results(body) else Reply.tool_call("create_collection", {"name": "chat"})
        )
        with sessions.begin() as session:
            definition_id = connectors.create_definition(
                session, provider="openai_compatible", name=f"chat-{uuid.uuid4().hex[:6]}", visibility="all",
                credentials={"api_key": fake.api_key}, config={"base_url": fake.base_url, "chat_model": "fake-chat"},
            ).definition_id  # fmt: skip
        try:
            token = bind(account, owner_qq=str(FRIEND))["access_token"]
            with FakeNapCat(f"ws://{server}/channels/onebot/ws", VICTIM_QQ, token) as napcat:
                wait_until(lambda: connected_as(sessions, account, VICTIM_QQ), timeout=15, what="the bot")
                for n in range(3):
                    napcat.group(888, STRANGER, f"make a collection {n}", at_self=True)
                wait_until(lambda: len(scope_rows(sessions, account, Task)) >= 3, what="three queued messages")
                drain(sessions, account)
                assert not fake.chat_requests(), "a stranger never reaches the chat model"
                assert not scope_rows(sessions, account, MemeCollection), "nor its write tools"
                assert user_messages(sessions, account) == 2, "the third is over the chat's limit: not answered"
                assert napcat.actions and all(a["params"]["group_id"] == 888 for a in napcat.actions)
                napcat.group(888, FRIEND, "make a collection", at_self=True)
                wait_until(lambda: drain(sessions, account) is None and fake.chat_requests(), timeout=30)
                assert [c.name for c in scope_rows(sessions, account, MemeCollection)] == ["chat"], "the owner may"
                said = [m.get("content") for r in fake.chat_requests() for m in r["messages"]]
                assert "make a collection" in said, "the owner's turn reaches the model"
                assert not any(str(c).startswith("make a collection ") for c in said), (
                    "a stranger's turns (and their replies) stay out of the owner's model context"
                )
        finally:
            with sessions.begin() as session:
                session.execute(
                    text("DELETE FROM external_system_audits WHERE definition_id = :d"), {"d": definition_id}
                )
                session.execute(
                    text("DELETE FROM external_system_definitions WHERE definition_id = :d"), {"d": definition_id}
                )


def test_the_guest_rate_limit_is_per_account_and_chat(sessions, settings_env):
    """Two accounts' bots in one group: one account's strangers never spend the other's allowance."""
    from mewdex.channels.inbound import guest_allowed

    settings_env(MEWDEX_CHANNEL_GUEST_MESSAGES_PER_MINUTE="2")
    chat, first, second = f"group:{uuid.uuid4().int % 10**9}", str(uuid.uuid4()), str(uuid.uuid4())
    with sessions.begin() as session:
        assert [guest_allowed(session, first, "onebot", chat) for _ in range(3)] == [True, True, False]
        assert guest_allowed(session, second, "onebot", chat), "another account's allowance is its own"
        assert guest_allowed(session, first, "onebot", chat + "0"), "and so is another chat's"


# ------------------------------------------------------------------ saving from the chat (issue 42)

SAVER_QQ = 3889000444
GROUP = 4242


def said(actions) -> list[str]:
    """The texts the bot said, in order."""
    return ["".join(s["data"].get("text", "") for s in a["params"]["message"] if s["type"] == "text") for a in actions]


def test_qq_owner_saves_by_caption_and_by_reply_a_guest_cannot(sessions, settings_env, account, server, media_server):
    """The owner's 收 as the text of an image and as a reply to a friend's image saves each through
    the upload path; the same file again is 已有同款 with its name; a guest's 收 saves nothing and the
    group is told why once."""
    from channel_helpers import image_bytes, saved_memes, sha256

    settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([media_server.host]))
    token = bind(account, owner_qq=str(FRIEND))["access_token"]
    own, friends, guests = (image_bytes("png", seed=s) for s in (4301, 4302, 4303))
    with FakeNapCat(f"ws://{server}/channels/onebot/ws", SAVER_QQ, token) as napcat:
        wait_until(lambda: connected_as(sessions, account, SAVER_QQ), timeout=15, what="the bot")

        def image(data: bytes) -> dict:
            return {"type": "image", "data": {"file": "x.png", "url": media_server.url(data)}}

        def text_(words: str) -> dict:
            return {"type": "text", "data": {"text": words}}

        def post(*segments, user=FRIEND) -> int:
            """Send a message event and wait until mewdex has queued it (its dedupe key)."""
            from mewdex.db.models import Task

            mid = napcat.group_segments(GROUP, user, list(segments))
            key = f"onebot:group:{GROUP}:{SAVER_QQ}:{mid}"
            wait_until(lambda: any(t.dedupe_key == key for t in scope_rows(sessions, account, Task)), what="queued")
            drain(sessions, account)
            return mid

        def step(*segments, user=FRIEND) -> list[str]:
            before = len(napcat.actions)
            post(*segments, user=user)
            return said(napcat.actions[before:])

        assert "秒后可以搜到" in step(image(own), text_("收"))[-1]  # the caption form
        assert sha256(own) in saved_memes(sessions, account)

        posted = post(image(friends), user=STRANGER)  # a friend's meme: no word, not saved
        assert sha256(friends) not in saved_memes(sessions, account)
        assert "秒后可以搜到" in step({"type": "reply", "data": {"id": str(posted)}}, text_("收"))[-1]
        assert sha256(friends) in saved_memes(sessions, account)  # the reply form

        name = saved_memes(sessions, account)[sha256(own)]
        assert step(image(own), text_("收"))[-1] == f"已有同款：{name}"
        count = len(saved_memes(sessions, account))

        refused = step(image(guests), text_("收"), user=STRANGER)
        assert refused == ["只有这个 mewdex 表情库的主人才能在这里收藏表情。"]
        assert step(image(guests), text_("收"), user=STRANGER) == [], "told why once"
        assert len(saved_memes(sessions, account)) == count and sha256(guests) not in saved_memes(sessions, account)


CAPTION_QQ = 3889000555


def test_qq_owner_recaptions_a_sent_meme_a_guest_cannot(sessions, store, settings_env, account, server):
    """The owner's reply ``改字 新文字`` to a meme the bot sent gets the re-captioned picture back
    through the relay (nothing saved); ``改字 收 …`` saves it; a guest's 改字 sends nothing."""
    from channel_helpers import add_captioned_meme, saved_memes
    from mewdex.channels import delivery

    token = bind(account, owner_qq=str(FRIEND))["access_token"]
    original_id = add_captioned_meme(sessions, store, account)
    with FakeNapCat(f"ws://{server}/channels/onebot/ws", CAPTION_QQ, token) as napcat:
        wait_until(lambda: connected_as(sessions, account, CAPTION_QQ), timeout=15, what="the bot")
        with sessions.begin() as session:  # the bot posts the meme in the group (as an answer there)
            binding = session.execute(
                select(ChannelBinding).where(
                    ChannelBinding.scope_id == account.scope.scope_id, ChannelBinding.channel == "onebot"
                )
            ).scalar_one()
            sent_id = delivery.reply_meme(session, binding, f"group:{GROUP}", original_id, None, None).delivery_id
        drain(sessions, account)
        with sessions.begin() as session:
            row = session.get(ChannelDelivery, sent_id)
            assert row.status == "sent", row.error_code
            platform_id = row.platform_message_id
        [original] = sent_images(napcat.actions)
        before = dict(saved_memes(sessions, account))

        def step(words: str, user=FRIEND) -> list[dict]:
            from mewdex.db.models import Task

            start = len(napcat.actions)
            mid = napcat.group_segments(
                GROUP, user, [{"type": "reply", "data": {"id": platform_id}}, {"type": "text", "data": {"text": words}}]
            )
            key = f"onebot:group:{GROUP}:{CAPTION_QQ}:{mid}"
            wait_until(lambda: any(t.dedupe_key == key for t in scope_rows(sessions, account, Task)), what="queued")
            drain(sessions, account)
            return napcat.actions[start:]

        [remade] = sent_images(step("改字 好的"))
        assert remade != original and remade[:8] == b"\x89PNG\r\n\x1a\n"
        assert saved_memes(sessions, account) == before, "nothing saved"

        answer = step("改字 收 世界")
        assert len(sent_images(answer)) == 1 and "已收进" in said(answer)[-1]
        assert len(saved_memes(sessions, account)) == len(before) + 1

        refused = step("改字 收 坏", user=STRANGER)
        assert not sent_images(refused) and said(refused) == ["只有这个 mewdex 表情库的主人才能在这里收藏表情。"]
        assert len(saved_memes(sessions, account)) == len(before) + 1
