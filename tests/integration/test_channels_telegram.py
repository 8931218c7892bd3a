"""Channels (issue 17), Telegram against the fake Bot API server: bind with a deep link, send a
message, get a meme back, "another", revoke (inbound and outbound stop at once), the delivery log
with a success and a platform error, an unbound sender, the group rule, 429 retry_after, file_id
reuse, inline mode, webhook mode with the secret header, and python-telegram-bot driving the fake."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid

import pytest
from sqlalchemy import select

from channel_helpers import bind_telegram, new_user_id
from conftest import client_for, drain_queue, wait_until
from mewdex.db.models import ChannelBinding, ChannelDelivery, ScopeContext

pytestmark = pytest.mark.usefixtures("quick_pacing")  # sends to one chat 0.05 s apart (channel_helpers)

SYSTEM = ScopeContext("__system__")


def drain(sessions, acct) -> None:
    drain_queue(sessions, acct.scope, SYSTEM, timeout=120)


def poll(sessions) -> int:
    from mewdex.channels.telegram import inbound as tg

    return tg.poll_once(sessions, timeout=0)


def bind(sessions, acct, fake, user_id: int) -> None:
    """Bind ``user_id``'s Telegram chat to ``acct`` the way a person does: link, Start."""
    with client_for(acct.scope) as client:
        answer = client.post("/api/v1/channels/telegram/link")
    assert answer.status_code == 200, answer.text
    link = answer.json()
    assert link["url"] == f"https://t.me/{fake.username}?start={link['code']}"
    fake.user_message(user_id, f"/start {link['code']}")
    assert poll(sessions) == 1
    drain(sessions, acct)
    assert "Reply YES" in fake.sent_to(user_id)[-1]["text"]
    fake.user_message(user_id, "yes")
    assert poll(sessions) == 1
    drain(sessions, acct)


@pytest.mark.real_pacing  # checks the adapter's one message per second per chat
def test_bind_message_meme_another_revoke(sessions, account, telegram):
    fake, uid = telegram, new_user_id()
    bind(sessions, account, fake, uid)
    assert "Linked" in fake.sent_to(uid)[-1]["text"]
    with client_for(account.scope) as client:
        listed = client.get("/api/v1/channels").json()
    [binding] = [b for b in listed["bindings"] if b["channel"] == "telegram"]
    assert binding["status"] == "active" and binding["identity"] == str(uid) and binding["conversation_id"]
    [info] = [c for c in listed["channels"] if c["name"] == "telegram"]
    assert {k: info[k] for k in ("configured", "mode", "token_source")} == {
        "configured": True,
        "mode": "polling",
        "token_source": "environment",
    }
    assert info["token_hint"] and fake.token not in json.dumps(listed)

    fake.user_message(uid, "cat")
    poll(sessions)
    drain(sessions, account)
    memes = [m for m in fake.sent_to(uid) if m["method"] in ("sendPhoto", "sendAnimation")]
    assert len(memes) == 3 and all(m["uploaded"] for m in memes)
    assert "cat" in memes[0]["caption"] and memes[1]["caption"] is None
    # One send per second per chat, start to start (channels.delivery.reserve_slot): what the fake sees
    # is when each arrived, later by however long the upload took on a busy machine, so a single gap
    # may be shorter (0.6 s once); three sends still span at least two seconds less the first's upload.
    gaps = [b["at"] - a["at"] for a, b in zip(memes, memes[1:], strict=False)]
    assert memes[-1]["at"] - memes[0]["at"] >= 1.5, f"about one message per second per chat: {gaps}"
    first_page = {m["file_id"] for m in memes}

    fake.user_message(uid, "换一个")
    poll(sessions)
    drain(sessions, account)
    more = [m for m in fake.sent_to(uid) if m["method"] in ("sendPhoto", "sendAnimation")][3:]
    assert more and not first_page & {m["file_id"] for m in more}, "another never repeats a meme"
    assert any(m["method"] == "sendAnimation" for m in memes + more), "the GIF goes as an animation"

    with sessions.begin() as session:  # the conversation is the binding's standing one, on this channel
        from mewdex.db.models import Conversation

        conversation = session.get(Conversation, __import__("uuid").UUID(binding["conversation_id"]))
        assert conversation.channel == "telegram" and conversation.next_message_idx == 4

    with client_for(account.scope) as client:
        log = client.get("/api/v1/channels/deliveries").json()["deliveries"]
        assert log and all(d["status"] == "sent" for d in log)
        assert {d["kind"] for d in log} == {"meme", "text"}
        revoked = client.delete("/api/v1/channels/telegram")
        assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
        assert client.delete("/api/v1/channels/telegram").json()["error"]["code"] == "channel_not_bound"

    # Outbound stops at once: the public API refuses, and nothing queued earlier is sent.
    from mewdex.channels import delivery
    from mewdex.channels.errors import ChannelError

    with sessions.begin() as session, pytest.raises(ChannelError) as refused:
        delivery.send_meme(session, user_id=account.user_id, channel="telegram", meme_id=account.memes["cat one"])
    assert refused.value.code == "channel_not_bound"
    # Inbound stops at once: the next message is from an unbound sender.
    before = len(fake.sent_to(uid))
    fake.user_message(uid, "cat")
    poll(sessions)
    drain(sessions, account)
    after = fake.sent_to(uid)[before:]
    assert [m["method"] for m in after] == ["sendMessage"] and "not linked" in after[0]["text"]


