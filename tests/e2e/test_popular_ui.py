"""The "Popular this week" row (issue 43) on the search page in a real browser: with the box empty, the memes
sent or copied most show as one row, most used first, fitting 375 px; en and zh, desktop and phone."""

from __future__ import annotations

import httpx

from library_helpers import png
from ui_helpers import DESKTOP, SCREENSHOTS

PHONE = {"width": 375, "height": 812}


def test_popular_row_on_the_search_page(browser, work_server):
    url = work_server.url
    files = [("files", (f"popular {i}.png", png(4500 + i, (96, 80)), "image/png")) for i in range(3)]
    r = httpx.post(url + "/api/v1/memes", files=files, timeout=60)
    assert r.status_code == 201, r.text
    ids = [x["meme"]["id"] for x in r.json()["results"]]
    for meme_id, times in ((ids[2], 3), (ids[0], 1)):
        for _ in range(times):
            sent = httpx.post(
                url + "/api/v1/feedback", json={"query": "cat", "meme_id": meme_id, "kind": "send"}, timeout=30
            )
            assert sent.status_code == 201, sent.text
    for locale, lang, title in (("en-US", "en", "Popular this week"), ("zh-CN", "zh", "本周热门")):
        for viewport, size in ((DESKTOP, "desktop"), (PHONE, "375")):
            context = browser.new_context(viewport=viewport, locale=locale)
            pg = context.new_page()
            pg.goto(url + "/")
            row = pg.locator("section.popular")
            assert row.locator("h2").inner_text() == title
            cards = row.locator(".card")
            assert [cards.nth(i).get_attribute("data-id") for i in range(cards.count())][:2] == [ids[2], ids[0]]
            assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
            pg.screenshot(path=str(SCREENSHOTS / f"popular-{size}-{lang}.png"), full_page=True)
            context.close()
