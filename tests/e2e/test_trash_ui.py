"""Issue 43 in a real browser: the detail page corrects a meme's text in place, and the Trash page
(reached from the Library) restores a meme and empties the trash after a confirm. Desktop and 375 px,
en and zh."""

from __future__ import annotations

import json

import httpx
from sqlalchemy import text

from library_helpers import png
from ui_helpers import DESKTOP

PHONE = {"width": 375, "height": 812}


def _upload(server, sessions, seed: int, caption: str) -> str:
    r = httpx.post(
        server.url + "/api/v1/memes", files=[("files", (f"m{seed}.png", png(seed), "image/png"))], timeout=60
    )
    assert r.status_code == 201, r.text
    meme_id = r.json()["results"][0]["meme"]["id"]
    context = {"ocr_text": caption, "ocr_lines": [{"text": caption, "score": 0.9}], "title": caption}
    with sessions.begin() as session:  # as the analysis leaves it (the server runs no worker)
        session.execute(
            text("UPDATE memes SET meme_context = CAST(:c AS jsonb), context_status = 'ready' WHERE id = :m"),
            {"c": json.dumps(context), "m": meme_id},
        )
    return meme_id


def test_text_editor_and_trash_page(work_server, sessions, browser, page):
    first = _upload(work_server, sessions, 901, "helo wrold")
    second = _upload(work_server, sessions, 902, "second meme")

    page.goto(f"{work_server.url}/memes/{first}")
    page.click("[data-action=text-start]")
    page.fill("textarea[name=text]", "hello world")
    page.click(".text-form button[type=submit]")
    page.wait_for_selector(".text-corrected")
    assert "hello world" in page.inner_text(".ocr")
    page.shot("trash-text-editor-en-desktop")

    assert httpx.delete(f"{work_server.url}/api/v1/memes/{first}").status_code == 204
    assert httpx.delete(f"{work_server.url}/api/v1/memes/{second}").status_code == 204
    page.goto(f"{work_server.url}/library")
    page.click("a.trash-link")
    page.wait_for_selector(f".trash-item[data-id='{first}']")
    page.shot("trash-page-en-desktop")

    for locale, viewport, name in (("zh-CN", PHONE, "trash-page-zh-375"), ("en-US", PHONE, "trash-page-en-375"),
                                   ("zh-CN", DESKTOP, "trash-page-zh-desktop")):  # fmt: skip
        context = browser.new_context(viewport=viewport, locale=locale)
        other = context.new_page()
        other.goto(f"{work_server.url}/trash")
        assert other.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        other.screenshot(path=str(page.shot.__globals__["SCREENSHOTS"] / f"{name}.png"), full_page=True)
        context.close()

    page.click(f".trash-item[data-id='{first}'] [data-action=trash-restore]")
    page.wait_for_selector(f".trash-item[data-id='{first}']", state="detached")
    assert httpx.get(f"{work_server.url}/api/v1/memes/{first}").status_code == 200

    page.click(".trash-actions [data-action=confirm-start]")
    page.click("[data-action=trash-empty]")
    page.wait_for_selector(".empty")
    assert httpx.get(f"{work_server.url}/api/v1/trash").json()["total"] == 0
