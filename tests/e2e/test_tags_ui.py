"""Tags (issue 43) in a real browser: a result card shows its tag chips; the detail page adds tags
(comma-separated, normalised) and removes one without a reload; a chip opens its ``tag:`` search; the
tags page lists them with counts. en and zh, 375 px and desktop."""

from __future__ import annotations

import httpx
import pytest

from library_helpers import png
from ui_helpers import DESKTOP, SCREENSHOTS

PHONE = {"width": 375, "height": 812}


@pytest.fixture(scope="module")
def memes(work_server):
    """Two uploaded memes (not processed: the pages need no model), the first tagged ``Cat``."""
    files = [("files", (f"tagged {i}.png", png(4300 + i, (96, 80)), "image/png")) for i in range(2)]
    r = httpx.post(work_server.url + "/api/v1/memes", files=files, timeout=60)
    assert r.status_code == 201, r.text
    ids = [x["meme"]["id"] for x in r.json()["results"]]
    r = httpx.post(work_server.url + "/api/v1/memes/tags", json={"ids": ids[:1], "add": ["Cat"]}, timeout=30)
    assert r.status_code == 200, r.text
    return ids


@pytest.mark.parametrize("locale,lang", [("en-US", "en"), ("zh-CN", "zh")])
def test_tag_chips_and_editing_on_the_detail_page(browser, work_server, memes, locale, lang):
    first, second = memes
    for viewport, size in ((DESKTOP, "desktop"), (PHONE, "375")):
        context = browser.new_context(viewport=viewport, locale=locale)
        context.set_default_timeout(15_000)
        pg = context.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
        try:
            pg.goto(f"{work_server.url}/memes/{second}")
            box = pg.locator("[data-component=tags]")
            assert box.locator("h2").inner_text() == ("Tags" if lang == "en" else "标签")
            assert box.locator("[data-tags-none]").is_visible()
            pg.evaluate("() => { window.__stayed = true; }")  # gone if the page reloads
            box.locator("input[name=tags]").fill(" Reaction Face, 猫猫，ＤＯＧ ")
            box.locator("button[type=submit]").click()
            chips = box.locator("[data-tag-list] li")
            pg.wait_for_function("() => document.querySelectorAll('[data-tag-list] li').length === 3")
            assert chips.locator("a").all_inner_texts() == ["dog", "reaction face", "猫猫"]  # normalised, sorted
            assert not box.locator("[data-tags-none]").is_visible()
            box.locator("li[data-tag=dog] [data-tag-action=remove]").click()
            pg.wait_for_function("() => document.querySelectorAll('[data-tag-list] li').length === 2")
            assert pg.evaluate("() => window.__stayed === true")
            assert httpx.get(f"{work_server.url}/api/v1/memes/{second}", timeout=30).json()["tags"] == [
                "reaction face",
                "猫猫",
            ]
            box.scroll_into_view_if_needed()
            assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
            pg.screenshot(path=str(SCREENSHOTS / f"tags-detail-{size}-{lang}.png"), full_page=True)

            # a chip opens the tag's search: only the memes with it, as cards with their chips
            box.locator("li[data-tag='reaction face'] a").click()
            pg.wait_for_url("**/?q=*")
            cards = pg.locator("#results .card")
            cards.first.wait_for()
            assert [cards.nth(i).get_attribute("data-id") for i in range(cards.count())] == [second]
            assert cards.first.locator(".card-tags a").all_inner_texts() == ["reaction face", "猫猫"]
            assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
            pg.screenshot(path=str(SCREENSHOTS / f"tags-search-{size}-{lang}.png"), full_page=True)

            pg.goto(f"{work_server.url}/tags")
            rows = pg.locator(".tag-table li")
            assert rows.count() == 3
            assert rows.first.locator(".tag-name").inner_text() in ("cat", "reaction face", "猫猫")
            assert ("1 meme" if lang == "en" else "1 个表情包") in rows.first.inner_text()
            assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
            pg.screenshot(path=str(SCREENSHOTS / f"tags-page-{size}-{lang}.png"), full_page=True)
            # back as it was for the next viewport
            httpx.patch(f"{work_server.url}/api/v1/memes/{second}", json={"tags": []}, timeout=30)
        finally:
            context.close()
        assert not errors, f"JavaScript errors on the page: {errors}"
