"""The Web Share Target is a proposal (issue 40, finding 3), in a real browser against a real ``mewdex
serve`` that requires sign-in, with a signed-in person whose installed app's service worker runs.

Files posted to ``/share-target`` — by the phone's share sheet, or by a page of another site that
auto-submits a form there — are shown on the Upload page (thumbnails, names, sizes, count) and
uploaded only when the person presses Upload; a script's click uploads nothing, nor a real click in
the first second the page is seen (one aimed at another page); Discard uploads
nothing and clears what the service worker holds. The library is counted in the database.
Screenshots of a proposal at 1280 and 375 px in English and Chinese: ``screenshots/share-proposal-*``.
"""

from __future__ import annotations

import io
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PIL import Image
from sqlalchemy import select, text

from ui_helpers import DESKTOP, PHONE, SCREENSHOTS, free_port, start_server

PASSWORD = "correct horse battery staple"
OTHER_SITE_HOST = "127.0.0.2"  # another site: another host than the server's 127.0.0.1
PROPOSAL = "#shared-proposal"


def png_bytes(color, size=(80, 60)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


class Account:
    email: str
    scope_id: str


@pytest.fixture(scope="module")
def signed_in_server(mewdex_env, sessions, tmp_path_factory):
    """``(server, account)``: ``mewdex serve`` with ``MEWDEX_AUTH=required`` and one user."""
    from mewdex.platform.users import create_user

    account = Account()
    account.email = f"share-{uuid.uuid4().hex[:8]}@example.com"
    with sessions.begin() as session:
        user = create_user(session, account.email, PASSWORD, role="user")
        user_id, account.scope_id = str(user.user_id), user.scope_id
    mp = pytest.MonkeyPatch()
    mp.setenv("MEWDEX_AUTH", "required")
    mp.setenv("MEWDEX_BCRYPT_ROUNDS", "4")

    class Scope:
        scope_id = account.scope_id

    server = start_server(mewdex_env, Scope(), tmp_path_factory.mktemp("serve") / "share.log")
    try:
        yield server, account
    finally:
        server.stop()
        mp.undo()
        with sessions.begin() as session:
            session.execute(text("DELETE FROM users WHERE user_id = :u"), {"u": user_id})
            if account.scope_id != "local":
                session.execute(text("DELETE FROM scopes WHERE id = :s"), {"s": account.scope_id})


# A page of another site that, once opened, posts two pictures to the share URL with no click. It sends
# no Referer, as any page can choose to: the rule must hold without one.
HOSTILE_PAGE = """<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">
<title>cute cats</title>
<form id="f" method="POST" action="{target}/share-target" enctype="multipart/form-data">
  <input type="file" name="files" multiple>
</form>
<script>
  const files = {files};
  const dt = new DataTransfer();
  for (const f of files) {{
    const bytes = Uint8Array.from(atob(f.b64), (c) => c.charCodeAt(0));
    dt.items.add(new File([bytes], f.name, {{type: f.type}}));
  }}
  document.querySelector("input").files = dt.files;
  document.getElementById("f").submit();
</script>"""


@pytest.fixture(scope="module")
def other_site(signed_in_server):
    """``post(files) -> url``: a page served from another site (``http://127.0.0.2:<port>``) that
    auto-submits ``files`` (``[(name, type, bytes)]``) to the server's share URL when opened."""
    import base64

    server, _ = signed_in_server
    pages: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = pages.get(self.path)
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer((OTHER_SITE_HOST, free_port()), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()

    def post(files) -> str:
        path = f"/{uuid.uuid4().hex}.html"
        listed = [{"name": n, "type": t, "b64": base64.b64encode(b).decode()} for n, t, b in files]
        pages[path] = HOSTILE_PAGE.format(target=server.url, files=json.dumps(listed)).encode()
        return f"http://{OTHER_SITE_HOST}:{httpd.server_address[1]}{path}"

    yield post
    httpd.shutdown()
    httpd.server_close()


def library_names(sessions, scope_id: str) -> list[str]:
    from mewdex.db.models import Meme

    with sessions() as s:
        return sorted(s.execute(select(Meme.display_name).where(Meme.scope_id == scope_id)).scalars())


def installed_app(browser, server, email: str, *, viewport=DESKTOP, locale="en-US"):
    """``(context, page, uploads, errors)``: signed in, on the Upload page, controlled by the service
    worker (as the installed app is); ``uploads`` collects every ``POST /api/v1/memes`` the page makes."""
    context = browser.new_context(viewport=viewport, locale=locale)
    context.set_default_timeout(20_000)
    r = context.request.post(server.url + "/api/v1/auth/login", data={"email": email, "password": PASSWORD})
    assert r.status == 200, r.text()
    pg = context.new_page()
    errors: list[str] = []
    uploads: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))

    def record(req) -> None:
        if req.method == "POST" and "/api/v1/memes" in req.url:
            uploads.append(req.url)

    pg.on("request", record)
    pg.goto(server.url + "/upload")
    pg.evaluate("async () => { await navigator.serviceWorker.ready; }")
    pg.reload()
    assert pg.evaluate("() => !!navigator.serviceWorker.controller")
    return context, pg, uploads, errors