def test_revoke_cancels_queued_deliveries(sessions, account, telegram):
    from mewdex.channels import bindings, delivery

    uid = new_user_id()
    with sessions.begin() as session:
        bindings.bind(
            session,
            scope_id=account.scope.scope_id,
            user_id=account.user_id,
            channel="telegram",
            identity=str(uid),
            config={"chat_id": str(uid)},
        )
        queued = delivery.send_meme(
            session, user_id=account.user_id, channel="telegram", meme_id=account.memes["cat one"], caption="hi"
        )
        delivery_id = queued.delivery_id
    with sessions.begin() as session:
        bindings.revoke(session, account.scope.scope_id, "telegram")
    drain(sessions, account)
    assert telegram.sent_to(uid) == []
    with sessions.begin() as session:
        row = session.get(ChannelDelivery, delivery_id)
        assert (row.status, row.error_code) == ("cancelled", "channel_binding_revoked")


def _bound(sessions, account, uid):
    bind_telegram(sessions, account, uid)


def test_sends_to_one_chat_are_paced_by_the_adapters_interval(sessions):
    """The adapter's own ``min_send_interval`` (not the tests' quick one) spaces two sends to one chat,
    by the database's clock (so across processes); another chat is not held up by it."""
    from sqlalchemy import text

    from mewdex.channels import registry
    from mewdex.channels.delivery import reserve_slot

    interval = type(registry.adapter("telegram")).min_send_interval
    chat = f"pacing-{new_user_id()}"
    assert interval > 0
    try:
        assert reserve_slot(sessions, "telegram", chat, interval) == 0.0
        second = reserve_slot(sessions, "telegram", chat, interval)
        assert interval - 0.5 < second <= interval, second
        third = reserve_slot(sessions, "telegram", chat, interval)
        assert 2 * interval - 0.5 < third <= 2 * interval, third
        assert reserve_slot(sessions, "telegram", f"{chat}-other", interval) == 0.0
    finally:
        with sessions.begin() as session:
            session.execute(text("DELETE FROM channel_chat_pacing WHERE target LIKE :t"), {"t": f"{chat}%"})


def test_retry_after_is_honoured_and_file_ids_are_reused(sessions, account, telegram, settings_env):
    from mewdex.channels import delivery

    uid = new_user_id()
    _bound(sessions, account, uid)
    telegram.fail_next("sendPhoto", 429, retry_after=2)
    with sessions.begin() as session:
        first = delivery.send_meme(
            session, user_id=account.user_id, channel="telegram", meme_id=account.memes["cat two"], caption="scheduled"
        ).delivery_id
    drain(sessions, account)
    tries = [c for c in telegram.calls if c["method"] == "sendPhoto"]
    assert len(tries) == 2 and tries[1]["at"] - tries[0]["at"] >= 1.9, "the retry waited retry_after"
    with sessions.begin() as session:
        row = session.get(ChannelDelivery, first)
        assert (row.status, row.attempts, row.error_code) == ("sent", 2, None)
    # The same meme again: Telegram's file_id is reused, nothing is uploaded.
    with sessions.begin() as session:
        delivery.send_meme(session, user_id=account.user_id, channel="telegram", meme_id=account.memes["cat two"])
    drain(sessions, account)
    sent = telegram.sent_to(uid)
    assert [m["uploaded"] for m in sent] == [True, False] and sent[0]["file_id"] == sent[1]["file_id"]


