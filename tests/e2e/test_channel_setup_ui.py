"""The Channels page's QQ, WeCom and WeChat blocks in a real browser against a real ``mewdex serve``
with a worker process: a QQ bot connected with the URL and token the page shows (the fake NapCat
dials the served reverse WebSocket; the worker process's sends reach it through the relay), the
WeCom app set up by the admin and a member bound with the page's code, the WeChat login QR scanned
and a message answered through the worker's scheduled polling. The cards (issue 35): QQ says it waits for
the bot until it connects; the admin saves the Telegram bot token on the page and the worker's polling
picks it up without a restart; a loopback public URL warns on WeCom; each card's guide opens as a page."""

from __future__ import annotations

import base64
import json
import os
import random
import uuid

import httpx
import pytest

from channel_helpers import add_meme
from conftest import drop_scope, new_scope, wait_until
from fakes.clawbot_server import FakeClawBot
from fakes.onebot_client import FakeNapCat
from fakes.telegram_server import FakeTelegram
from fakes.wecom_server import FakeWeCom, message_callback
from mewdex.channels.wecom.crypto import WXBizMsgCrypt
from ui_helpers import DESKTOP, SCREENSHOTS, start_server

BOT_QQ, FRIEND = 2900111222, 1900111222
NARROW = {"width": 375, "height": 812}
# No card's content is wider than the card (a long token, URL or setting name wraps inside it).
NO_OVERFLOW = "(s) => [...document.querySelectorAll(s)].every((e) => e.scrollWidth <= e.clientWidth + 1)"


@pytest.fixture(scope="module")
def setup_server(mewdex_env, sessions, store, tmp_path_factory):
    claw, wecom = FakeClawBot(long_poll_seconds=1), FakeWeCom(members=("lisi",))
    telegram = FakeTelegram(token=f"{random.randrange(10**8, 10**9)}:AAPage{uuid.uuid4().hex}")
    scope = new_scope(sessions, "t-chset")
    for name in ("cat one", "cat two", "cat three"):
        add_meme(sessions, store, scope, name)
    mp = pytest.MonkeyPatch()
    mp.setenv("MEWDEX_CLAWBOT_API_URL", claw.url)
    mp.setenv("MEWDEX_CLAWBOT_CDN_URL", claw.cdn_url)
    mp.setenv("MEWDEX_CLAWBOT_POLL_SECONDS", "2")
    mp.setenv("MEWDEX_TELEGRAM_API_URL", telegram.url)  # no token in the environment: the page sets it
    mp.setenv("MEWDEX_TELEGRAM_POLL_SECONDS", "2")
    mp.delenv("MEWDEX_TELEGRAM_BOT_TOKEN", raising=False)
    mp.delenv("MEWDEX_PUBLIC_URL", raising=False)
    mp.setenv("MEWDEX_EGRESS_ALLOW_HOSTS", json.dumps([claw.host, wecom.host, f"127.0.0.1:{telegram.port}"]))
    try:
        server = start_server(mewdex_env, scope, tmp_path_factory.mktemp("serve") / "setup.log", workers=1)
    finally:
        mp.undo()
    yield server, claw, wecom, telegram
    server.stop()
    claw.close()
    wecom.close()
    telegram.close()
    with sessions.begin() as session:
        from sqlalchemy import text

        keys = "'channel_wecom_app', 'channel_telegram_bot'"
        session.execute(text(f"DELETE FROM platform_settings WHERE key IN ({keys})"))
    drop_scope(sessions, scope)


def _page(browser):
    context = browser.new_context(viewport=DESKTOP, locale="en-US")
    context.set_default_timeout(20_000)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("dialog", lambda dialog: dialog.accept())
    return context, pg, errors


