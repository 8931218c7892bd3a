"""Issue 44's Re-caption editor on the meme page and issue 43's bulk edit in the Library, in a real
browser against ``mewdex serve``: typing a caption redraws the preview (a new image each time), Download
saves the preview unsaved, "Save as new meme" opens the new meme, which names its original; a meme with
no text says it cannot be re-captioned; in the Library, keyboard and touch select memes, tag them (add,
remove) and download them as a ZIP that holds exactly those files. en and zh, desktop and 375 px."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile

import httpx
import numpy as np
import pytest
from PIL import Image, ImageDraw
from sqlalchemy import text

from library_helpers import png
from mewdex.library import recaption as engine
from ui_helpers import DESKTOP, SCREENSHOTS

PHONE = {"width": 375, "height": 812}
OLD = "今天加班"


def captioned() -> tuple[bytes, list[list[int]]]:
    """A small gradient picture with OLD in outlined white at the bottom, and its text box's corners."""
    base = np.zeros((200, 320, 3), np.uint8)
    base[..., 0] = np.linspace(40, 200, 320)[None, :]
    base[..., 1] = np.linspace(90, 160, 200)[:, None]
    image = Image.fromarray(base)
    draw = ImageDraw.Draw(image)
    font = engine.caption_font(40)
    draw.text((160, 160), OLD, font=font, fill="white", anchor="mm", stroke_width=3, stroke_fill="black")
    x0, y0, x1, y1 = draw.textbbox((160, 160), OLD, font=font, anchor="mm", stroke_width=3)
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue(), [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]


def upload(server, sessions, name: str, data: bytes, lines: list[dict] | None = None) -> str:
    """Upload ``data``; with ``lines``, the meme is left as the analysis leaves it (no worker runs)."""
    r = httpx.post(server.url + "/api/v1/memes", files=[("files", (name, data, "image/png"))], timeout=60)
    assert r.status_code == 201, r.text
    meme_id = r.json()["results"][0]["meme"]["id"]
    if lines is not None:
        words = " ".join(line["text"] for line in lines)
        context = {"ocr_text": words, "ocr_lines": lines, "title": words}
        with sessions.begin() as session:
            session.execute(
                text("UPDATE memes SET meme_context = CAST(:c AS jsonb), context_status = 'ready' WHERE id = :m"),
                {"c": json.dumps(context), "m": meme_id},
            )
    return meme_id


@pytest.fixture(scope="module")
def editor_memes(work_server, sessions):
    data, box = captioned()
    still = upload(work_server, sessions, "overtime.png", data, [{"text": OLD, "score": 0.95, "box": box}])
    blank = upload(work_server, sessions, "no words.png", png(4501, (64, 48)), [])
    return still, blank


def open_page(browser, viewport, locale):
    context = browser.new_context(viewport=viewport, locale=locale, accept_downloads=True, has_touch=viewport is PHONE)
    context.set_default_timeout(20_000)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    return context, pg, errors


def preview_src(pg) -> str:
    """The preview's src once it shows a loaded image."""
    pg.wait_for_function(
        "() => { const i = document.querySelector('[data-recaption-preview]');"
        " return i && i.src.startsWith('blob:') && i.complete && i.naturalWidth > 0"
        " && !document.querySelector('form[data-recaption-form]').hasAttribute('aria-busy'); }"
    )
    return pg.locator("[data-recaption-preview]").get_attribute("src")


@pytest.mark.parametrize("locale,lang", [("en-US", "en"), ("zh-CN", "zh")])
def test_recaption_editor(browser, work_server, editor_memes, locale, lang):
    still, blank = editor_memes
    for viewport, size in ((DESKTOP, "desktop"), (PHONE, "375")):
        context, pg, errors = open_page(browser, viewport, locale)
        try:
            pg.goto(f"{work_server.url}/memes/{still}")
            box = pg.locator("[data-component=recaption]")
            assert box.locator("h2").inner_text() == ("Re-caption" if lang == "en" else "改字")
            save = box.locator("button[type=submit]")
            assert save.is_disabled()
            caption = box.locator("textarea[name=text]")
            caption.fill(f"准时下班 {lang} {size}")
            first = preview_src(pg)
            caption.press_sequentially("!")  # typing on: a new preview replaces the old one
            pg.wait_for_function("(old) => document.querySelector('[data-recaption-preview]').src !== old", arg=first)
            second = preview_src(pg)
            box.locator("select[name=color]").select_option("#ffd400")  # a style: redrawn at once
            pg.wait_for_function("(old) => document.querySelector('[data-recaption-preview]').src !== old", arg=second)
            preview_src(pg)
            assert not save.is_disabled()
            box.scroll_into_view_if_needed()
            assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
            pg.screenshot(path=str(SCREENSHOTS / f"recaption-editor-{size}-{lang}.png"), full_page=True)

            with pg.expect_download() as got:  # the preview itself, nothing saved
                box.locator("[data-recaption-action=download]").click()
            download = got.value
            assert download.suggested_filename.endswith(".png") and "准时下班" in download.suggested_filename
            with open(download.path(), "rb") as f:
                assert Image.open(f).size == (320, 200)

            save.click()
            pg.wait_for_url(lambda url: "/memes/" in url and still not in url)
            made = pg.url.rsplit("/", 1)[-1]
            toast = pg.locator("#toast")
            assert toast.inner_text() == (
                "Saved as a new meme; the original is unchanged" if lang == "en" else "已另存为新表情包，原图未改动"
            )
            assert pg.locator(".template-link").get_attribute("href").endswith(f"/memes/{still}")
            meme = httpx.get(f"{work_server.url}/api/v1/memes/{made}", timeout=30).json()
            assert meme["template_id"] == still and meme["display_name"] == f"准时下班 {lang} {size}!"
            assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
            pg.screenshot(path=str(SCREENSHOTS / f"recaption-saved-{size}-{lang}.png"), full_page=True)

            # a meme with no text: the editor says why it cannot be re-captioned
            pg.goto(f"{work_server.url}/memes/{blank}")
            box.locator("textarea[name=text]").fill("hello")
            error = box.locator(".form-error")
            pg.wait_for_function("() => document.querySelector('[data-recaption-form] .form-error')?.textContent")
            assert ("no text" if lang == "en" else "没有识别到文字") in error.inner_text()
            assert box.locator(".recaption-preview").is_hidden() and save.is_disabled()
        finally:
            context.close()
        assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture(scope="module")
