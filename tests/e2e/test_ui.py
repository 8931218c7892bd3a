"""The web UI in a real browser (Debian chromium via Playwright) against a real ``mewdex serve``.

Search runs on the session's processed corpus sample; everything that changes data runs on a
server of its own scope (``work_server``), seeded through the real library service.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import zipfile

import httpx
import pytest
from PIL import Image

from conftest import CORPUS, corpus_available, wait_until
from ui_helpers import DESKTOP, PHONE, SCREENSHOTS

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(not corpus_available(), reason=f"corpus not found at {CORPUS} (set MEWDEX_CORPUS)"),
]


def first_card_id(pg) -> str | None:
    return pg.evaluate("() => document.querySelector('#results .card')?.dataset.id ?? null")


def seed(sessions, store, scope, *names: str) -> dict[str, str]:
    """Add corpus files (paths below the corpus) to ``scope`` through the library service: ``{name: meme id}``."""
    from mewdex.library.memes import add_image

    out = {}
    for name in names:
        source, rel = name.split("/", 1)
        data = (CORPUS / source / "images" / rel).read_bytes()
        result = add_image(sessions, store, scope, data, filename=rel.rsplit("/", 1)[-1], provenance={"test": "e2e"})
        assert result.status in ("created", "duplicate"), result
        out[name] = result.meme_id
    return out


def png_bytes(color, size=(64, 48)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


# ------------------------------------------------------------------ search


@pytest.mark.parametrize(
    "query,expected",
    [
        ("一个字我都不信", "vvquest/一个字我都不信.png"),
        ("change my mind", "memegen/cmm/default.png"),
    ],
    ids=["zh", "en"],
)
def test_search_as_you_type_shows_the_right_meme_first(page, search_server, sample, query, expected):
    page.goto(search_server.url + "/")
    assert page.evaluate("document.activeElement.id") == "q"  # focus on load
    page.keyboard.type(query, delay=20)
    want = sample.ids[expected]
    page.wait_for_function("id => document.querySelector('#results .card')?.dataset.id === id", arg=want)
    assert first_card_id(page) == want
    assert page.locator("#results .card img").first.get_attribute("alt") == page.locator(
        "#results .card"
    ).first.get_attribute("data-name")
    assert "q=" in page.url  # the address keeps the query
    page.shot(f"search-{'zh' if query[0] > 'z' else 'en'}")


def test_copying_a_result_teaches_search_that_query(browser, search_server, sample, sessions):
    """Copy image on a search result records a ``copy`` choice for the query typed (issue 33's feedback);
    the same button on a meme page, with no query, records nothing. The events are removed afterwards
    (the sample is shared by every search test of this process)."""
    from sqlalchemy import delete, select

    from mewdex.db.models import SearchFeedbackEvent

    want = sample.ids["vvquest/一个字我都不信.png"]
    context = browser.new_context(viewport=DESKTOP, locale="zh-CN")
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=search_server.url)
    pg = context.new_page()

    def events():
        with sessions() as s:
            rows = s.execute(
                select(SearchFeedbackEvent.query, SearchFeedbackEvent.kind, SearchFeedbackEvent.source).where(
                    SearchFeedbackEvent.scope_id == sample.scope.scope_id, SearchFeedbackEvent.meme_id == want
                )
            )
            return [tuple(r) for r in rows]

    try:
        pg.goto(search_server.url + "/?q=一个字我都不信")
        pg.wait_for_function("id => document.querySelector('#results .card')?.dataset.id === id", arg=want)
        pg.locator(f"#results .card[data-id='{want}'] [data-action=copy-image]").click()
        wait_until(lambda: events() == [("一个字我都不信", "copy", "search")], 15, 0.2, "the copy to be recorded")
        pg.goto(f"{search_server.url}/memes/{want}")
        pg.locator(".detail .actions [data-action=copy-image]").click()
        pg.wait_for_selector("#toast.show")
        pg.wait_for_timeout(500)  # give a (wrong) request the time to land
        assert events() == [("一个字我都不信", "copy", "search")]
    finally:
        context.close()
        with sessions.begin() as s:
            s.execute(delete(SearchFeedbackEvent).where(SearchFeedbackEvent.scope_id == sample.scope.scope_id))


def test_keyboard_slash_enter_escape_and_detail_dialog(page, search_server, sample):
    page.goto(search_server.url + "/library")
    page.keyboard.press("/")  # no search box here: goes to search
    page.wait_for_url(re.compile(r"/$"))
    page.locator("body").click()
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "q"
    page.keyboard.type("grumpy cat")
    want = sample.ids["memegen/grumpycat/default.jpg"]
    page.wait_for_function("id => document.querySelector('#results .card')?.dataset.id === id", arg=want)
    page.locator("#results .card-open").first.focus()
    page.keyboard.press("Enter")
    dialog = page.locator("#detail-dialog")
    dialog.locator(".detail").wait_for()
    assert dialog.evaluate("d => d.open")
    assert dialog.locator(".detail").get_attribute("data-id") == want
    page.shot("detail-dialog")
    page.keyboard.press("Escape")
    page.wait_for_function("() => !document.getElementById('detail-dialog').open")
    assert page.evaluate("document.activeElement.classList.contains('card-open')")  # focus returns to the card


def test_animated_filter_and_hover_preview(page, search_server, sample):
    page.goto(search_server.url + "/")
    page.check("input[name=animated]")
    page.fill("#q", "KumamotoBear")
    page.wait_for_selector("#results .card")
    cards = page.locator("#results .card")
    assert cards.count() >= 1
    assert cards.locator(".tag-anim").count() == cards.count()  # only animated memes
    img = cards.first.locator("img")
    still = img.get_attribute("src")
    cards.first.hover()
    page.wait_for_function("s => document.querySelector('#results .card img').getAttribute('src') !== s", arg=still)
    assert "animated=1" in img.get_attribute("src")


def test_search_by_dropped_image(page, search_server, sample):
    page.goto(search_server.url + "/")
    data = (sample.root / "memegen/drake/yes.jpg").read_bytes()
    page.evaluate(
        """async ([bytes]) => {
        const file = new File([new Uint8Array(bytes)], "yes.jpg", {type: "image/jpeg"});
        const dt = new DataTransfer(); dt.items.add(file);
        document.dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true}));
    }""",
        [list(data)],
    )
    want = sample.ids["memegen/drake/yes.jpg"]
    page.wait_for_function("id => document.querySelector('#results .card')?.dataset.id === id", arg=want)
    page.shot("search-by-image")


def test_language_follows_accept_language_and_the_switch(browser, search_server, sample):
    context = browser.new_context(viewport=DESKTOP, locale="zh-CN")
    pg = context.new_page()
    pg.goto(search_server.url + "/")
    assert pg.locator("nav a[aria-current=page]").inner_text() == "搜索"
    assert pg.locator("html").get_attribute("lang") == "zh-CN"
    pg.click(".lang a[lang=en]")
    pg.wait_for_selector("html[lang=en]")
    assert pg.locator("nav a[aria-current=page]").inner_text() == "Search"
    pg.goto(search_server.url + "/library")  # the cookie keeps it
    assert pg.locator("h1").inner_text() == "Library"
    context.close()


# ------------------------------------------------------------------ changes (library, collections, tasks APIs)


def test_upload_three_files_one_corrupt(page, work_server, tmp_path):
    files = [tmp_path / "red square.png", tmp_path / "blue square.png", tmp_path / "broken.png"]
    files[0].write_bytes(png_bytes((220, 30, 30)))
    files[1].write_bytes(png_bytes((30, 30, 220)))
    files[2].write_bytes(b"\x89PNG\r\n\x1a\n" + b"this is not really an image" * 20)
    page.goto(work_server.url + "/upload")
    page.set_input_files("#upload-files", [str(f) for f in files])
    page.wait_for_function("() => document.querySelectorAll('#upload-list [data-status]').length === 3")
    page.shot("upload")
    created = page.locator("#upload-list [data-status=created]")
    rejected = page.locator("#upload-list [data-status=rejected]")
    assert created.count() == 2
    assert rejected.count() == 1
    assert rejected.locator(".file-name").inner_text() == "broken.png"
    reason = rejected.locator(".file-result").inner_text()
    assert "Rejected:" in reason and len(reason) > len("Rejected: ") + 10  # the reason in words
    assert "2 added" in page.locator("#upload-summary").inner_text()
    # the created ones link to their memes, named from their file names
    assert sorted(created.locator("a").all_inner_texts()) == ["Added: blue square", "Added: red square"]


def test_rename_persists_after_reload(page, work_server, sessions, store):
    meme_id = seed(sessions, store, work_server.scope, "memegen/drake/no.jpg")["memegen/drake/no.jpg"]
    page.goto(f"{work_server.url}/memes/{meme_id}")
    page.click("[data-action=rename-start]")
    page.fill(".rename-form input", "拒绝 drake")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.querySelector('.meme-name')?.textContent === '拒绝 drake'")
    page.reload()
    assert page.locator(".detail .meme-name").inner_text() == "拒绝 drake"
    assert page.locator(".detail-media img").get_attribute("alt") == "拒绝 drake"
    page.shot("meme-detail")


def test_collection_create_add_export_delete_reimport(page, work_server, sessions, store, tmp_path):
    ids = seed(sessions, store, work_server.scope, "memegen/aag/default.jpg", "memegen/ackbar/default.jpg")
    page.goto(work_server.url + "/collections")
    page.fill("#create-collection input[name=name]", "反应图 reactions")
    page.click("#create-collection button[type=submit]")
    page.wait_for_function("""() => document.querySelector(".collection-row[data-name='反应图 reactions']")
                                  || document.querySelector("#create-collection .form-error")?.textContent""")
    assert page.locator("#create-collection .form-error").inner_text() == ""
    page.wait_for_selector(".collection-row[data-name='反应图 reactions']")

    page.goto(work_server.url + "/library")
    for meme_id in ids.values():
        page.check(f".card[data-id='{meme_id}'] input[data-action=select]")
    assert page.locator("#selection-count").inner_text().startswith("2")
    page.select_option("#bulk-collection", label="反应图 reactions")
    page.click("[data-action=bulk-add]")
    page.wait_for_selector("#toast.show")
    page.shot("library-selected")

    page.goto(work_server.url + "/collections")
    page.click(".collection-row[data-name='反应图 reactions'] .collection-name")
    assert page.locator(".grid .card").count() == 2
    page.shot("collection")
    with page.expect_download() as download:
        page.click(".collection-head a[href$='/export']")
    archive = tmp_path / "reactions.zip"
    download.value.save_as(archive)
    with zipfile.ZipFile(archive) as z:
        assert "manifest.json" in z.namelist()
        assert sum(1 for n in z.namelist() if n.startswith("images/")) == 2

    page.click(".collection-head [data-action=confirm-start]")
    page.click("[data-action=delete-collection]")
    page.wait_for_url(re.compile(r"/collections$"))
    assert page.locator(".collection-row[data-name='反应图 reactions']").count() == 0

    page.set_input_files("#import-collection input[type=file]", str(archive))
    page.click("#import-collection button[type=submit]")
    page.wait_for_selector("#import-report .upload-list li")
    report = page.locator("#import-report")
    assert report.locator("li").count() == 2
    assert report.locator("li.st-duplicate").count() == 2  # the memes were still in the library
    page.wait_for_selector(".collection-row[data-name='反应图 reactions']")  # the list refreshed
    page.shot("collections-import")
    report.locator("a").first.click()
    assert page.locator("h1.meme-name").inner_text() == "反应图 reactions"
    assert sorted(page.locator(".grid .card").evaluate_all("cs => cs.map(c => c.dataset.id)")) == sorted(ids.values())


def test_tasks_page_shows_a_failed_task_and_its_retry_succeeds(page, work_server, sessions, store, drain, tmp_path):
    from mewdex.library.scopes import storage_namespace

    scope = work_server.scope
    drain(scope)  # earlier tests' memes out of the way
    meme_id = seed(sessions, store, scope, "memegen/aag/default.jpg", "memegen/dragon/default.png")[
        "memegen/dragon/default.png"
    ]
    from mewdex.db.models import Meme

    with sessions.begin() as session:
        key = session.get(Meme, meme_id).storage_key
        blob = store.path(storage_namespace(session, scope.scope_id), key)
    saved = tmp_path / "blob"
    shutil.move(blob, saved)  # the file goes missing: the visual stage fails for good
    drain(scope)
    page.goto(work_server.url + "/tasks?status=failed")
    row = page.locator(f"tr[data-status=failed]:has(a[href='/memes/{meme_id}'])")
    row.wait_for()
    assert "missing" in row.locator(".err").inner_text()
    page.shot("tasks-failed")
    row.locator("a[href^='/tasks/']").click()
    page.locator("h1 .badge.st-failed").wait_for()
    assert page.locator("table.list tbody tr").count() >= 1  # its attempts
    page.shot("task-detail")

    shutil.move(saved, blob)
    page.goto(work_server.url + "/tasks")
    row = page.locator(f"tr[data-status=failed]:has(a[href='/memes/{meme_id}'])")
    row.locator("[data-action=retry-task]").click()
    page.wait_for_selector("#toast.show")
    drain(scope)
    page.wait_for_selector(f"tr[data-status=succeeded]:has(a[href='/memes/{meme_id}']) >> nth=0", timeout=20_000)
    assert page.locator(f"tr[data-status=failed]:has(a[href='/memes/{meme_id}'])").count() == 0
    page.shot("tasks-after-retry")


# ------------------------------------------------------------------ every page at desktop and phone width


PAGES = ["/", "/?q=drake", "/library", "/library?view=list", "/upload", "/collections", "/tasks"]


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE, {"width": 360, "height": 740}], ids=["1280", "390", "360"])
def test_every_page_renders_without_horizontal_scroll(browser, work_server, sessions, store, viewport):
    ids = seed(
        sessions, store, work_server.scope, "memegen/drake/yes.jpg", "chinesebqb/009_KumamotoBear/KumamotoBear00004.gif"
    )
    pages = [*PAGES, f"/memes/{next(iter(ids.values()))}"]
    context = browser.new_context(viewport=viewport, locale="zh-CN")
    pg = context.new_page()
    errors = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    for path in pages:
        pg.goto(work_server.url + path)
        pg.wait_for_load_state("networkidle")
        name = path.strip("/").replace("?", "-").replace("=", "-").replace("/", "-") or "home"
        pg.screenshot(path=str(SCREENSHOTS / f"page-{name[:40]}-{viewport['width']}.png"), full_page=True)
        overflow = pg.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{path} scrolls sideways by {overflow}px at {viewport['width']}px"
    context.close()
    assert not errors


# ------------------------------------------------------------------ the search box while typing (issue 35)

TYPED = "change my mind, grumpy cat is mad"  # 33 characters
HUMAN_DELAY_MS = 110  # between key presses: about 9 characters a second


def searches(pg) -> list[str]:
    """The search requests the page sends (their URLs), recorded from now on."""
    seen: list[str] = []
    pg.on("request", lambda r: seen.append(r.url) if "/ui/search?" in r.url else None)
    return seen


def shown_query(pg) -> str | None:
    return pg.evaluate("() => document.querySelector('#results .result-meta')?.dataset.query ?? null")


def test_a_typed_query_sends_few_searches_and_ends_on_its_results(page, search_server):
    assert len(TYPED) == 33
    page.goto(search_server.url + "/")
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    sent = searches(page)
    # when each character arrived, as the page saw it: on a loaded machine a keystroke can come later
    # than typed, and a pause longer than the debounce (250 ms) rightly starts a search
    page.evaluate(
        "() => { window.typedAt = []; document.querySelector('#q')"
        ".addEventListener('input', () => window.typedAt.push(performance.now())); }"
    )
    page.locator("#q").press_sequentially(TYPED, delay=HUMAN_DELAY_MS)
    wait_until(lambda: shown_query(page) == TYPED, 30, 0.1, "the results of the whole query")
    page.wait_for_timeout(400)  # nothing more is sent once typing stopped
    typed_at = page.evaluate("() => window.typedAt")
    pauses = sum(1 for a, b in zip(typed_at, typed_at[1:], strict=False) if b - a > 250)
    assert 1 <= len(sent) <= 3 + pauses, (sent, pauses)
    assert "q=change+my+mind%2C+grumpy+cat+is+mad" in sent[-1]
    assert page.locator("#results .card").count() > 0
    assert "q=change" in page.url  # the address keeps the query
    assert not console_errors, console_errors
    page.shot("daily-search-typed")


def test_an_overloaded_search_says_so_then_asks_again_after_retry_after(page, search_server):
    page.goto(search_server.url + "/")
    answered: list[int] = []

    def route(r):
        if not answered:  # the first search: every slot busy, as the server answers it
            answered.append(503)
            body = json.dumps({"error": {"code": "overloaded", "message": "too many searches", "details": None}})
            r.fulfill(status=503, headers={"Retry-After": "1"}, content_type="application/json", body=body)
        else:
            answered.append(200)
            r.continue_()

    page.route("**/ui/search?*", route)
    page.fill("#q", "drake")
    page.wait_for_selector("#results .state.error")
    error = page.locator("#results .state.error").inner_text()
    assert "too many searches are running at once" in error and "searching again in 1 s" in error
    page.shot("daily-search-overloaded")
    wait_until(lambda: shown_query(page) == "drake", 15, 0.1, "the search asked again")
    assert answered == [503, 200]
    assert page.locator("#results .card").count() > 0


# Records each search the page sends in the page's own clock: when it went out, when its answer came, the
# answer's status and Retry-After.
SEARCH_CLOCK = """
window.__searches = [];
const fetchFirst = window.fetch;
window.fetch = async (url, options) => {
  if (!String(url).startsWith("/ui/search?")) return fetchFirst(url, options);
  const entry = {sent: performance.now()};
  window.__searches.push(entry);
  const resp = await fetchFirst(url, options);
  Object.assign(entry, {answered: performance.now(), status: resp.status, retryAfter: resp.headers.get("Retry-After")});
  return resp;
};
"""


WITHIN_THE_WAIT = """() => ({
  waited: performance.now() - window.__searches[0].answered,
  sent: window.__searches.length,
  error: !!document.querySelector("#results .state.error[data-error='error.overloaded'] [data-action=retry-search]"),
})"""


@pytest.fixture
def overloadable_server(sample, settings_env):
    """The real app over real HTTP in this process (uvicorn in a thread), so that a test can take every
    search slot of its admission (``search.service._slots()``) as a flood of searches would."""
    import socket
    import threading

    import uvicorn

    from conftest import app_for

    settings_env(MEWDEX_AUTH="none", MEWDEX_SEARCH_WAIT_SECONDS="0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app_for(sample.scope), host="127.0.0.1", port=port, log_level="warning", proxy_headers=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 120, 0.1, "the app to serve")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_the_servers_overloaded_answer_shows_its_error_with_retry_then_asks_again_after_retry_after(
    page, overloadable_server
):
    """Against the server's own 503 (the HTML fragment of ``search_pages`` with ``Retry-After``), not a stand-in."""
    from mewdex.search import service

    page.add_init_script(SEARCH_CLOCK)
    page.goto(overloadable_server + "/")
    gate, _ = service._slots()
    held = 0
    while gate.acquire(blocking=False):  # every search slot of the server is busy
        held += 1
    try:
        page.fill("#q", "drake")
        error = page.locator("#results .state.error[data-error='error.overloaded']")
        error.wait_for()
        assert error.locator("[data-action=retry-search]").is_visible()
        assert "searching again in 1 s" in error.inner_text()
        [first] = page.evaluate("() => window.__searches")
        assert (first["status"], first["retryAfter"]) == (503, "1")
        # Within the wait: still the error, nothing sent again (read at one instant of the page's clock;
        # past the wait on a slow machine, the retry is checked below instead).
        page.wait_for_timeout(300)
        now = page.evaluate(WITHIN_THE_WAIT)
        assert now["waited"] >= 1000 or (now["sent"], now["error"]) == (1, True), now
    finally:
        for _ in range(held):
            gate.release()
    wait_until(lambda: shown_query(page) == "drake", 30, 0.1, "the search asked again")
    sent = page.evaluate("() => window.__searches")
    assert [s["status"] for s in sent][-1] == 200 and all(s["status"] == 503 for s in sent[:-1])
    for before, after in zip(sent, sent[1:], strict=False):  # each retry waited its answer's Retry-After
        assert after["sent"] - before["answered"] >= 1000 * int(before["retryAfter"]), sent
    assert page.locator("#results .card").count() > 0


