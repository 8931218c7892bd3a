"""Issue 43, item 6 in a real browser: a collection's public link opened with JavaScript off, on a
server that requires sign-in: the gallery shows, its search form (a plain GET) narrows it, the page
fits 375 px and desktop, in English and Chinese."""

from __future__ import annotations

import pytest

from conftest import drop_scope, new_scope
from library_helpers import png
from mewdex.library import collections, sharing
from mewdex.library.memes import add_image
from ui_helpers import DESKTOP, SCREENSHOTS, start_server

PHONE = {"width": 375, "height": 812}


@pytest.fixture(scope="module")
def shared(mewdex_env, sessions, store, tmp_path_factory):
    scope = new_scope(sessions, "t-share-ui")
    ids = [
        add_image(sessions, store, scope, png(seed), filename=name, provenance={}, process=False).meme_id
        for seed, name in ((4311, "cat-on-keyboard.png"), (4312, "long-named-dog-meme-that-wraps.png"))
    ]
    with sessions.begin() as session:
        c = collections.create(session, scope, "Friday memes")
        collections.add_members(session, scope, c.id, ids)
        _link, token = sharing.create_link(session, scope, c.id, 3)
    server = start_server(
        mewdex_env, scope, tmp_path_factory.mktemp("serve") / "share.log", env={"MEWDEX_AUTH": "required"}
    )
    yield server, token, ids
    server.stop()
    drop_scope(sessions, scope)


def test_gallery_without_javascript(shared, browser):
    server, token, ids = shared
    assert server.get("/library", headers={"Accept": "application/json"}).status_code == 401  # sign-in required
    for locale, viewport, name, heading in (
        ("en-US", PHONE, "shared-gallery-en-375", "Search"),
        ("zh-CN", PHONE, "shared-gallery-zh-375", "搜索"),
        ("en-US", DESKTOP, "shared-gallery-en-desktop", "Search"),
        ("zh-CN", DESKTOP, "shared-gallery-zh-desktop", "搜索"),
    ):
        context = browser.new_context(viewport=viewport, locale=locale, java_script_enabled=False)
        page = context.new_page()
        page.goto(f"{server.url}/s/{token}")
        assert page.inner_text("h1") == "Friday memes"
        assert page.locator("li.card").count() == 2
        assert page.inner_text(".shared-search button") == heading
        for img in page.locator("li.card img").all():  # the files come through the link
            assert img.evaluate("i => i.complete && i.naturalWidth > 0")
            assert img.bounding_box()["width"] > 50
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
        if viewport is PHONE and locale == "en-US":  # the search is a plain form: it works without scripts
            page.fill("#shared-q", "keyboard")
            page.press("#shared-q", "Enter")
            page.wait_for_url("**/s/*?q=keyboard")
            assert page.inner_text("h1") == "Friday memes" and page.locator("[data-count]").count() == 1
            assert page.locator(".shared-search a.button").count() == 1  # "Show all"
        context.close()
