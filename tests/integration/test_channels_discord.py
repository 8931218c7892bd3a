"""Discord against the fake Discord: the app serves on a port and the fake POSTs signed interactions
to it over real HTTP, as Discord does; mewdex's answers and follow-ups go to the fake's API.

Covered: connecting an application by its bot token (its key and id come from Discord), registering
the commands, a bad or missing signature (401), PING, a replayed interaction, a stranger gets the
how-to-link reply, linking by code, ``/meme`` (deferred, then the meme attached with an "Another"
button; pressing it updates the message to the next meme; no more → an ephemeral follow-up), the
message command, scheduled memes to the chosen channel (a 429 retried, a 403 in the log), and a
disabled owner's application answering nothing from the library."""

from __future__ import annotations

import json
import socket
import threading

import httpx
import pytest
from sqlalchemy import select, text

from conftest import app_for, drain_queue, drop_scope, new_scope, wait_until
from fakes.discord_server import FakeDiscord, snowflake
from mewdex.db.models import ChannelDelivery, ScopeContext

pytestmark = pytest.mark.usefixtures("quick_pacing")  # sends to one chat 0.05 s apart (channel_helpers)

SYSTEM = ScopeContext("__system__")
DEFERRED, DEFERRED_UPDATE, MESSAGE, UPDATE_MESSAGE, EPHEMERAL = 5, 6, 4, 7, 64


class Live:
    """The app serving on a port of this machine (one per module): Discord's side posts to it, and the
    set-up calls go to it as :attr:`scope` (the test's account)."""

    def __init__(self) -> None:
        import uvicorn

        from mewdex.web.deps import current_scope, streaming_scope

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url, self.scope = f"http://127.0.0.1:{port}", None
        app = app_for(None)
        app.dependency_overrides[current_scope] = app.dependency_overrides[streaming_scope] = lambda: self.scope
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", proxy_headers=False)
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started, 60, 0.1, "the app to serve")
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def close(self) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def live(mewdex_env):
    server = Live()
    yield server
    server.close()


@pytest.fixture
def discord(settings_env, live, account):
    """A fake Discord with an application of its own (a new one each test) that mewdex talks to; the
    app answers set-up calls as ``account``."""
    with FakeDiscord() as fake:
        settings_env(
            MEWDEX_DISCORD_API_URL=fake.api_url,
            MEWDEX_PUBLIC_URL=live.url,
            MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([f"127.0.0.1:{fake.port}"]),
        )
        fake.endpoint = f"{live.url}/channels/discord/{fake.application_id}/interactions"
        live.scope = account.scope
        fake.web = live.client
        yield fake


def drain(sessions, acct) -> None:
    drain_queue(sessions, acct.scope, SYSTEM, timeout=120)