def test_a_failed_search_shows_an_error_with_retry_in_the_results(page, search_server):
    page.context.add_cookies([{"name": "mewdex_lang", "value": "zh", "url": search_server.url}])
    page.goto(search_server.url + "/")
    page.route("**/ui/search?*", lambda r: r.abort("connectionrefused"))
    page.fill("#q", "grumpy cat")
    page.wait_for_selector("#results .state.error [data-action=retry-search]")
    assert "无法连接服务器" in page.locator("#results").inner_text()
    assert page.locator("#results .state.idle").count() == 0  # never the idle hint after a failed search
    page.shot("daily-search-failed-zh")
    page.unroute("**/ui/search?*")
    page.click("#results [data-action=retry-search]")
    wait_until(lambda: shown_query(page) == "grumpy cat", 15, 0.1, "the results after Retry")


def test_try_examples_search_when_clicked(page, search_server):
    page.set_viewport_size(PHONE)
    page.goto(search_server.url + "/")
    sent = searches(page)
    page.click("#results .examples a[data-query='drake']")
    wait_until(lambda: shown_query(page) == "drake", 15, 0.1, "the example's results")
    assert page.input_value("#q") == "drake" and len(sent) == 1
    assert page.locator("#results .card").count() > 0


# ------------------------------------------------------------------ progress, tasks, header, chat (issue 35)


