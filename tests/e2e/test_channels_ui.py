"""The Channels page in a real browser against a real ``mewdex serve`` with a worker process: Telegram
through the fake Bot API server in long-polling mode (the worker's scheduled ``telegram_polling``
task), linked from the page with the deep link, a message answered with memes, the delivery log
with a success and a platform error, the webhook added with its secret shown once, unlink; and
screenshots (desktop and 375 px, en and zh)."""

from __future__ import annotations

import json
import random
import uuid

import pytest

from channel_helpers import add_meme
from conftest import drop_scope, new_scope, wait_until
from fakes.telegram_server import FakeTelegram
from fakes.webhook_receiver import WebhookReceiver
from mewdex.dto import i18n
from ui_helpers import DESKTOP, SCREENSHOTS, start_server

NARROW = {"width": 375, "height": 812}


@pytest.fixture(scope="module")
def channel_server(mewdex_env, sessions, store, tmp_path_factory):
    fake = FakeTelegram(token=f"{random.randrange(10**8, 10**9)}:AAFake{uuid.uuid4().hex}")
    receiver = WebhookReceiver()
    scope = new_scope(sessions, "t-chui")
    for name in ("cat one", "cat two", "cat three"):
        add_meme(sessions, store, scope, name)
    add_meme(sessions, store, scope, "dancing cat", "gif")
    mp = pytest.MonkeyPatch()
    mp.setenv("MEWDEX_TELEGRAM_BOT_TOKEN", fake.token)
    mp.setenv("MEWDEX_TELEGRAM_API_URL", fake.url)
    mp.setenv("MEWDEX_TELEGRAM_POLL_SECONDS", "2")
    mp.setenv("MEWDEX_EGRESS_ALLOW_HOSTS", json.dumps([f"127.0.0.1:{fake.port}", f"127.0.0.1:{receiver.port}"]))
    try:
        server = start_server(mewdex_env, scope, tmp_path_factory.mktemp("serve") / "channels.log", workers=1)
    finally:
        mp.undo()
    yield server, fake, receiver
    server.stop()
    fake.close()
    receiver.close()
    drop_scope(sessions, scope)


def _page(browser, viewport=DESKTOP, locale="en-US"):
    context = browser.new_context(viewport=viewport, locale=locale)
    context.set_default_timeout(20_000)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("dialog", lambda dialog: dialog.accept())
    return context, pg, errors


def test_link_telegram_chat_log_webhook_and_unlink(browser, channel_server):
    server, fake, receiver = channel_server
    uid = random.randrange(10**9, 10**10)
    context, pg, errors = _page(browser)
    try:
        pg.goto(server.url + "/settings/channels")
        pg.click("#channel-telegram [data-action='telegram-link']")
        link = pg.wait_for_selector("#channel-telegram .telegram-link a[href^='https://t.me/']").get_attribute("href")
        assert link.startswith(f"https://t.me/{fake.username}?start=")
        fake.user_message(uid, "/start " + link.split("start=", 1)[1])
        wait_until(lambda: fake.sent_to(uid), 60, 0.3, "the bind question (worker polls Telegram)")
        assert "Reply YES" in fake.sent_to(uid)[0]["text"]
        fake.user_message(uid, "YES")
        wait_until(lambda: len(fake.sent_to(uid)) >= 2, 60, 0.3, "the bind confirmation")
        fake.user_message(uid, "cat")
        wait_until(lambda: len(fake.sent_to(uid)) >= 5, 60, 0.3, "three memes back")
        fake.blocked.add(str(uid))
        fake.user_message(uid, "dancing")
        pg.reload()
        wait_until(
            lambda: server.get("/api/v1/channels/deliveries").json()["deliveries"][0]["status"] == "failed",
            60,
            0.3,
            "the blocked send to be logged as failed",
        )
        fake.blocked.discard(str(uid))
        pg.reload()
        assert pg.locator("#channel-telegram .channel-state.ok").count() == 1
        linked = pg.locator(f"table.linked tr[data-channel='telegram'][data-linked='{uid}']")
        assert linked.count() == 1 and linked.locator("[data-action='revoke-channel']").count() == 1
        assert pg.locator("table.deliveries tr[data-status='sent']").count() >= 4
        assert pg.locator("table.deliveries tr[data-status='failed']").count() == 1
        assert "channel_blocked" in pg.inner_text("table.deliveries tr[data-status='failed']")

        pg.fill("#channel-webhook input[name='url']", receiver.url)
        pg.click("#channel-webhook button[type='submit']")
        secret = pg.wait_for_selector("#channel-webhook .webhook-secret:not([hidden]) code").inner_text()
        assert secret.startswith("whsec_")
        pg.screenshot(path=str(_shot("channels-desktop-en")), full_page=True)
        pg.reload()
        assert secret not in pg.content(), "the secret is shown once"
        assert pg.locator("#channel-webhook .channel-state.ok").count() == 1
        assert receiver.url in pg.inner_text("#channel-webhook .channel-state.ok")
        # The webhook declares how a linked one shows (CHANNEL.shown_by, outbound_only): by its URL,
        # with no pool or auto-save to set; a chat's row keeps both.
        hooked = pg.locator("table.linked tr[data-channel='webhook']")
        assert hooked.locator("code").inner_text() == receiver.url
        assert hooked.locator("[data-setting]").count() == 0
        assert linked.locator("select[data-setting='pool']").count() == 1
        assert linked.locator("input[data-setting='save_all']").count() == 1

        pg.click("#channel-webhook [data-action='revoke-channel']")
        pg.wait_for_function("() => !document.querySelector('#channel-webhook .channel-state.ok')")
    finally:
        context.close()
    assert not errors, errors


