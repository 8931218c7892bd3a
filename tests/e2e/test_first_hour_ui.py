"""Issue 19 in a real browser: the Collections page (search, sort, pages, create confirms and scrolls) and
"Add to" remembering the last collection. Screenshots at desktop and 375 px, in English and Chinese."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from ui_helpers import DESKTOP, SCREENSHOTS

PHONE = {"width": 375, "height": 812}


def _png(i: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (i * 37 % 256, i * 91 % 256, i * 13 % 256)).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def library(work_server, sessions, store):
    """60 collections (``c00``…``c59``; ``c07`` holds 3 memes, the rest 1) and 4 memes."""
    from mewdex.library.memes import add_image

    scope = work_server.scope
    ids = []
    for i in range(4):
        result = add_image(
            sessions,
            store,
            scope,
            _png(i),
            filename=f"meme {i}.png",
            provenance={"test": "e2e"},
            process=False,
            collection_names=sorted({f"c{n:02d}" for n in range(60) if n % 4 == i} | ({"c07"} if i else set())),
        )
        ids.append(result.meme_id)
    return ids


def test_collections_page_searches_sorts_pages_and_confirms_a_new_one(page, work_server, library):
    page.goto(work_server.url + "/collections")
    assert page.locator(".collection-row").count() == 50
    assert page.locator(".pager").inner_text().startswith("Page 1 of 2")
    page.click(".pager a[rel=next]")
    page.wait_for_url("**page=2**")
    # count() does not wait: the second page's rows once they are there, not the moment between pages
    page.wait_for_function("document.querySelectorAll('.collection-row').length === 10")
    page.fill("#collection-filters input[name=q]", "c1")
    page.press("#collection-filters input[name=q]", "Enter")
    page.wait_for_url("**q=c1**")
    assert sorted(page.locator(".collection-row").evaluate_all("rs => rs.map(r => r.dataset.name)")) == [
        f"c1{d}" for d in range(10)
    ]
    page.goto(work_server.url + "/collections")
    page.select_option("#collection-filters select[name=sort]", "size")
    page.wait_for_url("**sort=size**")
    assert page.locator(".collection-row").first.get_attribute("data-name") == "c07"  # 3 memes, the largest
    page.shot("collections-sorted-en")

    page.fill("#create-collection input[name=name]", "zz newest")
    page.click("#create-collection button[type=submit]")
    page.wait_for_selector("#created-notice")
    assert "zz newest" in page.locator("#created-notice").inner_text()
    row = page.locator(".collection-row.just-created")
    assert row.get_attribute("data-name") == "zz newest"
    assert row.is_visible() and page.evaluate(
        "() => { const r = document.querySelector('.collection-row.just-created').getBoundingClientRect();"
        " return r.top >= 0 && r.bottom <= innerHeight; }"
    )
    page.shot("collections-created-en")


def test_collections_page_at_375_px_in_chinese(browser, work_server, library):
    context = browser.new_context(viewport=PHONE, locale="zh-CN")
    pg = context.new_page()
    try:
        pg.goto(work_server.url + "/collections")
        assert pg.locator("html").get_attribute("lang") == "zh-CN"
        assert pg.locator("#collection-filters label").first.inner_text().startswith("查找合集")
        assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")  # nothing sideways
        pg.screenshot(path=str(SCREENSHOTS / "collections-375-zh.png"), full_page=False)
        pg.goto(work_server.url + "/collections?q=c0&sort=updated")
        pg.screenshot(path=str(SCREENSHOTS / "collections-search-375-zh.png"), full_page=False)
    finally:
        context.close()
    context = browser.new_context(viewport=DESKTOP, locale="zh-CN")
    pg = context.new_page()
    try:
        pg.goto(work_server.url + "/collections")
        pg.screenshot(path=str(SCREENSHOTS / "collections-zh.png"), full_page=False)
    finally:
        context.close()


def test_add_to_remembers_the_last_collection(page, work_server, library):
    page.goto(f"{work_server.url}/memes/{library[0]}")
    form = "form[data-action-form=add-to-collection]"
    assert page.locator(f"{form} select").input_value() != page.locator(
        f"{form} option[value]", has_text="c42"
    ).get_attribute("value")  # the first one by default
    page.select_option(f"{form} select", label="c42")
    with page.expect_navigation():  # the full detail page reloads after adding
        page.click(f"{form} button[type=submit]")
    page.goto(f"{work_server.url}/memes/{library[1]}")
    chosen = page.locator(f"{form} select").input_value()
    assert page.locator(f"{form} option[value='{chosen}']").inner_text() == "c42"
    page.goto(work_server.url + "/library")
    assert page.locator("#bulk-collection option:checked").inner_text() == "c42"
    page.shot("add-to-remembers-en")