def test_a_platform_error_is_a_failed_delivery_in_the_log(sessions, account, telegram):
    from mewdex.channels import delivery

    uid = new_user_id()
    _bound(sessions, account, uid)
    telegram.blocked.add(str(uid))
    with sessions.begin() as session:
        delivery.send_meme(session, user_id=account.user_id, channel="telegram", meme_id=account.memes["cat one"])
    drain(sessions, account)
    with client_for(account.scope) as client:
        [entry] = client.get("/api/v1/channels/deliveries").json()["deliveries"]
    assert entry["status"] == "failed" and entry["attempts"] == 1, "403 is not retried"
    assert entry["error_code"] == "channel_blocked" and entry["platform_code"] == "403"
    assert "blocked" in entry["platform_error"]


def test_unbound_sender_gets_how_to_bind_only(sessions, account, telegram):
    uid = new_user_id()
    telegram.user_message(uid, "cat")
    telegram.user_message(uid, "/start not-a-real-code")
    poll(sessions)
    drain(sessions, account)
    replies = telegram.sent_to(uid)
    assert [m["method"] for m in replies] == ["sendMessage", "sendMessage"]
    assert "not linked" in replies[0]["text"] and "expired" in replies[1]["text"]
    with sessions.begin() as session:
        assert session.execute(select(ChannelBinding).where(ChannelBinding.identity == str(uid))).first() is None


def test_groups_answer_only_when_mentioned_or_commanded(sessions, account, telegram):
    uid, group = new_user_id(), -new_user_id()
    _bound(sessions, account, uid)
    from mewdex.channels.telegram import api as tg

    tg.bot_username(sessions)
    telegram.user_message(uid, "cat", chat_id=group, chat_type="supergroup")
    poll(sessions)
    drain(sessions, account)
    assert telegram.sent_to(group) == [], "a group message not for the bot is ignored"
    telegram.user_message(uid, f"@{telegram.username} cat", chat_id=group, chat_type="supergroup")
    poll(sessions)
    drain(sessions, account)
    mentioned = telegram.sent_to(group)
    assert len(mentioned) == 3 and "cat" in mentioned[0]["caption"]
    telegram.user_message(uid, f"/meme@{telegram.username} slacking", chat_id=group, chat_type="group")
    telegram.user_message(uid, "/meme@another_bot cat", chat_id=group, chat_type="group")
    poll(sessions)
    drain(sessions, account)
    commanded = telegram.sent_to(group)[3:]
    assert len(commanded) == 1 and "slacking" in commanded[0]["caption"], "only the command for this bot"
    assert telegram.sent_to(uid) == [], "group replies go to the group"


def test_inline_mode_offers_cached_memes(sessions, account, telegram, settings_env):
    uid, storage_chat = new_user_id(), -new_user_id()
    settings_env(MEWDEX_TELEGRAM_STORAGE_CHAT_ID=str(storage_chat))
    _bound(sessions, account, uid)
    telegram.inline_query(uid, "cat")
    telegram.inline_query(new_user_id(), "cat")  # an unbound user
    telegram.inline_query(new_user_id(), "猫", language_code="zh-hans")  # an unbound user whose Telegram is in Chinese
    poll(sessions)
    drain(sessions, account)
    bound_answer, unbound_answer, unbound_zh = sorted(
        telegram.inline_answers, key=lambda a: int(a["inline_query_id"][2:])
    )
    results = bound_answer["results"]
    assert 1 <= len(results) <= 50 and {r["type"] for r in results} == {"photo", "gif"}
    assert {r["id"] for r in results} <= set(account.memes.values())
    uploads = len(telegram.sent_to(storage_chat))
    assert uploads == len(results), "each meme uploaded once to get its file_id"
    assert unbound_answer["results"] == [] and unbound_answer["button"]["start_parameter"] == "link"
    assert unbound_answer["button"]["text"] == "Link your mewdex library"
    assert unbound_zh["results"] == [] and unbound_zh["button"]["text"] == "绑定你的 mewdex 表情库"
    telegram.inline_query(uid, "cat")
    poll(sessions)
    drain(sessions, account)
    assert len(telegram.sent_to(storage_chat)) == uploads, "cached file_ids are not uploaded again"
    assert telegram.inline_answers[-1]["results"] == results
    with sessions.begin() as session:  # each answer is a delivery of the shared path (issue 41 step 2)
        logged = session.execute(select(ChannelDelivery).where(ChannelDelivery.target == f"inline:{uid}")).scalars()
        assert [(d.status, d.kind, d.scope_id) for d in logged] == [("sent", "meme", account.scope.scope_id)] * 2


