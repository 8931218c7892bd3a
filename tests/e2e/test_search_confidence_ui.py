"""Issue 19 in a real browser: the phone header's menu shows every nav link; search results a weak
match would give are grouped under "weaker matches", and a nonsense query says "no strong match".
Screenshots at desktop and 375 px, in English and Chinese (tests/e2e/screenshots/)."""

from __future__ import annotations

import pytest

from conftest import CORPUS, corpus_available
from ui_helpers import DESKTOP, SCREENSHOTS

PHONE = {"width": 375, "height": 812}
LOCALES = [("en-US", "en"), ("zh-CN", "zh")]
needs_corpus = pytest.mark.skipif(not corpus_available(), reason=f"corpus not found at {CORPUS}")


@pytest.mark.parametrize("locale,lang", LOCALES)
def test_phone_menu_shows_every_nav_link_in_the_first_screen(browser, work_server, locale, lang):
    context = browser.new_context(viewport=PHONE, locale=locale)
    pg = context.new_page()
    try:
        pg.goto(work_server.url + "/library")
        links = pg.locator("#site-nav a")
        assert links.count() >= 6
        assert not links.first.is_visible()  # folded: the header stays one row
        assert pg.locator(".topbar").bounding_box()["height"] <= 56
        toggle = pg.locator("[data-action=toggle-nav]")
        toggle.click()
        assert toggle.get_attribute("aria-expanded") == "true"
        for i in range(links.count()):
            box = links.nth(i).bounding_box()
            assert box is not None and links.nth(i).is_visible(), links.nth(i).inner_text()
            assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (links.nth(i).inner_text(), box)
            assert box["y"] + box["height"] <= PHONE["height"] / 2, box  # every link in the first screen
        assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
        assert links.first.evaluate("a => a === document.activeElement")  # focus moves into the menu
        pg.screenshot(path=str(SCREENSHOTS / f"header-menu-375-{lang}.png"))
        pg.keyboard.press("Escape")
        assert toggle.get_attribute("aria-expanded") == "false" and not links.first.is_visible()
        # a link of the menu opens its page
        toggle.click()
        pg.locator("#site-nav a[href='/tasks']").click()
        pg.wait_for_url("**/tasks")
    finally:
        context.close()


def test_desktop_header_shows_the_nav_without_a_menu(browser, work_server):
    context = browser.new_context(viewport=DESKTOP, locale="en-US")
    pg = context.new_page()
    try:
        pg.goto(work_server.url + "/library")
        assert not pg.locator("[data-action=toggle-nav]").is_visible()
        links = pg.locator("#site-nav a")
        assert all(links.nth(i).is_visible() for i in range(links.count()))
    finally:
        context.close()


@needs_corpus
@pytest.mark.parametrize("locale,lang", LOCALES)
def test_nonsense_query_says_no_strong_match(browser, search_server, sample, locale, lang):
    for viewport, name in ((DESKTOP, "desktop"), (PHONE, "375")):
        context = browser.new_context(viewport=viewport, locale=locale)
        pg = context.new_page()
        try:
            pg.goto(search_server.url + "/?q=qqqqzzzzxxxx")
            pg.wait_for_selector("#results .weaker .card")
            notice = pg.locator("#results .no-strong-match")
            assert notice.is_visible()
            assert ("No strong match" if lang == "en" else "没有很匹配的结果") in notice.inner_text()
            heading = pg.locator("#weaker-title").inner_text()
            assert heading == ("Weaker matches" if lang == "en" else "较弱的匹配")
            assert pg.locator("#results > ul.results .card").count() == 0  # nothing shown as a confident result
            pg.screenshot(path=str(SCREENSHOTS / f"search-no-strong-match-{name}-{lang}.png"))
        finally:
            context.close()


@needs_corpus
@pytest.mark.parametrize("locale,lang", LOCALES)
def test_strong_results_come_before_weaker_matches(browser, search_server, sample, locale, lang):
    want = sample.ids["vvquest/一个字我都不信.png"]
    for viewport, name in ((DESKTOP, "desktop"), (PHONE, "375")):
        context = browser.new_context(viewport=viewport, locale=locale)
        pg = context.new_page()
        try:
            pg.goto(search_server.url + "/?q=一个字我都不信")
            pg.wait_for_selector("#results > ul.results .card")
            assert pg.locator("#results > ul.results .card").first.get_attribute("data-id") == want
            assert pg.locator("#results .no-strong-match").count() == 0
            strong_y = pg.locator("#results > ul.results").bounding_box()["y"]
            if pg.locator("#results .weaker").count():
                assert pg.locator("#results .weaker").bounding_box()["y"] > strong_y
            pg.screenshot(path=str(SCREENSHOTS / f"search-confidence-{name}-{lang}.png"), full_page=True)
        finally:
            context.close()
