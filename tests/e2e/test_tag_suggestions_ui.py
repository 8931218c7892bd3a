"""Suggested tags (issue 43) in a real browser: a meme uploaded from a folder, with a text, shows its
folder's name and a word of its text as suggestion chips on the detail page
(``GET /api/v1/memes/{id}/tag-suggestions`` gives the same); one click adds the tag without a reload."""

from __future__ import annotations

import uuid

import httpx
from sqlalchemy import update

from library_helpers import png
from mewdex.db.models import Meme
from ui_helpers import SCREENSHOTS

PHONE = {"width": 375, "height": 812}


def test_suggested_tags_are_accepted_with_one_click(browser, work_server, sessions):
    r = httpx.post(
        work_server.url + "/api/v1/memes",
        files=[("files", ("a.png", png(4400, (96, 80)), "image/png"))],
        data={"relative_path": "奶龙合集/a.png"},
        timeout=60,
    )
    assert r.status_code == 201, r.text
    meme_id = r.json()["results"][0]["meme"]["id"]
    with sessions.begin() as session:  # what OCR would have read
        session.execute(
            update(Meme).where(Meme.id == uuid.UUID(meme_id)).values(meme_context={"ocr_text": "老板又让我周末加班"})
        )
    got = httpx.get(f"{work_server.url}/api/v1/memes/{meme_id}/tag-suggestions", timeout=30).json()["items"]
    assert {"name": "奶龙合集", "source": "folder"} in got and {"name": "加班", "source": "caption"} in got

    context = browser.new_context(viewport=PHONE, locale="zh-CN")
    context.set_default_timeout(15_000)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        pg.goto(f"{work_server.url}/memes/{meme_id}")
        chips = pg.locator("[data-tag-suggestions] [data-tag-action=accept]")
        assert "奶龙合集" in [c.get_attribute("data-tag") for c in chips.all()]
        pg.evaluate("() => { window.__stayed = true; }")
        pg.locator("[data-tag-action=accept][data-tag=加班]").click()
        pg.locator("[data-tag-list] li[data-tag=加班]").wait_for()
        assert pg.locator("[data-tag-action=accept][data-tag=加班]").count() == 0
        assert pg.evaluate("() => window.__stayed === true")
        assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
        pg.locator("[data-component=tags]").scroll_into_view_if_needed()
        pg.screenshot(path=str(SCREENSHOTS / "tag-suggestions-375-zh.png"))
    finally:
        context.close()
    assert not errors, errors
    assert httpx.get(f"{work_server.url}/api/v1/memes/{meme_id}", timeout=30).json()["tags"] == ["加班"]