def connect(fake, **extra) -> dict:
    answer = fake.web.put("/api/v1/channels/discord", json={"bot_token": fake.bot_token, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()


def link(fake, user: str) -> None:
    """``user`` runs ``/link`` with a new code of the account and confirms it with the button."""
    code = fake.web.post("/api/v1/channels/discord/code").json()
    status, answer = fake.deliver(fake.endpoint, fake.slash(user, "link", code=code["code"]))
    assert status == 200 and answer["type"] == MESSAGE and "Yes, link" in json.dumps(answer), answer
    status, answer = fake.deliver(fake.endpoint, fake.press(user, answer["data"]))
    assert status == 200 and answer["type"] == UPDATE_MESSAGE and "Linked" in answer["data"]["content"], answer


def meme_query(sessions, acct, fake, interaction) -> dict:
    """Deliver ``interaction``, expect a deferred answer, let the worker fill it in; mewdex's edit."""
    status, answer = fake.deliver(fake.endpoint, interaction)
    assert status == 200 and answer["type"] in (DEFERRED, DEFERRED_UPDATE), answer
    drain(sessions, acct)
    [edit] = fake.answers(interaction["token"])
    return edit


def test_connect_link_meme_another_and_the_message_command(sessions, account, discord):
    fake, owner, stranger = discord, snowflake(), snowflake()
    card = connect(fake)
    assert card["application_id"] == fake.application_id and card["application_name"] == fake.name
    assert card["endpoint_url"] == fake.endpoint and card["loopback"] is True, "127.0.0.1: Discord cannot reach it"
    assert (card["commands_registered"], card["linked"]) == (False, False)
    client = fake.web
    registered = client.post("/api/v1/channels/discord/commands")
    assert registered.status_code == 200, registered.text
    listed = client.get("/api/v1/channels").text
    page = client.get("/settings/channels")
    assert [c["name"] for c in fake.commands] == ["meme", "link", "Find a meme for this", "Save to mewdex"]
    assert [c["type"] for c in fake.commands] == [1, 1, 3, 3]
    assert fake.commands[0]["description_localizations"]["zh-CN"] and fake.commands[2]["name_localizations"]["zh-CN"]
    assert fake.bot_token not in listed and fake.bot_token not in page.text
    assert 'data-channel="discord"' in page.text and fake.endpoint in page.text, "the card shows the endpoint URL"
    assert 'data-warning="public-url"' in page.text and "/static/channel_card.js" in page.text
    assert 'data-channel-form="discord-channel"' in page.text and 'data-action="discord-commands"' in page.text
    guide = client.get("/help/channels/discord")
    assert guide.status_code == 200 and "Interactions Endpoint URL" in guide.text

    # Discord's checks of the endpoint: unsigned and wrongly signed requests are 401, PING is PONG.
    assert fake.deliver(fake.endpoint, fake.ping(), unsigned=True)[0] == 401
    status, answer = fake.deliver(fake.endpoint, fake.ping(), bad_signature=True)
    assert (status, answer["error"]["code"]) == (401, "channel_webhook_secret_invalid")
    assert fake.deliver(f"{fake.endpoint[: -len('/interactions')]}0/interactions", fake.ping())[0] == 401
    assert fake.deliver(fake.endpoint, fake.ping()) == (200, {"type": 1})

    # Nobody is linked yet: whoever uses the command gets how to link, nothing from the library.
    status, answer = fake.deliver(fake.endpoint, fake.slash(owner, "meme", query="cat"))
    assert status == 200 and answer["type"] == MESSAGE and answer["data"]["flags"] == EPHEMERAL
    assert "not linked" in answer["data"]["content"] and "/link" in answer["data"]["content"]
    wrong = fake.deliver(fake.endpoint, fake.slash(owner, "link", code="not-a-code"))[1]
    assert "expired" in wrong["data"]["content"]
    link(fake, owner)
    assert client.get("/api/v1/channels/discord").json()["linked"] is True
    [binding] = [b for b in client.get("/api/v1/channels").json()["bindings"] if b["channel"] == "discord"]
    assert binding["identity"] == f"{fake.application_id}:{owner}"
    status, answer = fake.deliver(fake.endpoint, fake.slash(stranger, "meme", query="cat"))
    assert answer["data"]["flags"] == EPHEMERAL and "not linked" in answer["data"]["content"]
    zh = fake.slash(stranger, "meme", query="cat")
    zh["locale"] = "zh-CN"
    assert "还没有绑定" in fake.deliver(fake.endpoint, zh)[1]["data"]["content"]

    # /meme: deferred, then the best meme attached, with an "Another" button.
    command = fake.slash(owner, "meme", query="cat")
    first = meme_query(sessions, account, fake, command)
    assert first["kind"] == "edit" and [f for f, _ in first["files"]] == ["meme.png"]
    [button] = first["payload"]["components"][0]["components"]
    assert (button["type"], button["label"], button["custom_id"]) == (2, "Another", "another:1:cat")
    assert "cat" in first["payload"]["content"]
    assert fake.deliver(fake.endpoint, command)[0] == 409, "a replayed interaction is refused"

    # Another: the message is updated in place with the next meme.
    seen = {first["files"][0][1]}
    message = first["payload"]
    for index in (2, 3):
        edit = meme_query(sessions, account, fake, fake.press(owner, message))
        assert edit["kind"] == "edit" and edit["files"][0][1] not in seen, "another never repeats a meme"
        seen.add(edit["files"][0][1])
        message = edit["payload"]
        assert message["components"][0]["components"][0]["custom_id"] == f"another:{index}:cat"
    assert fake.deliver(fake.endpoint, fake.press(stranger, message))[1]["type"] == MESSAGE, "a stranger's press"
    last = fake.press(owner, {**message, "components": [{"type": 1, "components": [{"custom_id": "another:9:cat"}]}]})
    no_more = meme_query(sessions, account, fake, last)
    assert no_more["kind"] == "followup" and no_more["payload"]["flags"] == EPHEMERAL
    assert "No more memes" in no_more["payload"]["content"]

    # The message command: the target message's text is the query.
    gif = meme_query(sessions, account, fake, fake.message_command(owner, "dancing cat gif"))
    assert [f for f, _ in gif["files"]] == ["meme.gif"] and gif["payload"]["content"] == "dancing cat gif"
    empty = fake.deliver(fake.endpoint, fake.message_command(owner, ""))[1]
    assert empty["type"] == MESSAGE and "no text" in empty["data"]["content"]


def test_scheduled_memes_go_to_the_chosen_channel(sessions, account, discord):
    from mewdex.channels import delivery
    from mewdex.channels.errors import ChannelError

    fake = discord
    connect(fake)
    with sessions.begin() as session, pytest.raises(ChannelError) as no_channel:
        delivery.send_meme(session, user_id=account.user_id, channel="discord", meme_id=account.memes["cat one"])
    assert no_channel.value.code == "channel_config_invalid", "no channel chosen: refused, not queued"
    [channel] = fake.channels
    assert fake.web.put("/api/v1/channels/discord/channel", json={"channel_id": "abc"}).status_code == 422
    chosen = fake.web.put("/api/v1/channels/discord/channel", json={"channel_id": channel})
    assert chosen.status_code == 200 and chosen.json()["channel_id"] == channel

    fake.fail_next("message", 429, retry_after=1)
    with sessions.begin() as session:
        first = delivery.send_meme(
            session, user_id=account.user_id, channel="discord", meme_id=account.memes["dancing cat"], caption="daily"
        ).delivery_id
    drain(sessions, account)
    [sent] = fake.messages(channel)
    assert sent["payload"]["content"] == "daily" and [f for f, _ in sent["files"]] == ["meme.gif"]
    with sessions.begin() as session:
        row = session.get(ChannelDelivery, first)
        assert (row.status, row.attempts, row.platform_message_id is not None) == ("sent", 2, True)

    fake.forbidden.add(channel)
    with sessions.begin() as session:
        blocked = delivery.send_text(session, user_id=account.user_id, channel="discord", text="hi").delivery_id
    drain(sessions, account)
    with sessions.begin() as session:
        row = session.get(ChannelDelivery, blocked)
        assert (row.status, row.error_code, row.platform_code) == ("failed", "channel_blocked", "50013")


def test_a_disabled_owner_gets_nothing(sessions, account, discord):
    from mewdex.channels import delivery
    from mewdex.channels.errors import ChannelError
    from mewdex.db.models import User
    from mewdex.platform import users

    fake, owner = discord, snowflake()
    [channel] = fake.channels
    connect(fake, channel_id=channel)
    link(fake, owner)
    pending = fake.slash(owner, "meme", query="cat")
    assert fake.deliver(fake.endpoint, pending)[1]["type"] == DEFERRED
    with sessions.begin() as session:
        users.set_disabled(session, session.get(User, account.user_id), True)
    try:
        drain(sessions, account)
        [edit] = fake.answers(pending["token"])
        assert edit["files"] == [] and "not available" in edit["payload"]["content"], "the deferred answer says so"
        status, answer = fake.deliver(fake.endpoint, fake.slash(owner, "meme", query="cat"))
        assert status == 200 and "not available" in answer["data"]["content"]
        with sessions.begin() as session, pytest.raises(ChannelError) as refused:
            delivery.send_meme(session, user_id=account.user_id, channel="discord", meme_id=account.memes["cat one"])
        assert refused.value.code == "channel_owner_disabled"
        drain(sessions, account)
        assert not [e for e in fake.sent if e["files"]], "no meme went anywhere"
    finally:
        with sessions.begin() as session:
            users.set_disabled(session, session.get(User, account.user_id), False)


def test_a_token_discord_refuses_and_an_application_another_account_holds(sessions, discord, live):
    fake = discord
    bad = fake.web.put("/api/v1/channels/discord", json={"bot_token": "x" * 60})
    assert (bad.status_code, bad.json()["error"]["code"]) == (422, "channel_config_invalid")
    assert "x" * 60 not in bad.text
    connect(fake)
    live.scope = new_scope(sessions, "t-dc")
    try:
        taken = fake.web.put("/api/v1/channels/discord", json={"bot_token": fake.bot_token})
        assert (taken.status_code, taken.json()["error"]["code"]) == (409, "channel_identity_taken")
    finally:
        drop_scope(sessions, live.scope)


def test_a_code_sent_to_another_accounts_application_stays_usable(sessions, discord, live, other_account):
    """Issue 40, finding 8: a one-time code is used up only by the request allowed to use it — the
    scope check comes first, so another account's code sent to this application is refused and
    still links on its own account."""
    from mewdex.channels import bindings

    fake, person = discord, snowflake()
    connect(fake)
    mine = live.scope
    live.scope = other_account.scope
    try:
        theirs = fake.web.post("/api/v1/channels/discord/code").json()["code"]
    finally:
        live.scope = mine
    answer = fake.deliver(fake.endpoint, fake.slash(person, "link", code=theirs))[1]
    assert "not for this app" in answer["data"]["content"], answer
    assert fake.web.get("/api/v1/channels/discord").json()["linked"] is False
    with sessions.begin() as session:  # the code's own account can still use it
        used = bindings.redeem_bind_code(session, "discord", theirs, scope_id=other_account.scope.scope_id)
        assert used.scope_id == other_account.scope.scope_id


def test_link_waits_for_the_persons_press(sessions, account, discord):
    """Issue 40, finding 8: ``/link`` asks, as every channel does; until the person who ran it presses
    "Yes, link" nothing comes from the library, and nobody else's press confirms it."""
    fake, person, stranger = discord, snowflake(), snowflake()
    connect(fake)
    code = fake.web.post("/api/v1/channels/discord/code").json()["code"]
    status, question = fake.deliver(fake.endpoint, fake.slash(person, "link", code=code))
    assert status == 200 and question["data"]["flags"] == EPHEMERAL
    assert "@example.com" in question["data"]["content"], "the question names the account"
    assert fake.web.get("/api/v1/channels/discord").json()["linked"] is False
    again = fake.deliver(fake.endpoint, fake.slash(person, "meme", query="cat"))[1]
    assert again["type"] == MESSAGE and "Yes, link" in json.dumps(again), "unconfirmed: asked again, no search"
    drain(sessions, account)
    assert not [e for e in fake.sent if e["files"]], "nothing from the library before the press"
    other = fake.deliver(fake.endpoint, fake.press(stranger, question["data"]))[1]
    assert other["type"] == MESSAGE and "not linked" in other["data"]["content"]
    assert fake.web.get("/api/v1/channels/discord").json()["linked"] is False, "a stranger's press confirms nothing"
    confirmed = fake.deliver(fake.endpoint, fake.press(person, question["data"]))[1]
    assert confirmed["type"] == UPDATE_MESSAGE and "Linked" in confirmed["data"]["content"]
    assert fake.web.get("/api/v1/channels/discord").json()["linked"] is True
    edit = meme_query(sessions, account, fake, fake.slash(person, "meme", query="cat"))
    assert edit["files"], "linked and confirmed: the library answers"


def test_two_accounts_connecting_one_application_at_once(sessions, account, other_account, discord):
    """Issue 40, finding 8: an application belongs to one binding. Two accounts connecting it at the
    same moment both passed the check before; now the unique index decides and the second gets
    ``channel_identity_taken`` (not a 500, not a second binding)."""
    from mewdex.channels.discord import setup
    from mewdex.channels.errors import ChannelError

    fake = discord
    first = sessions()
    first.begin()
    setup.connect(first, scope_id=account.scope.scope_id, user_id=account.user_id, bot_token=fake.bot_token)
    outcome: dict = {}

    def second() -> None:
        try:
            with sessions.begin() as session:
                setup.connect(
                    session,
                    scope_id=other_account.scope.scope_id,
                    user_id=other_account.user_id,
                    bot_token=fake.bot_token,
                )
            outcome["result"] = "connected"
        except ChannelError as exc:
            outcome["result"] = exc.code
        except Exception as exc:  # noqa: BLE001 — the old failure: an IntegrityError or a second binding
            outcome["result"] = type(exc).__name__

    thread = threading.Thread(target=second)
    thread.start()
    thread.join(timeout=3)  # it waits on the first's uncommitted row (or, before the fix, just passes)
    first.commit()
    first.close()
    thread.join(timeout=30)
    assert outcome["result"] == "channel_identity_taken", outcome
    with sessions.begin() as session:
        holders = (
            session.execute(
                text(
                    "SELECT scope_id FROM channel_bindings WHERE channel = 'discord' AND status = 'active'"
                    " AND config ->> 'application_id' = :a"
                ),
                {"a": fake.application_id},
            )
            .scalars()
            .all()
        )
    assert holders == [account.scope.scope_id]


def test_a_waiting_interaction_token_is_rotated_with_the_other_secrets(sessions, account, discord):
    """Issue 40, finding 10: a deferred interaction's token rides sealed in its task's payload, a field
    of the sealed-field registry: ``mewdex secrets rotate`` while it waits re-seals it, the old key is
    dropped, and the answer still reaches Discord."""
    from mewdex.db.models import Task
    from mewdex.providers import sealed_fields, secrets

    fake, owner = discord, snowflake()
    connect(fake)
    link(fake, owner)
    waiting = fake.slash(owner, "meme", query="cat")
    assert fake.deliver(fake.endpoint, waiting)[1]["type"] == DEFERRED
    old_kid = secrets.active_key_id()

    def sealed_kid() -> str:
        with sessions.begin() as session:
            payload = session.execute(
                select(Task.payload).where(
                    Task.scope_id == account.scope.scope_id, Task.task_type == "discord_interaction"
                )
            ).scalar_one()
        return payload["token"]["kid"]

    assert sealed_kid() == old_kid
    result = sealed_fields.rotate(sessions)
    assert sealed_kid() == result["active"] != old_kid
    assert old_kid not in secrets.ring_key_ids(), "nothing references the old key: dropped"
    drain(sessions, account)
    [edit] = fake.answers(waiting["token"])
    assert edit["kind"] == "edit" and edit["files"], "the re-sealed token still answers"
    assert waiting["token"] not in json.dumps(sealed_fields.status(sessions))


def save_command(fake, user_id: str, url: str) -> dict:
    """The message command "Save to mewdex" on a message with an image attached at ``url``."""
    target = snowflake()
    attachment = {"id": snowflake(), "filename": "meme.png", "url": url, "content_type": "image/png"}
    message = {"id": target, "content": "", "author": {"id": snowflake()}, "attachments": [attachment]}
    data = {"id": snowflake(), "name": "Save to mewdex", "type": 3, "target_id": target,
            "resolved": {"messages": {target: message}}}  # fmt: skip
    return fake._interaction(2, user_id, data, locale="zh-CN")


def test_save_to_mewdex_saves_for_the_linked_person_only(sessions, account, discord, settings_env, media_server):
    """The linked person's "Save to mewdex" on a message saves its attachment through the upload path
    (the chat is told in its language), the same again is 已有同款, and someone else's saves nothing."""
    from channel_helpers import image_bytes, saved_memes, sha256

    fake, owner, stranger = discord, snowflake(), snowflake()
    settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([f"127.0.0.1:{fake.port}", media_server.host]))
    connect(fake)
    link(fake, owner)
    data = image_bytes("png", seed=4401)
    channel = next(iter(fake.channels))

    def save(user: str) -> tuple[dict, list[str]]:
        before = len(fake.messages(channel))
        status, answer = fake.deliver(fake.endpoint, save_command(fake, user, media_server.url(data)))
        assert status == 200 and answer["type"] == MESSAGE and answer["data"]["flags"] == EPHEMERAL, answer
        drain(sessions, account)
        return answer, [m["payload"].get("content", "") for m in fake.messages(channel)[before:]]

    answer, said = save(owner)
    assert answer["data"]["content"] == "正在收藏…" and "秒后可以搜到" in said[-1]
    assert sha256(data) in saved_memes(sessions, account)
    count = len(saved_memes(sessions, account))
    _answer, said = save(owner)
    assert said == [f"已有同款：{saved_memes(sessions, account)[sha256(data)]}"]
    answer, said = save(stranger)
    assert answer["data"]["content"] == "只有这个 mewdex 表情库的主人才能在这里收藏表情。" and said == []
    assert len(saved_memes(sessions, account)) == count


def test_an_interaction_is_answered_as_a_logged_delivery_and_not_late(sessions, account, discord):
    """Issue 41 step 2: an interaction's answer is a reply mode of the shared path — a delivery in the
    log (its token sealed in the task's payload), no turn of the chat's conversation — and an answer
    past the token's life fails ``channel_reply_expired`` instead of reaching Discord."""
    import time

    from mewdex.channels import bindings, delivery
    from mewdex.channels.base import Reply, ReplyMode
    from mewdex.db.models import Task

    fake, owner = discord, snowflake()
    connect(fake)
    link(fake, owner)
    command = fake.slash(owner, "meme", query="cat")
    assert meme_query(sessions, account, fake, command)["files"]
    with sessions.begin() as session:
        row = session.execute(
            select(ChannelDelivery)
            .where(ChannelDelivery.scope_id == account.scope.scope_id, ChannelDelivery.channel == "discord")
            .order_by(ChannelDelivery.created_at.desc())
            .limit(1)
        ).scalar_one()
        assert (row.status, row.kind, row.source, row.conversation_id) == ("sent", "meme", "assistant", None)
        assert row.target == command["channel_id"]
        payload = session.get(Task, row.task_id).payload
        binding = bindings.get(session, account.scope.scope_id, "discord")
        assert not (binding.config or {}).get("chat_task_id"), "no standing conversation was made for it"
        late = ReplyMode("interaction", "late-token", query="cat", app=fake.application_id, deadline=time.time() - 1)
        expired = delivery.reply_in_place(session, binding, "discord", row.target, Reply("late", mode=late))
        expired_id = expired.delivery_id
    assert payload["reply"]["kind"] == "interaction" and payload["reply_token"]["kid"]
    assert command["token"] not in json.dumps(payload), "the token rides sealed"
    drain(sessions, account)
    with sessions.begin() as session:
        gone = session.get(ChannelDelivery, expired_id)
        assert (gone.status, gone.error_code) == ("failed", "channel_reply_expired")
    assert fake.answers("late-token") == []