def shared_kept(pg) -> int:
    """How many files the service worker holds for the upload page."""
    return pg.evaluate(
        """async () => (await (await caches.open('mewdex-shared')).keys())
            .filter((r) => new URL(r.url).pathname.startsWith('/shared-files/')).length"""
    )


def arrive(pg, server, url: str) -> None:
    """Open ``url`` (it posts to the share URL) and wait until the Upload page has taken what came."""
    pg.goto(url)
    pg.wait_for_url(server.url + "/upload*")
    pg.wait_for_function(
        "() => document.querySelector('#shared-proposal:not([hidden])') || document.querySelector('#upload-list li')"
    )
    time.sleep(1.0)  # time for any upload the page would start by itself


def test_a_page_of_another_site_uploads_nothing_until_the_person_presses_upload(
    browser, signed_in_server, other_site, sessions
):
    server, account = signed_in_server
    before = library_names(sessions, account.scope_id)
    red, blue = png_bytes((200, 30, 30)), png_bytes((30, 30, 200), size=(60, 90))
    url = other_site([("planted one.png", "image/png", red), ("planted two.png", "image/png", blue)])
    context, pg, uploads, errors = installed_app(browser, server, account.email)
    try:
        arrive(pg, server, url)
        assert uploads == [], uploads  # the page sent nothing by itself
        assert library_names(sessions, account.scope_id) == before
        proposal = pg.locator(PROPOSAL)
        assert proposal.is_visible()
        assert pg.locator("#shared-files .file-name").all_inner_texts() == ["planted one.png", "planted two.png"]
        assert pg.locator("#shared-files img").count() == 2  # thumbnails
        assert pg.locator("#shared-count").inner_text().startswith("2 files")
        assert pg.locator("#shared-files .file-size").all_inner_texts() == [f"{len(red)} B", f"{len(blue)} B"]
        assert shared_kept(pg) == 2

        # A script's click is not the person's: nothing happens.
        pg.evaluate("() => document.querySelector('[data-action=shared-upload]').click()")
        time.sleep(0.5)
        assert uploads == [] and proposal.is_visible()
        assert library_names(sessions, account.scope_id) == before

        # The person's click uploads exactly those files, through the normal path.
        pg.locator("[data-action=shared-upload]").click()
        pg.wait_for_function("() => document.querySelectorAll('#upload-list [data-status=created]').length === 2")
        assert len(uploads) == 2
        assert proposal.is_hidden()
        assert shared_kept(pg) == 0
        after = library_names(sessions, account.scope_id)
        assert sorted(set(after) - set(before)) == ["planted one", "planted two"] and len(after) == len(before) + 2
    finally:
        context.close()
    assert not errors, errors


