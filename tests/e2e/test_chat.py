"""The chat page in a real browser against a real ``mewdex serve`` on the processed corpus sample:
a chat (chat phrasing, meme cards, "another"), streaming with stop, an attached image, rename /
delete / restore, and screenshots (desktop and 375 px, en and zh)."""

from __future__ import annotations

import pytest

from conftest import CORPUS, corpus_available
from ui_helpers import DESKTOP, PHONE, sharing_context, start_server

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


def _page(browser, viewport=DESKTOP, locale="en-US", *, share_origin: str | None = None):
    """A page of a new context; ``share_origin``: a phone's touch, clipboard permissions for that
    origin and the recording share sheet (:data:`ui_helpers.FAKE_SHARE`)."""
    if share_origin is None:
        context = browser.new_context(viewport=viewport, locale=locale)
    else:
        context = sharing_context(browser, share_origin, viewport, locale)
    context.set_default_timeout(20_000)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    return context, pg, errors


def _cards(pg) -> list[str]:
    return pg.evaluate("() => [...document.querySelectorAll('.chat-assistant .chat-card')].map(c => c.dataset.id)")


def _wait_done(pg):
    pg.wait_for_selector("#chat-send:not([hidden])")


def _ask(pg, url: str, text: str) -> None:
    """Open the chat, send ``text`` and wait for the whole reply with its cards."""
    pg.goto(url + "/chat")
    pg.fill("#chat-input", text)
    pg.press("#chat-input", "Enter")
    pg.wait_for_selector(".chat-assistant .chat-card")
    _wait_done(pg)


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
        _ask(pg, chat_server.url, "change my mind")
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


def test_a_reply_cards_copy_image_share_and_download_hand_over_the_file(browser, chat_server, sample):
    """The chat cards' actions (static/chat.js card()): Copy image puts a PNG on the clipboard, Share hands
    the share sheet the image as "<name>.<ext>", Download saves it under that name."""
    context, pg, errors = _page(browser, PHONE, share_origin=chat_server.url)
    try:
        _ask(pg, chat_server.url, "send me a meme for 一个字我都不信")
        meme_id = sample.ids["vvquest/一个字我都不信.png"]
        card = pg.locator(f".chat-assistant .chat-card[data-id='{meme_id}']").first
        name = card.get_attribute("data-name")
        original = chat_server.get(f"/media/{meme_id}")
        ext = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}[
            original.headers["content-type"]
        ]

        card.locator("[data-action=copy-image]").click()
        pg.wait_for_selector("#toast.show.ok")
        copied = pg.evaluate(
            """async () => {
              const items = await navigator.clipboard.read();
              const blob = await items[0].getType("image/png");
              const head = new Uint8Array(await blob.slice(0, 8).arrayBuffer());
              return {types: items.flatMap((item) => item.types), head: [...head]};
            }"""
        )
        assert copied == {"types": ["image/png"], "head": list(b"\x89PNG\r\n\x1a\n")}

        share = card.locator("[data-action=share]")
        assert share.is_visible()
        share.click()
        pg.wait_for_function("() => window.__shared !== null")
        shared = pg.evaluate("() => window.__shared")
        assert shared == {
            "name": f"{name}{ext}",
            "type": original.headers["content-type"],
            "size": len(original.content),
            "title": name,
        }

        with pg.expect_download() as download:
            card.locator("a[download]").click()
        assert download.value.suggested_filename == f"{name}{ext}"
        assert open(download.value.path(), "rb").read() == original.content
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


def test_with_a_chat_model_the_page_shows_it_working_then_streams_its_words_cards_and_title(
    browser, mewdex_env, sessions, sample, tmp_path
):
    """A chat model (the fake OpenAI-compatible server): a working indicator while it searches,
    then its words streamed, the card it shows, and the title it gives the conversation."""
    import json
    import uuid

    from sqlalchemy import text

    from fakes.openai_server import FakeOpenAI, Reply
    from mewdex.assistant import prompts
    from mewdex.providers import connectors

    meme_id = sample.ids["vvquest/一个字我都不信.png"]
    words = "这张很合适：一个字都不信的表情。"

    def model(body):
        messages = body["messages"]
        if messages[0]["content"] != prompts.SYSTEM_PROMPT:
            return Reply.text("不信")  # the title
        if messages[-1]["role"] == "user":
            return Reply.delay(1.5, Reply.tool_call("search_memes", {"query": messages[-1]["content"]}))
        if '"shown"' not in messages[-1]["content"]:
            return Reply.tool_call("show_memes", {"meme_ids": [meme_id]})
        return Reply.text(words, chunk_delay=0.1, chunk_chars=2)

    mp = pytest.MonkeyPatch()
    with FakeOpenAI() as fake:
        fake.handler = model
        with sessions.begin() as session:
            definition_id = connectors.create_definition(
                session,
                provider="openai_compatible",
                name=f"e2e-{uuid.uuid4().hex[:6]}",
                visibility="all",
                credentials={"api_key": fake.api_key},
                config={"base_url": fake.base_url, "chat_model": "fake-chat"},
            ).definition_id
        mp.setenv("MEWDEX_EGRESS_ALLOW_HOSTS", json.dumps([fake.host_port]))
        server = None
        try:
            server = start_server(mewdex_env, sample.scope, tmp_path / "chat-model.log")
            context, pg, errors = _page(browser, locale="zh-CN")
            try:
                pg.goto(server.url + "/chat")
                pg.fill("#chat-input", "来个一个字我都不信的表情")
                pg.press("#chat-input", "Enter")
                pg.wait_for_selector(".chat-assistant.is-working")  # searching: no word yet
                pg.wait_for_selector(".chat-assistant .chat-card")
                pg.wait_for_function(
                    "() => (document.querySelector('.chat-assistant .chat-text')?.textContent || '').length > 0"
                )
                _wait_done(pg)
                assert pg.locator(".chat-assistant .chat-text").first.inner_text() == words
                assert _cards(pg) == [meme_id] and pg.locator(".is-working").count() == 0
                pg.wait_for_function("() => document.getElementById('chat-title').textContent === '不信'")
            finally:
                context.close()
            assert not errors, errors
        finally:
            mp.undo()
            if server is not None:
                server.stop()
            with sessions.begin() as session:
                session.execute(
                    text("DELETE FROM external_system_audits WHERE definition_id = :d"), {"d": definition_id}
                )
                session.execute(
                    text("DELETE FROM external_system_definitions WHERE definition_id = :d"), {"d": definition_id}
                )
