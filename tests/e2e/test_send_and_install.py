"""Sending memes and the installable app, in a real browser against a real ``mewdex serve``:
file names with their extension, Copy image (PNG on the clipboard), Share (Web Share API with the
file), the Web App Manifest and service worker, and the Web Share Target without its service worker
(what arrives through it is a proposal: tests/e2e/test_share_proposal.py)."""

from __future__ import annotations

import json
from urllib.parse import unquote

import httpx
import pytest
from sqlalchemy import select

from conftest import CORPUS, corpus_available
from test_ui import png_bytes, seed
from ui_helpers import sharing_context

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(not corpus_available(), reason=f"corpus not found at {CORPUS} (set MEWDEX_CORPUS)"),
]

DRAKE = "memegen/drake/no.jpg"


def _scope_meme_names(sessions, scope) -> list[str]:
    from mewdex.db.models import Meme

    with sessions() as s:
        return list(s.execute(select(Meme.display_name).where(Meme.scope_id == scope.scope_id)).scalars())


def test_media_is_named_with_its_extension_inline_or_as_a_download(work_server, sessions, store):
    meme_id = seed(sessions, store, work_server.scope, DRAKE)[DRAKE]
    patched = httpx.patch(f"{work_server.url}/api/v1/memes/{meme_id}", json={"display_name": "不要 drake"}, timeout=30)
    assert patched.status_code == 200, patched.text

    shown = work_server.get(f"/media/{meme_id}")
    assert shown.status_code == 200 and shown.headers["content-type"] == "image/jpeg"
    disposition = shown.headers["content-disposition"]
    assert disposition.startswith("inline; ")
    assert unquote(disposition.split("filename*=UTF-8''", 1)[1]) == "不要 drake.jpg"
    assert 'filename="__ drake.jpg"' in disposition  # the ASCII fallback

    saved = work_server.get(f"/media/{meme_id}?download=1")
    assert saved.headers["content-disposition"].startswith("attachment; ")
    assert saved.content == shown.content


def test_copy_image_and_share_hand_over_the_file(browser, work_server, sessions, store):
    meme_id = seed(sessions, store, work_server.scope, DRAKE)[DRAKE]
    context = sharing_context(browser, work_server.url)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        pg.goto(f"{work_server.url}/memes/{meme_id}")
        name = pg.locator("#meme-name").inner_text()
        # Share: the original bytes as a file named "<name>.jpg"
        share = pg.locator(".detail .actions [data-action=share]")
        assert share.is_visible()
        share.click()
        pg.wait_for_function("() => window.__shared !== null")
        shared = pg.evaluate("() => window.__shared")
        original = work_server.get(f"/media/{meme_id}").content
        assert shared == {"name": f"{name}.jpg", "type": "image/jpeg", "size": len(original), "title": name}
        # Copy image: a JPEG goes onto the clipboard as PNG (what chat apps paste)
        pg.locator(".detail .actions [data-action=copy-image]").click()
        pg.wait_for_selector("#toast.show.ok")
        types = pg.evaluate("async () => (await navigator.clipboard.read()).flatMap((item) => item.types)")
        assert types == ["image/png"]
        pg.screenshot(path="tests/e2e/screenshots/meme-share-phone.png", full_page=False)
        pg.goto(f"{work_server.url}/library")  # the cards' action row with Share, at phone width
        assert pg.locator(f".card[data-id='{meme_id}'] [data-action=share]").is_visible()
        assert pg.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        pg.screenshot(path="tests/e2e/screenshots/library-share-phone.png", full_page=False)
    finally:
        context.close()
    assert not errors, errors


def test_share_is_offered_only_where_the_browser_can_share(page, work_server, sessions, store):
    meme_id = seed(sessions, store, work_server.scope, DRAKE)[DRAKE]
    page.goto(f"{work_server.url}/memes/{meme_id}")
    can_share = page.evaluate("() => 'share' in navigator")
    assert page.locator(".detail .actions [data-action=share]").is_visible() == can_share


def test_manifest_icons_and_service_worker(page, work_server):
    manifest = work_server.get("/manifest.webmanifest")
    assert manifest.status_code == 200
    assert manifest.headers["content-type"].startswith("application/manifest+json")
    body = manifest.json()
    assert body["display"] == "standalone" and body["start_url"] == "/"
    assert body["share_target"]["action"] == "/share-target" and body["share_target"]["method"] == "POST"
    assert body["share_target"]["params"]["files"][0]["name"] == "files"
    for icon in body["icons"]:
        got = work_server.get(icon["src"])
        assert got.status_code == 200 and got.headers["content-type"].startswith(icon["type"]), icon
        if icon["sizes"] != "any":
            from io import BytesIO

            from PIL import Image

            assert "{}x{}".format(*Image.open(BytesIO(got.content)).size) == icon["sizes"]
    assert any(i.get("purpose") == "maskable" for i in body["icons"])
    zh = work_server.get("/manifest.webmanifest", headers={"Accept-Language": "zh-CN"}).json()
    assert zh["lang"] == "zh-CN" and "表情包" in zh["description"]

    page.goto(work_server.url + "/")
    assert page.locator("link[rel=manifest]").get_attribute("href") == "/manifest.webmanifest"
    registration = page.evaluate(
        "async () => { const r = await navigator.serviceWorker.ready;"
        " return {scope: r.scope, url: r.active.scriptURL}; }"
    )
    assert registration == {"scope": work_server.url + "/", "url": work_server.url + "/sw.js"}


def test_share_target_without_the_service_worker_explains_and_stores_nothing(page, work_server, sessions):
    before = _scope_meme_names(sessions, work_server.scope)
    files = {"files": ("x.png", png_bytes((1, 2, 3)), "image/png")}
    answer = httpx.post(work_server.url + "/share-target", files=files, timeout=30)
    assert answer.status_code == 303 and answer.headers["location"] == "/upload?shared=unavailable"
    assert _scope_meme_names(sessions, work_server.scope) == before
    page.goto(work_server.url + "/upload?shared=unavailable")
    assert "share the picture again" in page.locator("#upload-summary").inner_text()
    assert json.loads(page.evaluate("() => JSON.stringify(location.pathname)")) == "/upload"