def test_a_click_meant_for_another_page_uploads_nothing(browser, signed_in_server, other_site, sessions):
    """A site that asks for a double click can swap mewdex in under the pointer between the two clicks
    (navigating itself, or its opener, to the proposal): that second click is real, but it was aimed at
    the other page. Upload stays disabled until the page has been seen for a moment (the page's clock is
    held still here, so the moment never comes until the test lets it pass), and again after the
    window was in the background."""
    server, account = signed_in_server
    before = library_names(sessions, account.scope_id)
    url = other_site([("swapped in.png", "image/png", png_bytes((120, 20, 160)))])
    context, pg, uploads, errors = installed_app(browser, server, account.email)
    try:
        pg.clock.install()
        pg.clock.pause_at(time.time() * 1000 + 60_000)  # page time stands still until run_for
        arrive(pg, server, url)
        assert pg.locator("#shared-count").inner_text().startswith("1 file · ")  # one file, not "1 files"
        button = pg.locator("[data-action=shared-upload]")
        box = button.bounding_box()
        assert box is not None
        pg.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # a real click, too soon
        time.sleep(1.0)
        assert uploads == [] and pg.locator(PROPOSAL).is_visible()
        assert library_names(sessions, account.scope_id) == before

        pg.evaluate("() => window.dispatchEvent(new Event('blur'))")  # the window went to the background
        pg.clock.run_for(500)
        pg.evaluate("() => window.dispatchEvent(new Event('focus'))")  # and came back: the wait starts again
        pg.clock.run_for(900)
        assert button.is_disabled()
        pg.clock.run_for(200)
        assert button.is_enabled()
        button.click()
        pg.wait_for_function("() => document.querySelectorAll('#upload-list [data-status=created]').length === 1")
        assert len(uploads) == 1
        assert "swapped in" in library_names(sessions, account.scope_id)
    finally:
        context.close()
    assert not errors, errors


def test_a_share_left_pending_is_not_shown_to_the_next_account_signed_in(
    browser, signed_in_server, other_site, sessions
):
    """A proposal belongs to the account it was first shown to: someone who shares, leaves it pending and
    signs out, then another person signs in on the same browser: they see nothing of it, and it is gone."""
    from mewdex.platform.users import create_user

    server, account = signed_in_server
    other_email = f"next-{uuid.uuid4().hex[:8]}@example.com"
    with sessions.begin() as session:
        other = create_user(session, other_email, PASSWORD, role="user")
        other_id, other_scope = str(other.user_id), other.scope_id
    url = other_site([("private holiday.png", "image/png", png_bytes((20, 120, 200)))])
    context, pg, uploads, errors = installed_app(browser, server, account.email)
    try:
        arrive(pg, server, url)
        assert pg.locator("#shared-files .file-name").all_inner_texts() == ["private holiday.png"]
        r = context.request.post(
            server.url + "/api/v1/auth/logout",
            headers={"X-CSRF-Token": pg.evaluate("() => window.mewdexCsrfToken ? window.mewdexCsrfToken() : ''")},
        )
        assert r.status in (200, 204), r.text()
        r = context.request.post(server.url + "/api/v1/auth/login", data={"email": other_email, "password": PASSWORD})
        assert r.status == 200, r.text()
        pg.goto(server.url + "/upload")
        time.sleep(1.5)
        assert pg.locator(PROPOSAL).is_hidden()
        assert "private holiday" not in pg.content()
        assert shared_kept(pg) == 0
        assert uploads == []
        assert library_names(sessions, other_scope) == []
    finally:
        context.close()
        with sessions.begin() as session:
            session.execute(text("DELETE FROM users WHERE user_id = :u"), {"u": other_id})
            session.execute(text("DELETE FROM scopes WHERE id = :s"), {"s": other_scope})
    assert not errors, errors


def test_discard_uploads_nothing_and_clears_what_the_service_worker_holds(
    browser, signed_in_server, other_site, sessions
):
    server, account = signed_in_server
    before = library_names(sessions, account.scope_id)
    url = other_site([("unwanted.png", "image/png", png_bytes((10, 200, 10)))])
    context, pg, uploads, errors = installed_app(browser, server, account.email, locale="zh-CN")
    try:
        arrive(pg, server, url)
        assert pg.locator(PROPOSAL).is_visible()
        pg.reload()  # a proposal waits for the person's answer: reloading the page shows it again
        pg.locator(PROPOSAL).wait_for(state="visible")
        assert pg.locator("#shared-count").inner_text().startswith("1 个文件")
        pg.locator("[data-action=shared-discard]").click()
        pg.locator(PROPOSAL).wait_for(state="hidden")
        assert "已丢弃" in pg.locator("#upload-summary").inner_text()
        assert shared_kept(pg) == 0
        pg.reload()
        time.sleep(1.0)
        assert pg.locator(PROPOSAL).is_hidden()
        assert uploads == []
        assert library_names(sessions, account.scope_id) == before
    finally:
        context.close()
    assert not errors, errors