def test_webhook_mode_registers_the_secret_and_checks_it(sessions, account, telegram, settings_env):
    from mewdex.channels.telegram import inbound as tg

    settings_env(MEWDEX_PUBLIC_URL="https://memes.example.org")
    assert tg.ensure_mode(sessions) == "webhook"
    assert telegram.webhook["url"] == "https://memes.example.org/channels/telegram/webhook"
    secret = telegram.webhook["secret_token"]
    uid = new_user_id()
    update = {
        "update_id": 1,
        "message": {"message_id": 5, "from": {"id": uid}, "chat": {"id": uid, "type": "private"}, "text": "cat"},
    }
    with client_for(None) as client:
        headers = {"Host": "memes.example.org"}
        missing = client.post("/channels/telegram/webhook", json=update, headers=headers)
        wrong = client.post("/channels/telegram/webhook", json=update, headers={**headers, tg.SECRET_HEADER: "nope"})
        right = client.post("/channels/telegram/webhook", json=update, headers={**headers, tg.SECRET_HEADER: secret})
    assert missing.status_code == wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "channel_webhook_secret_invalid"
    assert right.status_code == 200 and right.json()["queued"] == "message"
    drain(sessions, account)
    assert "not linked" in telegram.sent_to(uid)[0]["text"]
    settings_env(MEWDEX_PUBLIC_URL="")
    assert tg.ensure_mode(sessions) == "polling" and telegram.webhook is None


def test_a_replayed_webhook_update_is_answered_200_and_dropped(sessions, account, telegram, settings_env):
    """Issue 40, finding 10: the webhook remembers each bot's ``update_id``s, so an update sent again
    (a captured request with its secret header) is answered 200 — Telegram would resend a refused one —
    and does nothing; a new update still works."""
    from mewdex.channels.telegram import inbound as tg

    settings_env(MEWDEX_PUBLIC_URL="https://memes.example.org")
    assert tg.ensure_mode(sessions) == "webhook"
    headers = {"Host": "memes.example.org", tg.SECRET_HEADER: telegram.webhook["secret_token"]}
    uid = new_user_id()

    def update(update_id: int, message_id: int) -> dict:
        chat = {"id": uid, "type": "private"}
        return {"update_id": update_id, "message": {"message_id": message_id, "from": {"id": uid}, "chat": chat,
                                                    "text": "cat"}}  # fmt: skip

    try:
        with client_for(None) as client:
            first = client.post("/channels/telegram/webhook", json=update(7, 70), headers=headers)
            assert first.status_code == 200 and first.json()["queued"] == "message"
            drain(sessions, account)
            assert len(telegram.sent_to(uid)) == 1
            again = client.post("/channels/telegram/webhook", json=update(7, 70), headers=headers)
            assert again.status_code == 200 and again.json()["queued"] == "replayed", again.text
            drain(sessions, account)
            assert len(telegram.sent_to(uid)) == 1, "the replayed update was answered again"
            fresh = client.post("/channels/telegram/webhook", json=update(8, 71), headers=headers)
            assert fresh.status_code == 200 and fresh.json()["queued"] == "message"
            no_id = client.post("/channels/telegram/webhook", json={"message": {}}, headers=headers)
            assert (no_id.status_code, no_id.json()["error"]["code"]) == (422, "invalid_request")
        drain(sessions, account)
        assert len(telegram.sent_to(uid)) == 2
    finally:
        settings_env(MEWDEX_PUBLIC_URL="")
        tg.ensure_mode(sessions)


