"""What mewdex learned, on the account page in a real browser against a real ``mewdex serve`` (issue 45):
each entry shows the search, the meme (thumbnail and name), the kind and when; its "forget this" button
forgets that one entry through the API (the list and the API no longer have it, the other entry stays).
Shot at 1280 and 375 px in English and Chinese (``tests/e2e/screenshots/feedback-*``)."""

from __future__ import annotations

import pytest

from conftest import CORPUS, corpus_available
from ui_helpers import SCREENSHOTS

needs_corpus = pytest.mark.skipif(not corpus_available(), reason=f"corpus not found at {CORPUS}")
SIZES = {"1280": {"width": 1280, "height": 900}, "375": {"width": 375, "height": 812}}
WORDS = {"en": ("Recent choices", "skipped", "Forget this"), "zh": ("最近的选择", "跳过", "忘掉这条")}


@pytest.fixture
def learned(sample, sessions):
    """Two things learned in the sample's library: a ✓ and a "换一个" (cleared afterwards by conftest)."""
    from mewdex.search import feedback

    marked, rejected = sample.ids["vvquest/不屑.png"], sample.ids["chinesebqb/009_KumamotoBear/KumamotoBear00001.gif"]
    with sessions.begin() as session:
        feedback.record(session, sample.scope, "不屑", marked, "mark", "search")
        event = feedback.record(session, sample.scope, "熊本熊", rejected, "rejected", "assistant")
        assert event is not None
        return {"rejected": str(event.event_id), "rejected_meme": rejected, "marked": marked}


@needs_corpus
def test_each_thing_learned_is_listed_and_forgotten_by_its_button(browser, search_server, learned):
    errors: list[str] = []
    for lang, locale in (("en", "en-US"), ("zh", "zh-CN")):
        for size, viewport in SIZES.items():
            context = browser.new_context(viewport=viewport, locale=locale)
            pg = context.new_page()
            pg.on("pageerror", lambda exc: errors.append(str(exc)))
            try:
                pg.goto(search_server.url + "/settings")
                entry = pg.locator(f".feedback-entry[data-event='{learned['rejected']}']")
                entry.wait_for()
                title, kind, forget = WORDS[lang]
                assert pg.locator("#feedback-entries-title").inner_text() == title
                text = entry.inner_text()
                assert "熊本熊" in text and kind in text, text
                assert entry.locator("time[datetime]").count() == 1
                assert entry.locator(".feedback-meme").get_attribute("href") == f"/memes/{learned['rejected_meme']}"
                img = entry.locator("img")
                assert img.get_attribute("src") == f"/media/{learned['rejected_meme']}/thumbnail"
                pg.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=img.element_handle())
                button = entry.locator("[data-action=feedback-forget]")
                assert button.inner_text() == forget and button.is_visible()
                box = button.bounding_box()
                assert box is not None and box["x"] + box["width"] <= viewport["width"]  # on screen on a phone
                assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
                section = pg.locator(".feedback-section")
                section.scroll_into_view_if_needed()
                section.screenshot(path=str(SCREENSHOTS / f"feedback-entries-{size}-{lang}.png"))
            finally:
                context.close()
            assert not errors, errors

    context = browser.new_context(viewport=SIZES["1280"], locale="en-US")
    pg = context.new_page()
    try:
        pg.goto(search_server.url + "/settings")
        entry = pg.locator(f".feedback-entry[data-event='{learned['rejected']}']")
        entry.locator("[data-action=feedback-forget]").click()
        entry.wait_for(state="detached")
        assert pg.locator(".feedback-entry").count() == 1  # the ✓ stays
        listed = pg.request.get(search_server.url + "/api/v1/feedback").json()["events"]
        assert [(e["kind"], e["meme_id"]) for e in listed] == [("mark", learned["marked"])]
        pg.reload()
        assert pg.locator(f".feedback-entry[data-event='{learned['rejected']}']").count() == 0
    finally:
        context.close()
