""" "Make a meme" on the search page (issue 44) in a real browser: search a template (here by its tag), pick
it, type a caption and see the live preview — on a text-free template the caption goes to the bottom by
itself — download the preview unsaved, then save it as a new meme naming the template. en and zh,
desktop and 375 px (screenshots)."""

from __future__ import annotations

import io
import uuid

import httpx
import numpy as np
import pytest
from PIL import Image

from ui_helpers import DESKTOP, SCREENSHOTS

PHONE = {"width": 375, "height": 812}


@pytest.fixture(scope="module")
def template(work_server):
    """A text-free gradient picture, tagged with a tag of its own (found by ``tag:`` with no model)."""
    base = np.zeros((200, 320, 3), np.uint8)
    base[..., 0] = np.linspace(40, 200, 320)[None, :]
    base[..., 1] = np.linspace(90, 160, 200)[:, None]
    buffer = io.BytesIO()
    Image.fromarray(base).save(buffer, "PNG")
    files = [("files", ("plain template.png", buffer.getvalue(), "image/png"))]
    r = httpx.post(work_server.url + "/api/v1/memes", files=files, timeout=60)
    assert r.status_code == 201, r.text
    meme_id = r.json()["results"][0]["meme"]["id"]
    tag = f"maketest{uuid.uuid4().hex[:6]}"
    assert httpx.patch(f"{work_server.url}/api/v1/memes/{meme_id}", json={"tags": [tag]}, timeout=30).is_success
    return meme_id, tag


def _preview_ready(pg) -> None:
    pg.wait_for_function(
        "() => { const i = document.querySelector('#make-meme [data-recaption-preview]');"
        " return i && i.src.startsWith('blob:') && i.complete && i.naturalWidth > 0"
        " && !document.querySelector('#make-meme form[data-recaption-form]').hasAttribute('aria-busy'); }"
    )


@pytest.mark.parametrize("locale,lang", [("en-US", "en"), ("zh-CN", "zh")])
def test_make_a_meme_from_a_template(browser, work_server, template, locale, lang):
    meme_id, tag = template
    for viewport, size in ((DESKTOP, "desktop"), (PHONE, "375")):
        context = browser.new_context(viewport=viewport, locale=locale, accept_downloads=True)
        context.set_default_timeout(20_000)
        pg = context.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
        try:
            pg.goto(work_server.url + "/")
            box = pg.locator("#make-meme")
            box.locator("summary").click()
            assert box.locator("summary").inner_text() == ("Make a meme" if lang == "en" else "做表情包")
            box.locator("input[name=q]").fill(f"tag:{tag}")
            box.locator("[data-make-search] button[type=submit]").click()
            pick = box.locator(f"[data-make-template='{meme_id}']")
            pick.click()
            assert pick.get_attribute("aria-pressed") == "true"
            form = box.locator("form[data-recaption-form]")
            form.locator("textarea[name=text]").fill(f"周五了 {size}")
            _preview_ready(pg)
            assert form.locator("select[name=place]").input_value() == "bottom"  # no text of its own
            assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
            pg.screenshot(path=str(SCREENSHOTS / f"make-meme-{size}-{lang}.png"), full_page=True)
            with pg.expect_download() as got:  # the preview itself, nothing saved
                form.locator("[data-recaption-action=download]").click()
            with open(got.value.path(), "rb") as f:
                assert Image.open(f).size == (320, 200)
            if size == "375":
                form.locator("button[type=submit]").click()
                pg.wait_for_url(lambda url: "/memes/" in url and meme_id not in url)
                made = httpx.get(f"{work_server.url}/api/v1/memes/{pg.url.rsplit('/', 1)[-1]}", timeout=30).json()
                assert made["template_id"] == meme_id and made["display_name"] == f"周五了 {size}"
        finally:
            context.close()
        assert not errors, errors