def test_the_fake_speaks_the_bot_api_to_python_telegram_bot(telegram):
    telegram_lib = pytest.importorskip("telegram")

    async def scenario():
        bot = telegram_lib.Bot(telegram.token, base_url=f"{telegram.url}/bot", base_file_url=f"{telegram.url}/file/bot")
        async with bot:
            me = await bot.get_me()
            assert me.username == telegram.username
            telegram.user_message(42, "hello")
            updates = await bot.get_updates(timeout=1)
            assert updates[0].message.text == "hello" and updates[0].message.chat.id == 42
            assert await bot.get_updates(offset=updates[-1].update_id + 1, timeout=0) == ()
            photo = await bot.send_photo(42, photo=b"\x89PNG fake bytes", caption="hi")
            again = await bot.send_photo(42, photo=photo.photo[-1].file_id)
            assert again.photo[-1].file_id == photo.photo[-1].file_id
            telegram.fail_next("sendMessage", 429, retry_after=3)
            with pytest.raises(telegram_lib.error.RetryAfter) as limited:
                await bot.send_message(42, "x")
            assert limited.value.retry_after in (3, __import__("datetime").timedelta(seconds=3))
            assert await bot.set_webhook("https://example.org/hook", secret_token="s3cret")
            with pytest.raises(telegram_lib.error.Conflict):
                await bot.get_updates()

    asyncio.run(scenario())
    assert telegram.sent_to(42)[0]["uploaded"] is True and telegram.sent_to(42)[1]["uploaded"] is False
    time.sleep(0)