def test_progress_shows_on_search_library_and_tasks_and_focus_stays_on_cancel(
    page, work_server, sessions, store, drain
):
    """The "N of M still being processed" notes, the batch's "x of y" on the tasks page, lanes named like
    their tasks, and the keyboard focus kept on Cancel through the live refresh."""
    from mewdex.library.memes import add_image
    from mewdex.queue import batches

    scope = work_server.scope
    drain(scope)  # earlier tests' work out of the way
    with sessions.begin() as session:
        batch_id = batches.create(session, scope.scope_id).batch_id
    ids = []
    for name in ("memegen/ants/default.jpg", "memegen/apcr/default.jpg"):  # files no other test adds
        source, rel = name.split("/", 1)
        data = (CORPUS / source / "images" / rel).read_bytes()
        result = add_image(sessions, store, scope, data, filename=rel, provenance={"test": "e2e"}, batch_id=batch_id)
        assert result.status == "created", result
        ids.append(result.meme_id)
    with sessions.begin() as session:
        batches.seal(session, scope.scope_id, batch_id)

    page.goto(work_server.url + "/")
    note = page.locator(".search-hero .progress-note")
    assert note.get_attribute("data-pending") == "2" and "2 of" in note.inner_text()
    assert note.locator("a[href='/tasks']").count() == 1
    page.goto(work_server.url + "/library")
    assert "2 of" in page.locator(".progress-note").inner_text()
    legend = page.locator("#chip-legend").inner_text()  # the 图/文/索 (Image/Text/Index) chips explained
    assert "Image analysis" in legend and "Text and context" in legend and "Search index" in legend
    assert page.locator("#bulk-collection option").first.get_attribute("value") == ""
    page.shot("library-progress")
    created = httpx.post(work_server.url + "/api/v1/collections", json={"name": "placeholder check"}, timeout=30)
    assert created.status_code in (200, 201), created.text
    page.goto(f"{work_server.url}/memes/{ids[0]}")
    options = page.locator("form[data-action-form=add-to-collection] select option")
    assert options.first.get_attribute("value") == "" and options.count() >= 2  # a placeholder, not the first

    page.goto(work_server.url + "/tasks")
    batch = page.locator(f".batch[data-batch='{batch_id}']")
    assert "0 of 2 memes processed" in batch.inner_text()
    # Lanes are named like the tasks they run.
    task_name = page.locator(f"tr[data-task]:has(a[href='/memes/{ids[0]}']) td:first-child a").inner_text()
    assert page.locator(".lane:has([data-lane=visual]) .lane-name").inner_text() == task_name == "Image analysis"
    page.shot("tasks-batch")

    # Keyboard focus on Cancel survives the 2 s refresh (the poll waits), and after Cancel it is back
    # on the same task's row.
    polls = []
    page.on("request", lambda r: polls.append(r.url) if "/ui/tasks" in r.url else None)
    row = f"tr[data-task]:has(a[href='/memes/{ids[0]}'])"
    task_id = page.locator(row).get_attribute("data-task")
    page.locator(f"{row} a[href^='/tasks/']").focus()
    page.keyboard.press("Tab")  # to the row's links, then its Cancel button, by keyboard
    page.keyboard.press("Tab")
    focused = "() => [document.activeElement.dataset.action, document.activeElement.closest('tr')?.dataset.task]"
    assert page.evaluate(focused) == ["cancel-task", task_id]
    page.wait_for_timeout(2600)
    assert polls == [] and page.evaluate(focused) == ["cancel-task", task_id]
    page.keyboard.press("Enter")
    wait_until(lambda: page.evaluate(focused)[1] == task_id and polls, 10, 0.1, "the focus back on the row")
    page.wait_for_selector(f"tr[data-task='{task_id}'][data-status=failed]")
    assert page.evaluate(focused)[1] == task_id
    page.locator("h1").click()  # focus out of the list: the live refresh runs again
    done = "1 of 2 memes processed · 1 failed"
    wait_until(lambda: done in page.locator(f".batch[data-batch='{batch_id}']").inner_text(), 10, 0.2, "x of y")
    page.shot("tasks-batch-after-cancel")