def test_qq_bot_connected_from_the_page(browser, setup_server):
    server, _claw, _wecom, _tg = setup_server
    context, pg, errors = _page(browser)
    try:
        pg.goto(server.url + "/settings/channels")
        pg.fill("#channel-onebot input[name='owner_qq']", str(FRIEND))
        pg.click("#channel-onebot button[type='submit']")
        ws_url = pg.wait_for_selector("#channel-onebot .onebot-secret:not([hidden]) .onebot-ws").inner_text()
        token = pg.inner_text("#channel-onebot .onebot-token")
        assert ws_url.startswith("ws://127.0.0.1:") and ws_url.endswith("/channels/onebot/ws")
        assert "Waiting for the bot to connect" in pg.inner_text("#channel-onebot .onebot-wait:not([hidden])")
        with FakeNapCat(ws_url, BOT_QQ, token) as napcat:
            # the card polls the bindings and says so once the bot has proved its number
            connected = pg.wait_for_selector("#channel-onebot .onebot-connected:not([hidden])", timeout=30_000)
            assert str(BOT_QQ) in connected.inner_text()
            assert pg.locator("#channel-onebot .onebot-wait").is_hidden()
            wait_until(
                lambda: any(b["channel"] == "onebot" and b["identity"] == str(BOT_QQ) and b["config"].get("connected")
                            for b in server.get("/api/v1/channels").json()["bindings"]),
                30, 0.3, "the connection to be recorded",
            )  # fmt: skip
            napcat.private(FRIEND, "cat")
            actions = napcat.wait_actions(3, timeout=90)  # sent by the worker process, through the relay
            images = [s for a in actions for s in a["params"]["message"] if s["type"] == "image"]
            assert len(images) >= 3 and all(s["data"]["file"].startswith("base64://") for s in images)
            pg.reload()
            assert pg.locator("#channel-onebot .channel-state.ok").count() == 1
            pg.screenshot(path=str(SCREENSHOTS / "channels-qq-desktop-en.png"), full_page=True)
            assert token not in pg.content(), "the token is shown once"
            pg.click("#channel-onebot [data-action='revoke-channel']")
            assert napcat.closed.wait(20), "unlinking closes the bot's connection"
    finally:
        context.close()
    assert not errors, errors


def test_wecom_app_and_member_bound_from_the_page(browser, setup_server):
    server, _claw, wecom, _tg = setup_server
    aes_key = base64.b64encode(os.urandom(32)).decode()[:43]
    context, pg, errors = _page(browser)
    try:
        pg.goto(server.url + "/settings/channels")
        assert pg.locator("#channel-wecom [data-action='wecom-link']").count() == 0, "no app yet"
        pg.click("#channel-wecom details.wecom-admin summary")
        form = "#channel-wecom [data-channel-form='wecom-app']"
        pg.fill(f"{form} input[name='corp_id']", wecom.corp_id)
        pg.fill(f"{form} input[name='agent_id']", "1000005")
        pg.fill(f"{form} input[name='secret']", wecom.secret)
        pg.fill(f"{form} input[name='token']", "pageToken")
        pg.fill(f"{form} input[name='encoding_aes_key']", aes_key)
        assert "/channels/wecom/callback" in pg.inner_text("#channel-wecom .wecom-callback")
        pg.click(f"{form} button[type='submit']")
        pg.wait_for_selector("#channel-wecom [data-action='wecom-link']")
        pg.click("#channel-wecom [data-action='wecom-link']")
        code = pg.wait_for_selector("#channel-wecom .wecom-code:not([hidden]) code").inner_text()
        # The stored app talks to the fake (the admin API keeps the base URL; the page leaves it default).
        r = httpx.put(server.url + "/api/v1/channels/wecom/app", json={"corp_id": wecom.corp_id, "agent_id": 1000005,
                      "base_url": wecom.url}, timeout=30)  # fmt: skip
        assert r.status_code == 200, r.text
        query, body = message_callback(WXBizMsgCrypt("pageToken", aes_key, wecom.corp_id), "lisi", code)
        assert httpx.post(server.url + "/channels/wecom/callback", params=query, content=body).status_code == 200
        wait_until(lambda: wecom.sent, 60, 0.3, "the question the chat is asked")
        assert "Reply YES" in wecom.sent[-1]["text"]["content"]
        pg.reload()
        assert pg.locator("table.linked tr[data-linked='lisi'] .delivery-status").count() == 1, "shown as pending"
        query, body = message_callback(WXBizMsgCrypt("pageToken", aes_key, wecom.corp_id), "lisi", "YES")
        assert httpx.post(server.url + "/channels/wecom/callback", params=query, content=body).status_code == 200
        wait_until(lambda: "Linked" in wecom.sent[-1]["text"]["content"], 60, 0.3, "the bind confirmation")
        pg.reload()
        assert "lisi" in pg.inner_text("#channel-wecom .channel-state.ok")
    finally:
        context.close()
    assert not errors, errors