@pytest.mark.parametrize(
    "viewport,locale,name",
    [
        (NARROW, "en-US", "channels-375-en"),
        (NARROW, "zh-CN", "channels-375-zh"),
        (DESKTOP, "zh-CN", "channels-desktop-zh"),
    ],
)
def test_screenshots_and_no_horizontal_scroll(browser, channel_server, viewport, locale, name):
    server, _fake, _receiver = channel_server
    context, pg, errors = _page(browser, viewport, locale)
    try:
        pg.goto(server.url + "/settings/channels")
        pg.click("#channel-telegram [data-action='telegram-link']")
        pg.wait_for_selector("#channel-telegram .telegram-link:not([hidden])")
        pg.screenshot(path=str(_shot(name)), full_page=True)
        # its words are the channel framework's own (channels/locales), in the page's language
        words = i18n.catalogue(locale[:2])
        assert pg.inner_text("h1") == words["channels.title"]
        assert pg.text_content("#site-nav a[aria-current='page']") == words["nav.channels"]
        assert pg.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        # the token set in the environment: the card says it wins; nothing overflows its card
        assert "MEWDEX_TELEGRAM_BOT_TOKEN" in pg.text_content("#channel-telegram [data-token-env]")
        cards = "[...document.querySelectorAll('.channel')]"
        assert pg.evaluate(f"{cards}.every((e) => e.scrollWidth <= e.clientWidth + 1)")
    finally:
        context.close()
    assert not errors, errors


@pytest.mark.parametrize(
    "viewport,locale,name",
    [
        (DESKTOP, "en-US", "channels-pool-desktop-en"),
        (NARROW, "en-US", "channels-pool-375-en"),
        (DESKTOP, "zh-CN", "channels-pool-desktop-zh"),
        (NARROW, "zh-CN", "channels-pool-375-zh"),
    ],
)
def test_a_linked_chats_pool_and_autosave(browser, sessions, channel_server, viewport, locale, name):
    """A linked chat's row chooses the collection it answers from and switches auto-save, through the
    API, in both languages and at 375 px."""
    from mewdex.channels import bindings
    from mewdex.library import collections

    server, _fake, _receiver = channel_server
    with sessions.begin() as session:
        pool = str(collections.get_or_create(session, server.scope, "group pool").id)
        if not any(
            b.channel == "telegram" and b.status == "active"
            for b in bindings.list_bindings(session, server.scope.scope_id)
        ):
            uid = str(random.randrange(10**9, 10**10))
            bindings.bind(session, scope_id=server.scope.scope_id, user_id=None, channel="telegram", identity=uid,
                          config={"chat_id": uid})  # fmt: skip
        row = bindings.get(session, server.scope.scope_id, "telegram", lock=True)
        bindings.update_config(session, row, {"pool": None, "save_all": False})
    context, pg, errors = _page(browser, viewport, locale)
    try:
        pg.goto(server.url + "/settings/channels")
        linked = pg.locator("table.linked tr[data-channel='telegram']")
        linked.locator("select[data-setting='pool']").select_option(pool)
        wait_until(lambda: _telegram_config(server).get("pool") == pool, 20, 0.2, "the pool saved")
        linked.locator("input[data-setting='save_all']").check()
        wait_until(lambda: _telegram_config(server).get("save_all") is True, 20, 0.2, "auto-save on")
        pg.reload()
        assert linked.locator("select[data-setting='pool']").input_value() == pool
        assert linked.locator("input[data-setting='save_all']").is_checked()
        label = linked.locator("label.chat-pool").inner_text()
        assert ("回答范围" if locale == "zh-CN" else "Answers from") in label
        pg.screenshot(path=str(_shot(name)), full_page=True)
        assert pg.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        linked.locator("select[data-setting='pool']").select_option("")
        wait_until(lambda: _telegram_config(server).get("pool") is None, 20, 0.2, "the whole library again")
    finally:
        context.close()
    assert not errors, errors


def _telegram_config(server) -> dict:
    [row] = [b for b in server.get("/api/v1/channels").json()["bindings"] if b["channel"] == "telegram"]
    return row["config"]


def _shot(name: str):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS / f"{name}.png"