def bulk_memes(work_server, sessions):
    return {
        i: (upload(work_server, sessions, f"bulk {i}.png", data), data)
        for i, data in ((i, png(4600 + i)) for i in range(3))
    }


def tags_of(server, meme_id: str) -> list[str]:
    return httpx.get(f"{server.url}/api/v1/memes/{meme_id}", timeout=30).json()["tags"]


@pytest.mark.parametrize("locale,lang,viewport", [("en-US", "en", DESKTOP), ("zh-CN", "zh", PHONE)])
def test_bulk_tag_and_zip(browser, work_server, bulk_memes, locale, lang, viewport):
    (a, a_bytes), (b, b_bytes), (c, _) = bulk_memes[0], bulk_memes[1], bulk_memes[2]
    context, pg, errors = open_page(browser, viewport, locale)
    try:
        pg.goto(f"{work_server.url}/library?name=bulk")
        bar = pg.locator("#selection-bar")
        count = pg.locator("#selection-count")
        pg.locator(f"input[data-action=select][value='{a}']").wait_for()
        if viewport is PHONE:  # touch: a tap ticks a card
            pg.locator(f".card[data-id='{a}'] label.select").tap()
        else:
            pg.locator(f"input[data-action=select][value='{a}']").click()
        pg.locator(f"input[data-action=select][value='{b}']").focus()
        pg.keyboard.press("Enter")  # the keyboard: Enter ticks the focused card's box
        assert "2" in count.inner_text()

        bar.locator("#bulk-tags").fill("Party, 聚会")
        bar.locator("[data-action=bulk-tag-add]").click()
        pg.wait_for_function("() => document.querySelectorAll('.card .card-tags').length === 2")
        assert tags_of(work_server, a) == tags_of(work_server, b) == ["party", "聚会"]
        assert tags_of(work_server, c) == []
        bar.locator("#bulk-tags").fill("party")
        bar.locator("[data-action=bulk-tag-remove]").click()
        pg.wait_for_function(
            "() => [...document.querySelectorAll('.card .card-tags')].every((l) => l.innerText.trim() === '聚会')"
        )
        assert tags_of(work_server, a) == tags_of(work_server, b) == ["聚会"]
        assert "2" in count.inner_text()  # the selection survives the refresh
        assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
        pg.screenshot(
            path=str(SCREENSHOTS / f"library-bulk-{'375' if viewport is PHONE else 'desktop'}-{lang}.png"),
            full_page=True,
        )

        with pg.expect_download() as got:
            bar.locator("[data-action=bulk-zip]").click()
        download = got.value
        assert download.suggested_filename.startswith("mewdex ") and download.suggested_filename.endswith(".zip")
        with zipfile.ZipFile(download.path()) as archive:
            manifest = json.loads(archive.read("manifest.json"))
            held = sorted(hashlib.sha256(archive.read(i["file"])).hexdigest() for i in manifest["items"])
            assert sorted(archive.namelist()) == sorted(["manifest.json", *(i["file"] for i in manifest["items"])])
        assert held == sorted(hashlib.sha256(x).hexdigest() for x in (a_bytes, b_bytes))

        pg.locator("body").press("Escape")  # clears the selection
        pg.wait_for_function("() => !document.querySelector('input[data-action=select]:checked')")
        pg.locator("body").press("a")  # selects the page
        pg.wait_for_function("() => document.querySelectorAll('input[data-action=select]:checked').length === 3")
        pg.locator("body").press("a")  # and again: none
        pg.wait_for_function("() => !document.querySelector('input[data-action=select]:checked')")
        # the list view's rows tick as the cards do
        pg.goto(f"{work_server.url}/library?name=bulk&view=list")
        pg.locator(f"input[data-action=select][value='{a}']").check()
        assert "1" in count.inner_text()
        assert "is-selected" in (pg.locator(f"tr:has(input[value='{a}'])").get_attribute("class") or "").split()
        for meme_id in (a, b):  # back as it was for the next run
            httpx.patch(f"{work_server.url}/api/v1/memes/{meme_id}", json={"tags": []}, timeout=30)
    finally:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