def test_wechat_qr_scanned_from_the_page(browser, setup_server):
    server, claw, _wecom, _tg = setup_server
    context, pg, errors = _page(browser)
    try:
        pg.goto(server.url + "/settings/channels")
        pg.click("#channel-clawbot [data-action='clawbot-login']")
        pg.wait_for_selector("#channel-clawbot .clawbot-qr:not([hidden]) svg")
        qrcode = claw.latest_qrcode()
        claw.scan(qrcode)
        token = claw.confirm(qrcode, "wxid_page@im.wechat")
        pg.wait_for_selector("#channel-clawbot .channel-state.pending", timeout=30_000)  # reloaded: awaits YES
        assert "wxid_page@im.wechat" in pg.inner_text("#channel-clawbot .channel-state.pending")
        claw.user_says(token, "hi")  # the chat confirms the link it is asked about
        texts = lambda: [m["item_list"][0]["text_item"]["text"] for m in claw.sent if m["item_list"][0]["type"] == 1]  # noqa: E731
        wait_until(lambda: any("Reply YES" in t for t in texts()), 90, 0.3, "the question (the worker's polling)")
        claw.user_says(token, "YES")
        wait_until(lambda: any("Linked" in t for t in texts()), 90, 0.3, "the confirmation")
        claw.user_says(token, "cat")
        wait_until(lambda: len([m for m in claw.sent if m["item_list"][0]["type"] == 2]) >= 3, 90, 0.3,
                   "memes through the CDN (the worker's scheduled polling)")  # fmt: skip
        pg.reload()
        assert "wxid_page@im.wechat" in pg.inner_text("#channel-clawbot .channel-state.ok")
    finally:
        context.close()
    assert not errors, errors


def test_telegram_token_saved_on_the_page_starts_the_bot_and_guides_open(browser, setup_server):
    server, _claw, _wecom, telegram = setup_server
    context, pg, errors = _page(browser)
    try:
        pg.goto(server.url + "/settings/channels")
        card = "#channel-telegram"
        assert pg.locator(f"{card} [data-telegram-state='not-configured']").is_visible()
        assert "@BotFather" in pg.inner_text(f"{card} details.telegram-admin[open] ol.steps")
        assert "MEWDEX_PUBLIC_URL" in pg.inner_text("#channel-wecom [data-warning='public-url']")
        assert pg.locator(f"{card} [data-warning]").count() == 0, "polling mode needs no callback"
        pg.screenshot(path=str(SCREENSHOTS / "channels-token-desktop-en.png"), full_page=True)
        for locale, name in (("en-US", "channels-token-375-en"), ("zh-CN", "channels-token-375-zh")):
            narrow = browser.new_context(viewport=NARROW, locale=locale)
            shot = narrow.new_page()
            shot.goto(server.url + "/settings/channels")
            assert shot.evaluate(NO_OVERFLOW, ".channel"), "a card's content overflows it at 375 px"
            assert shot.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
            shot.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
            narrow.close()
        pg.fill(f"{card} input[name='token']", telegram.token)
        pg.click(f"{card} [data-channel-form='telegram-token'] button[type='submit']")
        pg.wait_for_selector(f"{card} [data-action='telegram-link']")  # reloaded: configured
        assert telegram.token not in pg.content()
        assert telegram.token[-4:] in pg.text_content(f"{card} [data-token-saved]")  # in the closed <details>
        # the worker's scheduled polling task reads the new token on its next run: no restart
        wait_until(lambda: any(c["method"] == "getUpdates" for c in telegram.calls), 30, 0.2, "getUpdates")
        pg.click(f"{card} [data-action='telegram-link']")
        link = pg.wait_for_selector(f"{card} .telegram-link a[href^='https://t.me/']").get_attribute("href")
        assert link.startswith(f"https://t.me/{telegram.username}?start=")
        assert pg.evaluate(NO_OVERFLOW, ".channel")

        pg.click(f"{card} a.channel-guide")
        pg.wait_for_url("**/help/channels/telegram")
        assert "Telegram" in pg.inner_text("article.guide h1")
        assert pg.locator("article.guide a[href='https://t.me/BotFather']").count() >= 1
        assert pg.locator("[data-guide-lang]").count() == 0
        pg.screenshot(path=str(SCREENSHOTS / "guide-telegram-desktop-en.png"), full_page=True)
        narrow = browser.new_context(viewport=NARROW, locale="zh-CN")
        shot = narrow.new_page()
        shot.goto(server.url + "/help/channels/telegram")
        assert "英文" in shot.inner_text("[data-guide-lang]")
        assert shot.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        shot.screenshot(path=str(SCREENSHOTS / "guide-telegram-375-zh.png"), full_page=True)
        narrow.close()

        pg.goto(server.url + "/settings/channels")
        pg.click(f"{card} details.telegram-admin summary")
        pg.click(f"{card} [data-action='telegram-token-remove']")
        pg.wait_for_selector(f"{card} [data-telegram-state='not-configured']")
    finally:
        context.close()
    assert not errors, errors