def test_one_header_layout_on_every_page_and_an_html_404(browser, work_server):
    paths = ["/", "/library", "/upload", "/collections", "/chat", "/schedules", "/tasks", "/settings/channels"]
    header = """() => [...document.querySelectorAll(
        '.topbar .brand, .topbar nav a, .topbar .nav-toggle, .topbar .lang a')]
        .filter((el) => el.offsetParent).map((el) => { const r = el.getBoundingClientRect();
        return [el.textContent.trim(), Math.round(r.x), Math.round(r.y), Math.round(r.width)]; })"""
    for viewport, lang in ((DESKTOP, "en"), (PHONE, "zh")):
        context = browser.new_context(viewport=viewport)
        context.add_cookies([{"name": "mewdex_lang", "value": lang, "url": work_server.url}])
        pg = context.new_page()
        layouts = {}
        for path in [*paths, "/no-such-page"]:
            response = pg.goto(work_server.url + path)
            layouts[path] = pg.evaluate(header)
            if path == "/no-such-page":  # a page in the page's language, not an API error body
                assert response.status == 404 and "text/html" in response.headers["content-type"]
                assert pg.evaluate("document.documentElement.lang") == ("zh-CN" if lang == "zh" else "en")
                title = pg.locator("main h1").inner_text()
                assert title == ("找不到页面" if lang == "zh" else "Not found")
                pg.screenshot(path=str(SCREENSHOTS / f"not-found-{viewport['width']}-{lang}.png"))
        first = layouts["/"]
        assert len(first) >= 4
        for path, layout in layouts.items():
            assert layout == first, f"{path}: the header differs from the search page's at {viewport['width']}px"
        context.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_chat_on_a_phone_folds_the_conversations_and_the_placeholder_fits(browser, work_server, lang):
    context = browser.new_context(viewport={"width": 375, "height": 800})
    context.add_cookies([{"name": "mewdex_lang", "value": lang, "url": work_server.url}])
    pg = context.new_page()
    pg.goto(work_server.url + "/chat")
    toggle = pg.locator("#chat-side-toggle")
    toggle.wait_for()
    assert not pg.locator("#chat-search").is_visible()  # folded: the conversation and the box come first
    box = pg.locator("#chat-input").bounding_box()
    assert box["y"] + box["height"] <= 800
    fits = pg.evaluate(
        """() => { const el = document.getElementById('chat-input'); const s = getComputedStyle(el);
        const ctx = document.createElement('canvas').getContext('2d'); ctx.font = `${s.fontSize} ${s.fontFamily}`;
        const room = el.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
        return ctx.measureText(el.placeholder).width <= room; }"""
    )
    assert fits, "the message box's placeholder is cut off at 375 px"
    pg.screenshot(path=str(SCREENSHOTS / f"chat-375-{lang}.png"))
    toggle.click()
    assert pg.locator("#chat-search").is_visible() and toggle.get_attribute("aria-expanded") == "true"
    pg.screenshot(path=str(SCREENSHOTS / f"chat-375-{lang}-list.png"))
    context.close()