def test_a_picture_shared_from_the_phone_is_uploaded_with_one_tap(browser, signed_in_server, sessions, tmp_path):
    """The share sheet's own POST (the manifest's share_target) shows the proposal; one tap on Upload
    sends the files through the normal upload path (a non-image is rejected there, as a drop would be)."""
    server, account = signed_in_server
    picture = tmp_path / "from the gallery.png"
    picture.write_bytes(png_bytes((250, 180, 20), size=(80, 60)))
    not_image = tmp_path / "not an image.png"
    not_image.write_bytes(b"not an image at all" * 10)
    context, pg, uploads, errors = installed_app(browser, server, account.email, viewport=PHONE, locale="zh-CN")
    try:
        pg.evaluate(
            """() => {
              const form = document.createElement("form");
              form.method = "POST"; form.action = "/share-target"; form.enctype = "multipart/form-data";
              form.id = "share-sheet";
              const input = document.createElement("input");
              input.type = "file"; input.name = "files"; input.multiple = true;
              form.append(input); document.body.append(form);
            }"""
        )
        pg.set_input_files("#share-sheet input", [str(picture), str(not_image)])
        with pg.expect_navigation():
            pg.evaluate("() => document.getElementById('share-sheet').submit()")
        pg.locator(PROPOSAL).wait_for(state="visible")
        assert pg.url == server.url + "/upload"  # ?shared=N is dropped from the address
        assert uploads == []
        pg.locator("[data-action=shared-upload]").click()
        pg.wait_for_function("() => document.querySelectorAll('#upload-list [data-status]').length === 2")
        assert pg.locator("#upload-list [data-status=created] a").inner_text().endswith("from the gallery")
        assert pg.locator("#upload-list [data-status=rejected] .file-name").inner_text() == "not an image.png"
        pg.screenshot(path=str(SCREENSHOTS / "share-target-zh-phone.png"), full_page=False)
        assert shared_kept(pg) == 0
    finally:
        context.close()
    assert not errors, errors
    assert "from the gallery" in library_names(sessions, account.scope_id)


@pytest.mark.parametrize("lang,locale", [("en", "en-US"), ("zh", "zh-CN")])
@pytest.mark.parametrize("size,viewport", [("1280", DESKTOP), ("375", {"width": 375, "height": 812})])
def test_screenshots_of_a_shared_proposal(
    browser, signed_in_server, other_site, sessions, lang, locale, size, viewport
):
    from mewdex.db.models import ScopeContext
    from mewdex.library import collections

    server, account = signed_in_server
    name = "A collection whose name is far longer than a phone is wide, which the page's select lists"
    with sessions.begin() as session:
        collections.get_or_create(session, ScopeContext(account.scope_id), name)
    files = [
        ("IMG_20240611_184455_a_rather_long_camera_file_name.png", "image/png", png_bytes((240, 160, 60), (120, 90))),
        ("猫猫 无语.png", "image/png", png_bytes((90, 140, 220), (60, 90))),
        ("notes.txt", "text/plain", b"not a picture"),
    ]
    context, pg, uploads, errors = installed_app(browser, server, account.email, viewport=viewport, locale=locale)
    try:
        arrive(pg, server, other_site(files))
        assert pg.locator("#shared-files li").count() == 3
        pg.screenshot(path=str(SCREENSHOTS / f"share-proposal-{size}-{lang}.png"), full_page=True)
        assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth + 1")
        pg.locator("[data-action=shared-discard]").click()
        pg.locator(PROPOSAL).wait_for(state="hidden")
        assert uploads == []
        for path in ("/", "/library"):  # the other pages whose selects list the collections
            pg.goto(server.url + path)
            listed = "(n) => [...document.querySelectorAll('select option')].some((o) => o.textContent.trim() === n)"
            assert pg.evaluate(listed, name), path
            if path == "/":
                pg.screenshot(path=str(SCREENSHOTS / f"search-long-collection-{size}-{lang}.png"))
            assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth + 1"), path
    finally:
        context.close()
    assert not errors, errors
