"""Clips in the browser (issue 42 item 2): a real ``mewdex serve`` and Chromium. The meme page plays a
WebM clip in a muted looping <video> with its poster, a result card plays it while hovered (as a GIF's
preview), and a TGS sticker's page shows its animated preview; at desktop and phone widths."""

from __future__ import annotations

import pytest

from clip_helpers import clip, lottie
from mewdex.library.memes import add_image
from ui_helpers import PHONE


@pytest.fixture(scope="module")
def clips(work_server, sessions, store):
    """``{"webm": id, "tgs": id}`` added to the server's scope, processed (thumbnails and previews)."""
    from conftest import drain_queue

    made = {}
    for fmt, data in (("webm", clip("webm", "libvpx-vp9", "DANCE", frames=20, alpha=True)), ("tgs", lottie())):
        result = add_image(sessions, store, work_server.scope, data, filename=f"party.{fmt}", provenance={})
        assert result.status == "created", result
        made[fmt] = str(result.meme_id)
    drain_queue(sessions, work_server.scope)
    return made


def playing(pg, selector: str) -> bool:
    return pg.evaluate(
        "(s) => { const v = document.querySelector(s);"
        " return !!v && !v.paused && v.readyState >= 2 && v.muted && v.loop; }",
        selector,
    )


def test_meme_page_plays_the_clip_and_cards_play_on_hover(page, work_server, clips):
    page.goto(f"{work_server.url}/memes/{clips['webm']}")
    page.wait_for_function(
        "() => { const v = document.querySelector('.detail-media video'); return v && v.currentTime > 0; }"
    )
    assert playing(page, ".detail-media video")
    page.shot("clip-detail")
    page.goto(f"{work_server.url}/library")
    card = page.locator(f'.card[data-id="{clips["webm"]}"]')
    video = card.locator("video[data-clip]")
    assert video.get_attribute("poster").endswith(f"/media/{clips['webm']}/thumbnail")
    assert page.evaluate("(id) => document.querySelector(`.card[data-id='${id}'] video`).paused", clips["webm"])
    card.hover()
    page.wait_for_function(
        "(id) => document.querySelector(`.card[data-id='${id}'] video`).currentTime > 0", arg=clips["webm"]
    )
    page.shot("clip-card-hover")
    page.mouse.move(0, 0)
    page.wait_for_function("(id) => document.querySelector(`.card[data-id='${id}'] video`).paused", arg=clips["webm"])


def test_sticker_page_shows_its_animated_preview_at_phone_width(page, work_server, clips):
    page.set_viewport_size(PHONE)
    page.goto(f"{work_server.url}/memes/{clips['tgs']}")
    image = page.locator(".detail-media img")
    assert image.get_attribute("src").endswith(f"/media/{clips['tgs']}/thumbnail?animated=1")
    page.wait_for_function("() => document.querySelector('.detail-media img').naturalWidth > 0")
    page.goto(f"{work_server.url}/memes/{clips['webm']}")
    page.wait_for_function("() => document.querySelector('.detail-media video').currentTime > 0")
    width = page.evaluate("() => document.querySelector('.detail-media video').getBoundingClientRect().width")
    assert 0 < width <= PHONE["width"]
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    page.shot("clip-detail-phone")


BADGES = {"en": {"webm": "CLIP", "tgs": "STICKER"}, "zh": {"webm": "视频", "tgs": "贴纸"}}
FACTS = {"en": {"webm": "clip, 20 frames", "tgs": "animated sticker, 30 frames"}, "zh": {"webm": "视频，20 帧"}}


@pytest.mark.parametrize("lang,viewport", [("en", None), ("zh", {"width": 375, "height": 812})])
def test_cards_and_the_meme_page_name_a_clip_and_a_sticker(page, work_server, clips, lang, viewport):
    """The badge says what moves: a clip and a sticker are no "GIF" (desktop in English, 375 px in Chinese)."""
    page.context.add_cookies([{"name": "mewdex_lang", "value": lang, "url": work_server.url}])
    if viewport:
        page.set_viewport_size(viewport)
    page.goto(f"{work_server.url}/library")
    for fmt, word in BADGES[lang].items():
        badge = page.locator(f'.card[data-id="{clips[fmt]}"] .tag-anim')
        assert badge.inner_text() == word and badge.is_visible()
    page.shot(f"clip-badges-library-{lang}")
    for fmt, facts in FACTS[lang].items():
        page.goto(f"{work_server.url}/memes/{clips[fmt]}")
        badge = page.locator(".detail-media .tag-anim")
        assert badge.inner_text() == BADGES[lang][fmt] and badge.is_visible()
        assert facts in page.locator("dl.facts").first.inner_text()
    assert page.evaluate("() => document.documentElement.scrollWidth") <= page.viewport_size["width"]
    page.shot(f"clip-badges-detail-{lang}")


def test_a_clip_renamed_with_its_extension_downloads_under_that_name_once(page, work_server, clips):
    page.goto(f"{work_server.url}/memes/{clips['webm']}")
    page.click("[data-action=rename-start]")
    page.fill(".rename-form input[name=display_name]", "dance.webm")
    page.click(".rename-form button[type=submit]")
    page.wait_for_function("() => document.querySelector('.meme-name')?.textContent === 'dance.webm'")
    assert page.locator(".detail .actions a[download]").get_attribute("download") == "dance.webm"  # app.js
    page.reload()
    assert page.locator(".detail .actions a[download]").get_attribute("download") == "dance.webm"  # the server
    assert page.evaluate("() => savedName('Party.WEBM', '.webm')") == "Party.webm"
