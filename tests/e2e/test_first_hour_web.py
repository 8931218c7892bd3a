"""Issue 19, point 7 in a real browser: Enter opens the first result, the loading state, dark mode, the
compact phone header with results in the first screen, labels in the page's language only, rejected uploads,
and the single-user /admin page. Screenshots at desktop and 375 px, in English and Chinese."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import CORPUS, TEST_ENV, MewdexEnv, corpus_available
from mewdex.db.models import ScopeContext
from ui_helpers import DESKTOP, SCREENSHOTS, start_server

PHONE = {"width": 375, "height": 812}
needs_corpus = pytest.mark.skipif(not corpus_available(), reason=f"corpus not found at {CORPUS}")


@needs_corpus
def test_enter_in_the_search_box_opens_the_first_result(page, search_server, sample):
    page.goto(search_server.url + "/")
    page.fill("#q", "grumpy cat")
    want = sample.ids["memegen/grumpycat/default.jpg"]
    # The server's first search loads the query models: give it the time a cold, busy machine needs.
    first = "id => document.querySelector('#results .card')?.dataset.id === id"
    page.wait_for_function(first, arg=want, timeout=60_000)
    page.wait_for_selector("#results .result-meta[data-query='grumpy cat']")
    page.press("#q", "Enter")
    dialog = page.locator("#detail-dialog")
    dialog.locator(".detail").wait_for()
    assert dialog.locator(".detail").get_attribute("data-id") == want


@needs_corpus
def test_results_are_busy_while_a_search_runs(page, search_server, sample):
    page.goto(search_server.url + "/")
    page.route("**/ui/search?*", lambda route: (page.wait_for_timeout(600), route.continue_()))
    page.fill("#q", "drake")
    page.wait_for_function("() => document.getElementById('results').getAttribute('aria-busy') === 'true'")
    page.wait_for_function(
        "() => document.getElementById('results').getAttribute('aria-busy') !== 'true'", timeout=30_000
    )


@needs_corpus
@pytest.mark.parametrize("locale,lang", [("en-US", "en"), ("zh-CN", "zh")])
def test_phone_header_is_compact_and_results_show_in_the_first_screen(browser, search_server, sample, locale, lang):
    context = browser.new_context(viewport=PHONE, locale=locale)
    pg = context.new_page()
    try:
        pg.goto(search_server.url + "/?q=" + ("一个字我都不信" if lang == "zh" else "drake"))
        pg.wait_for_selector("#results .card")
        header = pg.locator(".topbar").bounding_box()
        assert header["height"] <= 56, header  # one row
        first = pg.locator("#results .card").first.bounding_box()
        assert first["y"] < PHONE["height"] - 120, first  # the first result is in the first screen
        assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
        pg.screenshot(path=str(SCREENSHOTS / f"search-375-{lang}.png"))
    finally:
        context.close()


@needs_corpus
@pytest.mark.parametrize("locale,lang", [("en-US", "en"), ("zh-CN", "zh")])
def test_dark_mode_follows_the_system(browser, search_server, sample, locale, lang):
    for viewport, name in ((DESKTOP, "desktop"), (PHONE, "375")):
        context = browser.new_context(viewport=viewport, locale=locale, color_scheme="dark")
        pg = context.new_page()
        try:
            pg.goto(search_server.url + "/?q=drake")
            pg.wait_for_selector("#results .card")
            background = pg.evaluate("() => getComputedStyle(document.body).backgroundColor")
            r, g, b = (int(x) for x in background[background.index("(") + 1 : -1].split(",")[:3])
            assert max(r, g, b) < 60, background
            pg.screenshot(path=str(SCREENSHOTS / f"search-dark-{name}-{lang}.png"))
        finally:
            context.close()


@needs_corpus
@pytest.mark.parametrize("locale,lang", [("en-US", "en"), ("zh-CN", "zh")])
def test_looks_like_is_in_the_pages_language_only(browser, search_server, sample, locale, lang):
    context = browser.new_context(viewport=DESKTOP, locale=locale)
    pg = context.new_page()
    try:
        meme_id = sample.ids["memegen/drake/yes.jpg"]
        pg.goto(f"{search_server.url}/memes/{meme_id}")
        label = "Looks like" if lang == "en" else None
        facts = pg.locator(".facts")
        names = [dt.inner_text() for dt in facts.locator("dt").all()]
        index = next(
            i
            for i, name in enumerate(names)
            if (label is None or name == label) and facts.locator("dd").nth(i).inner_text().count(",") >= 1
        )
        labels_line = facts.locator("dd").nth(index).inner_text()
        han = bool(re.search(r"[\u4e00-\u9fff]", labels_line))
        latin = bool(re.search(r"[A-Za-z]{3,}", labels_line))
        assert han != latin, labels_line  # one language: the page's
        pg.screenshot(path=str(SCREENSHOTS / f"detail-labels-{lang}.png"))
    finally:
        context.close()


def test_a_rejected_upload_shows_as_rejected(page, work_server, tmp_path):
    bad = tmp_path / "notes.png"
    bad.write_bytes(b"this is not an image")
    page.goto(work_server.url + "/upload")
    page.set_input_files("#upload-files", [str(bad)])
    page.wait_for_selector("#upload-list [data-status]")
    row = page.locator("#upload-list .upload-item").first
    assert row.get_attribute("data-status") == "rejected"
    assert row.locator("progress").count() == 0
    page.shot("upload-rejected-en")


@pytest.fixture(scope="module")
def fresh_install():
    """``mewdex serve`` on a data dir of its own: no account exists (the shared test database has
    the accounts other tests created)."""
    from mewdex.db.embedded import stop

    data_dir = Path(tempfile.mkdtemp(prefix="mewdex-fresh-"))  # short: the socket path has a length limit
    env = MewdexEnv(data_dir, {**TEST_ENV, "MEWDEX_DATA_DIR": str(data_dir)})
    server = start_server(env, ScopeContext("local"), data_dir / "serve.log")
    try:
        yield server
    finally:
        server.stop()
        stop(data_dir / "pgdata")
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.mark.parametrize("locale,lang", [("en-US", "en"), ("zh-CN", "zh")])
def test_single_user_admin_explains_how_to_add_accounts(browser, fresh_install, locale, lang):
    context = browser.new_context(viewport=DESKTOP, locale=locale)
    pg = context.new_page()
    try:
        pg.goto(fresh_install.url + "/admin")
        box = pg.locator("#single-user")
        assert "mewdex user create" in box.inner_text()
        assert pg.locator("table.admin-users").count() == 0
        pg.screenshot(path=str(SCREENSHOTS / f"admin-single-user-{lang}.png"))
    finally:
        context.close()
