"""Issue 13 point 12 in a real browser: on http://127.0.0.1 Chromium keeps the Secure ``__Host-``
session and CSRF cookies, sends them back, and auth.js echoes the CSRF cookie on a state change."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from ui_helpers import DESKTOP, start_server

PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def signin_server(mewdex_env, sessions, tmp_path_factory):
    """One server with sign-in required for the module (each test signs in in a browser of its own)."""
    from mewdex.platform.users import create_user

    email = f"cookie-{uuid.uuid4().hex[:8]}@example.com"
    with sessions.begin() as session:
        user = create_user(session, email, PASSWORD, role="admin")
        user_id, scope_id = str(user.user_id), user.scope_id
    mp = pytest.MonkeyPatch()
    mp.setenv("MEWDEX_AUTH", "required")
    mp.setenv("MEWDEX_BCRYPT_ROUNDS", "4")

    class Scope:
        pass

    scope = Scope()
    scope.scope_id = scope_id
    try:
        server = start_server(mewdex_env, scope, tmp_path_factory.mktemp("serve") / "serve.log")
    finally:
        mp.undo()
    try:
        yield server, email
    finally:
        server.stop()
        with sessions.begin() as session:
            session.execute(text("DELETE FROM users WHERE user_id = :u"), {"u": user_id})


def test_chromium_keeps_host_prefixed_cookies_on_loopback_http(browser, signin_server):
    server, email = signin_server
    context = browser.new_context(viewport=DESKTOP, locale="en-US")
    pg = context.new_page()
    try:
        pg.goto(server.url + "/login")
        pg.fill("input[name=email]", email)
        pg.fill("input[name=password]", PASSWORD)
        pg.locator("#login-form button[type=submit]").first.click()
        pg.wait_for_selector(".account")  # "signed in as" in the header: the session cookie came back
        cookies = {c["name"]: c for c in context.cookies()}
        assert {"__Host-mewdex_session", "__Host-mewdex_csrf"} <= set(cookies), cookies.keys()
        assert cookies["__Host-mewdex_session"]["secure"] and cookies["__Host-mewdex_session"]["httpOnly"]
        assert "mewdex_session" not in cookies
        status = pg.evaluate(
            """async () => (await fetch('/api/v1/tokens', {method: 'POST',
                 headers: {'Content-Type': 'application/json'}, body: JSON.stringify({name: 'page'})})).status"""
        )
        assert status == 201  # auth.js read the __Host- CSRF cookie and sent X-CSRF-Token
        pg.locator("[data-action=sign-out]").click()
        pg.wait_for_url("**/login*")
        assert "__Host-mewdex_session" not in {c["name"] for c in context.cookies()}
    finally:
        context.close()


@pytest.mark.parametrize("locale,lang", [("en-US", "en"), ("zh-CN", "zh")])
def test_phone_header_stays_one_row_when_signed_in(browser, signin_server, locale, lang):
    """Issue 19: at 375 px the signed-in header (menu, Admin, sign-out, languages) is still one row."""
    from ui_helpers import SCREENSHOTS

    server, email = signin_server
    context = browser.new_context(viewport={"width": 375, "height": 812}, locale=locale)
    pg = context.new_page()
    try:
        pg.goto(server.url + "/login")
        pg.fill("input[name=email]", email)
        pg.fill("input[name=password]", PASSWORD)
        pg.locator("#login-form button[type=submit]").first.click()
        pg.wait_for_selector(".account [data-action=sign-out]")
        assert pg.locator(".topbar").bounding_box()["height"] <= 56
        assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
        assert pg.locator(".account [data-action=sign-out]").is_visible()
        pg.locator("[data-action=toggle-nav]").click()
        assert pg.locator("#site-nav a[href='/tasks']").is_visible()
        pg.screenshot(path=str(SCREENSHOTS / f"header-signed-in-375-{lang}.png"))
    finally:
        context.close()
