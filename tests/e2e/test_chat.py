"""The chat page in a real browser against a real ``mewdex serve`` on the processed corpus sample:
a chat (chat phrasing, meme cards, "another"), streaming with stop, an attached image, rename /
delete / restore, and screenshots (desktop and 375 px, en and zh)."""

from __future__ import annotations

import pytest

from conftest import CORPUS, corpus_available
from ui_helpers import DESKTOP, browser, start_server  # noqa: F401

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(not corpus_available(), reason=f"corpus not found at {CORPUS} (set MEWDEX_CORPUS)"),
]

NARROW = {"width": 375, "height": 812}


@pytest.fixture(scope="module")
def chat_server(mewdex_env, sample, tmp_path_factory):
    """``mewdex serve`` on the sample, its replies streamed slowly enough to stop one mid-way."""
    mp = pytest.MonkeyPatch()
    mp.setenv("MEWDEX_ASSISTANT_STREAM_DELAY_MS", "120")
    try:
        server = start_server(mewdex_env, sample.scope, tmp_path_factory.mktemp("serve") / "chat.log")
    finally:
        mp.undo()
    yield server
    server.stop()


def _page(browser, viewport=DESKTOP, locale="en-US"):
    context = browser.new_context(viewport=viewport, locale=locale)
    context.set_default_timeout(20_000)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    return context, pg, errors


def _cards(pg) -> list[str]:
    return pg.evaluate("() => [...document.querySelectorAll('.chat-assistant .chat-card')].map(c => c.dataset.id)")


def _wait_done(pg):
    pg.wait_for_selector("#chat-send:not([hidden])")


def test_a_chat_streams_cards_pages_on_and_lists_the_conversation(browser, chat_server, sample):
    context, pg, errors = _page(browser)
    try:
        pg.goto(chat_server.url + "/chat")
        pg.fill("#chat-input", "send me a meme for 一个字我都不信")
        pg.press("#chat-input", "Enter")
        pg.wait_for_selector("#chat-stop:not([hidden])")  # streaming: the stop button replaces send
        pg.wait_for_selector(".chat-assistant .chat-card")
        _wait_done(pg)
        first = _cards(pg)
        assert sample.ids["vvquest/一个字我都不信.png"] in first and len(first) == 3
        pg.fill("#chat-input", "another")
        pg.press("#chat-input", "Enter")
        pg.wait_for_function("() => document.querySelectorAll('.chat-assistant .chat-card').length > 3")
        _wait_done(pg)
        cards = _cards(pg)
        assert len(cards) == len(set(cards)) == 6  # never a repeat
        assert pg.locator(".chat-list li").first.inner_text().startswith("send me a meme")
        pg.screenshot(path=str(_shot("chat-desktop-en")), full_page=True)
        # Reload: the conversation is there, with its cards.
        pg.reload()
        pg.wait_for_function("() => document.querySelectorAll('.chat-assistant .chat-card').length === 6")
    finally:
        context.close()
    assert not errors, errors


def test_stop_ends_the_reply_mid_stream(browser, chat_server, sample):
    context, pg, errors = _page(browser)
    try:
        pg.goto(chat_server.url + "/chat")
        pg.fill("#chat-input", "来个不屑的表情")
        pg.press("#chat-input", "Enter")
        pg.wait_for_function(
            "() => (document.querySelector('.chat-assistant .chat-text')?.textContent || '').length > 0"
        )
        pg.click("#chat-stop")
        _wait_done(pg)
        pg.wait_for_selector(".chat-assistant .chat-note")
        assert len(_cards(pg)) < 3
        cid = pg.evaluate("() => new URLSearchParams(location.search).get('c')")
        assert chat_server.get(f"/api/v1/conversations/{cid}").json()["run_status"] == "cancelled"
    finally:
        context.close()
    assert not errors, errors


def test_an_attached_image_searches_by_image(browser, chat_server, sample):
    context, pg, errors = _page(browser)
    try:
        pg.goto(chat_server.url + "/chat")
        pg.set_input_files("#chat-file", str(sample.root / "memegen/drake/yes.jpg"))
        pg.wait_for_selector("#chat-attachment:not([hidden])")
        pg.press("#chat-input", "Enter")
        pg.wait_for_selector(".chat-assistant .chat-card")
        _wait_done(pg)
        assert _cards(pg)[0] == sample.ids["memegen/drake/yes.jpg"]
        assert pg.locator(".chat-user .chat-note").count() == 1
    finally:
        context.close()
    assert not errors, errors


def test_rename_delete_and_restore(browser, chat_server, sample):
    context, pg, errors = _page(browser)
    try:
        pg.goto(chat_server.url + "/chat")
        pg.fill("#chat-input", "change my mind")
        pg.press("#chat-input", "Enter")
        pg.wait_for_selector(".chat-assistant .chat-card")
        _wait_done(pg)
        pg.once("dialog", lambda d: d.accept("renamed chat"))
        pg.locator(".chat-list li.is-current .chat-rename").click()
        pg.wait_for_function("() => document.getElementById('chat-title').textContent === 'renamed chat'")
        pg.locator(".chat-list li", has_text="renamed chat").locator(".chat-delete").click()
        pg.wait_for_function(
            "() => ![...document.querySelectorAll('.chat-list li')].some(li => li.textContent.includes('renamed chat'))"
        )
        pg.check("#chat-trash")
        pg.locator(".chat-list li", has_text="renamed chat").locator(".chat-restore").click()
        pg.wait_for_function("() => document.getElementById('chat-title').textContent === 'renamed chat'")
        pg.fill("#chat-search", "renamed")
        pg.wait_for_function("() => document.querySelectorAll('.chat-list li[data-conversation]').length === 1")
    finally:
        context.close()
    assert not errors, errors


@pytest.mark.parametrize(
    "viewport,locale,name",
    [(NARROW, "en-US", "chat-375-en"), (NARROW, "zh-CN", "chat-375-zh"), (DESKTOP, "zh-CN", "chat-desktop-zh")],
)
def test_screenshots_and_no_horizontal_scroll(browser, chat_server, sample, viewport, locale, name):
    context, pg, errors = _page(browser, viewport, locale)
    try:
        pg.goto(chat_server.url + "/chat")
        pg.fill("#chat-input", "来个一个字我都不信的表情" if locale == "zh-CN" else "send me a meme for change my mind")
        pg.press("#chat-input", "Enter")
        pg.wait_for_selector(".chat-assistant .chat-card")
        _wait_done(pg)
        assert pg.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        pg.screenshot(path=str(_shot(name)), full_page=True)
    finally:
        context.close()
    assert not errors, errors


def _shot(name: str):
    from ui_helpers import SCREENSHOTS

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS / f"{name}.png"
