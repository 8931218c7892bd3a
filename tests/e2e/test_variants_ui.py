"""Issue 19 point 4 in a real browser: the detail page shows duplicates and variants apart, and the
library can collapse a template group into one card with its size. Desktop and 375 px, en and zh."""

from __future__ import annotations

import io
import json

import httpx
import pytest
from sqlalchemy import text

from conftest import CORPUS, corpus_available
from ui_helpers import DESKTOP, SCREENSHOTS

PHONE = {"width": 375, "height": 812}
needs_corpus = pytest.mark.skipif(not corpus_available(), reason=f"corpus not found at {CORPUS}")


@pytest.fixture(scope="module")
def group(work_server, sessions):
    """A template with a re-encoded copy (duplicate) and another caption on the same shot (variant)."""
    from PIL import Image

    original = (CORPUS / "vvquest" / "images" / "一个字我都不信.png").read_bytes()
    other = (CORPUS / "vvquest" / "images" / "他什么都敢说.png").read_bytes()
    copy = io.BytesIO()
    Image.open(io.BytesIO(original)).convert("RGB").save(copy, "JPEG", quality=90)
    ids = {}
    for key, name, data, ctype in (
        ("template", "一个字我都不信.png", original, "image/png"),
        ("copy", "一个字我都不信 (copy).jpg", copy.getvalue(), "image/jpeg"),
        ("variant", "他什么都敢说.png", other, "image/png"),
    ):
        r = httpx.post(work_server.url + "/api/v1/memes", files=[("files", (name, data, ctype))], timeout=60)
        assert r.status_code == 201, r.text
        ids[key] = r.json()["results"][0]["meme"]["id"]
    scope_id = work_server.scope.scope_id
    with sessions.begin() as session:
        for key, caption in (
            ("template", "他这里边一个字我都不信"),
            ("copy", "他这里边一个字我都不信"),
            ("variant", "他什么都敢说"),
        ):
            session.execute(
                text("UPDATE memes SET meme_context = meme_context || CAST(:c AS jsonb) WHERE id = :m"),
                {"c": json.dumps({"ocr_text": caption}), "m": ids[key]},
            )
        for key, cosine in (("copy", 0.99), ("variant", 0.95)):
            session.execute(
                text(
                    "INSERT INTO meme_near_duplicates (scope_id, meme_id, duplicate_of, phash_distance, cosine, model) "
                    "VALUES (:s, :m, :d, 2, :c, 'test')"
                ),
                {"s": scope_id, "m": ids[key], "d": ids["template"], "c": cosine},
            )
    return ids


@needs_corpus
@pytest.mark.parametrize("locale,lang", [("en-US", "en"), ("zh-CN", "zh")])
def test_detail_page_shows_duplicates_and_variants_apart(browser, work_server, group, locale, lang):
    for viewport, name in ((DESKTOP, "desktop"), (PHONE, "375")):
        context = browser.new_context(viewport=viewport, locale=locale)
        pg = context.new_page()
        try:
            pg.goto(f"{work_server.url}/memes/{group['template']}")
            duplicates, variants = pg.locator(".near-duplicates"), pg.locator(".near-variants")
            assert duplicates.locator("h2").inner_text() == ("Duplicates" if lang == "en" else "重复")
            assert variants.locator("h2").inner_text() == ("Variants" if lang == "en" else "变体")
            assert duplicates.locator("li").get_attribute("data-id") == group["copy"]
            assert variants.locator("li").get_attribute("data-id") == group["variant"]
            duplicates.scroll_into_view_if_needed()
            assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
            pg.screenshot(path=str(SCREENSHOTS / f"detail-variants-{name}-{lang}.png"), full_page=True)
        finally:
            context.close()


@needs_corpus
@pytest.mark.parametrize("locale,lang", [("en-US", "en"), ("zh-CN", "zh")])
def test_library_collapses_a_template_group_into_one_card(browser, work_server, group, locale, lang):
    for viewport, name in ((DESKTOP, "desktop"), (PHONE, "375")):
        context = browser.new_context(viewport=viewport, locale=locale)
        pg = context.new_page()
        try:
            pg.goto(work_server.url + "/library")
            for key in ("template", "copy", "variant"):
                assert pg.locator(f"#library-items .card[data-id='{group[key]}']").count() == 1
            pg.locator("input[name=collapse]").check()
            pg.wait_for_function(
                "id => !document.querySelector(`#library-items .card[data-id='${id}']`)", arg=group["variant"]
            )
            card = pg.locator(f"#library-items .card[data-id='{group['template']}']")
            tag = card.locator(".tag-group")
            assert tag.inner_text() == ("+2 in group" if lang == "en" else "同组 +2")
            assert pg.locator(f"#library-items .card[data-id='{group['copy']}']").count() == 0
            pg.screenshot(path=str(SCREENSHOTS / f"library-collapsed-{name}-{lang}.png"))
            tag.click()
            pg.wait_for_url(f"**/memes/{group['template']}*")
        finally:
            context.close()