def test_the_bot_token_never_reaches_a_log_or_an_answer(sessions, account, telegram, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    uid = new_user_id()
    _bound(sessions, account, uid)
    telegram.fail_next("sendPhoto", 400, "Bad Request: chat not found")
    from mewdex.channels import delivery

    with sessions.begin() as session:
        delivery.send_meme(session, user_id=account.user_id, channel="telegram", meme_id=account.memes["cat one"])
    drain(sessions, account)
    with client_for(account.scope) as client:
        answers = client.get("/api/v1/channels").text + client.get("/api/v1/channels/deliveries").text
    assert "chat not found" in answers
    secret_part = telegram.token.split(":", 1)[1]
    assert secret_part not in caplog.text and secret_part not in answers


def test_the_fake_pushes_webhooks_with_the_secret_to_a_live_server(sessions, account, telegram, settings_env):
    """Webhook mode over real HTTP: the app serves on a port, the fake Telegram posts each update to
    the registered URL with the secret header; a push with another secret is refused."""
    import socket
    import threading

    import uvicorn

    from conftest import app_for, wait_until
    from mewdex.channels.telegram import inbound as tg

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings_env(MEWDEX_PUBLIC_URL=f"http://127.0.0.1:{port}")
    server = uvicorn.Server(
        uvicorn.Config(app_for(None), host="127.0.0.1", port=port, log_level="warning", proxy_headers=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 60, 0.1, "the app to serve")
        assert tg.ensure_mode(sessions) == "webhook"
        uid = new_user_id()
        _bound(sessions, account, uid)
        telegram.user_message(uid, "slacking")
        assert telegram.pushes == [200]
        drain(sessions, account)
        [meme] = telegram.sent_to(uid)
        assert meme["method"] == "sendPhoto" and "slacking" in meme["caption"]
        telegram.webhook["secret_token"] = "forged"
        telegram.user_message(uid, "cat")
        assert telegram.pushes == [200, 401]
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        settings_env(MEWDEX_PUBLIC_URL="")
        tg.ensure_mode(sessions)


def test_without_a_token_telegram_is_offered_as_not_configured(account, settings_env):
    settings_env(MEWDEX_TELEGRAM_BOT_TOKEN="")
    with client_for(account.scope) as client:
        channels = {c["name"]: c for c in client.get("/api/v1/channels").json()["channels"]}
        assert channels["telegram"]["configured"] is False and channels["webhook"]["configured"] is True
        refused = client.post("/api/v1/channels/telegram/link")
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "channel_not_configured"
        page = client.get("/settings/channels")
        assert page.status_code == 200 and 'data-telegram-state="not-configured"' in page.text


def test_a_photo_is_fetched_from_telegram_and_searched_by_image(sessions, account, telegram):
    from channel_helpers import image_bytes

    uid = new_user_id()
    _bound(sessions, account, uid)
    telegram.user_message(uid, None, photo=image_bytes("png", seed=7))
    poll(sessions)
    drain(sessions, account)
    assert [c["method"] for c in telegram.calls if c["method"] == "getFile"] == ["getFile"]
    replies = telegram.sent_to(uid)
    assert replies, "the photo is answered"
    first = replies[0]
    assert (first.get("caption") or first.get("text") or "").startswith(("These memes look like", "No memes look like"))


def test_a_link_is_confirmed_in_the_chat(sessions, account, other_account, telegram):
    """Binding fixation: a link someone else sent does not bind the chat that opens it until that
    chat says YES to the named account; until then it answers nothing but the question, and the
    chat's own account can still link it. The Channels page lists the linked chat with Remove."""
    from mewdex.channels import delivery
    from mewdex.channels.errors import ChannelError
    from mewdex.db.models import User

    fake, uid = telegram, new_user_id()

    def say(text: str, acct) -> str:
        fake.user_message(uid, text)
        poll(sessions)
        drain(sessions, acct)
        return fake.sent_to(uid)[-1].get("text") or ""

    with client_for(other_account.scope) as client:  # the attacker's link, sent to the victim
        question = say(f"/start {client.post('/api/v1/channels/telegram/link').json()['code']}", other_account)
        with sessions.begin() as session:
            email = session.get(User, other_account.user_id).email
        assert f"{email[0]}…@example.com" in question and "Reply YES" in question and email not in question
        assert "Reply YES" in say("cat", other_account), "a pending link answers only its question"
        assert not [m for m in fake.sent_to(uid) if m["method"] in ("sendPhoto", "sendAnimation")]
        [pending] = [b for b in client.get("/api/v1/channels").json()["bindings"] if b["channel"] == "telegram"]
        assert pending["config"]["pending_confirmation"] is True
        with sessions.begin() as session, pytest.raises(ChannelError):
            delivery.send_text(session, user_id=other_account.user_id, channel="telegram", text="spy")

    with client_for(account.scope) as client:  # the chat's owner links it to their own account: it may
        assert "Reply YES" in say(f"/start {client.post('/api/v1/channels/telegram/link').json()['code']}", account)
        assert "Linked" in say("YES", account)
        page = client.get("/settings/channels").text
    assert f'data-linked="{uid}"' in page and 'data-action="revoke-channel"' in page


def test_a_disabled_owner_chat_gets_nothing_until_enabled(sessions, account, telegram):
    """The owner rule on Telegram's paths: while the account is disabled its linked chat's messages
    are dropped (no answer, nothing queued in its scope), sends to it are refused and a send queued
    before is cancelled; enabling restores the chat as it was (the link kept)."""
    from mewdex.channels import delivery
    from mewdex.channels.errors import ChannelError
    from mewdex.db.models import User
    from mewdex.platform import users

    fake, uid = telegram, new_user_id()
    bind(sessions, account, fake, uid)
    with sessions.begin() as session:
        queued = delivery.send_text(session, user_id=account.user_id, channel="telegram", text="later").delivery_id
        users.set_disabled(session, session.get(User, account.user_id), True)
    try:
        before = len(fake.sent_to(uid))
        fake.user_message(uid, "cat")
        poll(sessions)
        drain(sessions, account)
        assert fake.sent_to(uid)[before:] == [], "a disabled owner's chat is answered by nothing"
        with sessions.begin() as session:
            assert session.get(ChannelDelivery, queued).status == "cancelled"
            with pytest.raises(ChannelError) as refused:
                delivery.send_text(session, user_id=account.user_id, channel="telegram", text="x")
            assert refused.value.code == "channel_owner_disabled"
    finally:
        with sessions.begin() as session:
            users.set_disabled(session, session.get(User, account.user_id), False)
    fake.user_message(uid, "cat")
    poll(sessions)
    drain(sessions, account)
    assert any(m["method"] in ("sendPhoto", "sendAnimation") for m in fake.sent_to(uid)[before:])
    with client_for(account.scope) as client:
        assert client.delete("/api/v1/channels/telegram").status_code == 200


def test_a_link_waiting_for_the_chats_yes_can_be_removed(sessions, account, telegram):
    """Remove on a pending link (the code used, the chat not yet asked YES) revokes it: a YES that
    comes after links nothing and the chat is answered as unbound."""
    fake, uid = telegram, new_user_id()
    with client_for(account.scope) as client:
        link = client.post("/api/v1/channels/telegram/link").json()
        fake.user_message(uid, f"/start {link['code']}")
        poll(sessions)
        drain(sessions, account)
        assert "Reply YES" in fake.sent_to(uid)[-1]["text"]
        removed = client.delete("/api/v1/channels/telegram")
        assert removed.status_code == 200 and removed.json()["status"] == "revoked", removed.text
        fake.user_message(uid, "yes")
        poll(sessions)
        drain(sessions, account)
        assert "not linked" in fake.sent_to(uid)[-1]["text"]
        bindings = client.get("/api/v1/channels").json()["bindings"]
        assert not [b for b in bindings if b["channel"] == "telegram" and b["status"] == "active"]


def test_polls_that_piled_up_without_a_worker_are_skipped_and_the_current_one_polls(sessions, telegram, monkeypatch):
    """One ``telegram_polling`` task is queued per slot while no worker runs; a worker that comes back runs
    only the current slot's poll (and the one before), not every late one for its whole length."""
    from datetime import UTC, datetime

    from mewdex.channels import polling
    from mewdex.channels.registry import ADAPTERS
    from mewdex.config import get_settings
    from mewdex.library.scopes import ensure_scope
    from mewdex.queue.registry import submit
    from mewdex.queue.worker import Worker

    monkeypatch.setenv("MEWDEX_TELEGRAM_POLL_SECONDS", "2")  # the current poll runs this long
    get_settings.cache_clear()
    schedule = polling._schedule(ADAPTERS["telegram"])
    now = schedule.slot(datetime.now(UTC))
    ids = {}
    with sessions.begin() as session:
        ensure_scope(session, ScopeContext(schedule.scope_id))  # as every start-up makes it
        for slot in (now - 30, now):
            ids[slot] = submit(
                session,
                scope_id=schedule.scope_id,
                task_type=schedule.task_type,
                payload={"slot": slot},
                dedupe_key=f"test-poll:{slot}",
                submission_mode="standalone",
            ).id
    worker = Worker(sessions, name="pytest-polls", lanes=[polling.lane_of("telegram")])
    results = {}
    while worker.run_once():
        pass
    from mewdex.db.models.queue import Task

    with sessions.begin() as session:
        for slot, task_id in ids.items():
            task = session.get(Task, task_id)
            results[slot] = (task.status, task.result)
    assert results[now - 30] == ("succeeded", {"skipped": "a later poll is due"})
    assert results[now][0] == "succeeded" and results[now][1]["mode"] == "polling"
    assert [c["method"] for c in telegram.calls].count("getUpdates") >= 1


def test_a_stopping_worker_gives_its_long_poll_back_at_once(sessions, telegram, mewdex_env):
    """SIGTERM during a ``getUpdates`` long poll: the worker does not wait out the poll (nor its grace
    period), exits 0 within seconds, and the poll task is back in the queue for the next worker."""
    from datetime import UTC, datetime

    from mewdex.channels import polling
    from mewdex.channels.registry import ADAPTERS
    from mewdex.db.models.queue import Task
    from mewdex.library.scopes import ensure_scope
    from mewdex.queue.registry import submit
    from queue_helpers import log_tail, start_workers, stop_workers

    schedule = polling._schedule(ADAPTERS["telegram"])
    with sessions.begin() as session:
        ensure_scope(session, ScopeContext(schedule.scope_id))
        task_id = submit(
            session,
            scope_id=schedule.scope_id,
            task_type=schedule.task_type,
            payload={"slot": schedule.slot(datetime.now(UTC))},
            dedupe_key=f"test-stop-poll:{uuid.uuid4().hex}",
            submission_mode="standalone",
        ).id
    extra = {
        "MEWDEX_TELEGRAM_BOT_TOKEN": telegram.token,
        "MEWDEX_TELEGRAM_API_URL": telegram.url,
        "MEWDEX_EGRESS_ALLOW_HOSTS": json.dumps([f"127.0.0.1:{telegram.port}"]),
        "MEWDEX_TELEGRAM_POLL_SECONDS": "50",  # one getUpdates of up to 50 s
        "MEWDEX_WORKER_GRACE_SECONDS": "60",  # what the worker would wait for a task that is not abandonable
    }
    [proc] = start_workers(mewdex_env, 1, concurrency=1, lanes=polling.lane_of("telegram"), extra_env=extra)
    try:
        wait_until(
            lambda: any(c["method"] == "getUpdates" and float(c["params"].get("timeout") or 0) > 0
                        for c in telegram.calls),
            120, 0.1, "the worker's long poll",
        )  # fmt: skip
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        stopped_in = time.monotonic() - started
    finally:
        stop_workers([proc])
    assert proc.returncode == 0, log_tail(proc)
    assert stopped_in < 15, (stopped_in, log_tail(proc))  # the poll would have held it for up to 50 s
    with sessions.begin() as session:
        task = session.get(Task, task_id)
        assert (task.status, task.lease_owner) == ("queued", None)
        assert "released by a stopping worker" in (task.message or "")
