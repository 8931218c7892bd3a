"""Accounts in a real browser against a real ``mewdex serve`` (``MEWDEX_AUTH=auto`` on loopback):
the setup page creates the admin with the setup code the server printed (and sign-in is then on for
this machine too), the account page makes a token shown once and revokes it, changes the password and
the language and time zone, and the admin page creates an account whose one-time link works once,
disables it, and flips sign-up. Times show in the account's zone and the page's language. Every page
is shot at 1280 and 375 px in English and Chinese (``tests/e2e/screenshots/account-*``).

The tests of this module run in order on one server and one admin (the first test makes it).
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta

import httpx
import pytest
from sqlalchemy import text

from conftest import drop_scope, new_scope, wait_until
from ui_helpers import SCREENSHOTS, start_server

PASSWORD = "correct horse battery"
NEW_PASSWORD = "a longer new password"
SIZES = {"1280": {"width": 1280, "height": 900}, "375": {"width": 375, "height": 812}}
LOCALES = {"en": "en-US", "zh": "zh-CN"}


class State:
    """What the tests of this module share: the server, the admin's email and password."""

    server = None
    admin_email = f"admin-{uuid.uuid4().hex[:8]}@example.com"
    admin_password = PASSWORD


@pytest.fixture(scope="module")
def acct(mewdex_env, sessions, tmp_path_factory):
    # A fresh install has no account: accounts earlier tests of the session left behind go (their
    # scopes stay), else there is no setup page to test.
    with sessions.begin() as session:
        session.execute(text("DELETE FROM users"))
    scope = new_scope(sessions, "t-acct")
    mp = pytest.MonkeyPatch()
    mp.setenv("MEWDEX_AUTH", "auto")
    mp.setenv("MEWDEX_BCRYPT_ROUNDS", "4")
    server = start_server(mewdex_env, scope, tmp_path_factory.mktemp("serve") / "accounts.log")
    State.server = server
    try:
        yield server
    finally:
        server.stop()
        mp.undo()
        with sessions.begin() as session:
            session.execute(text("DELETE FROM users"))  # every account here was made by this module
            session.execute(text("DELETE FROM platform_settings WHERE key = 'signup_enabled'"))
        drop_scope(sessions, scope)


def context_for(browser, lang: str = "en", size: str = "1280"):
    context = browser.new_context(viewport=SIZES[size], locale=LOCALES[lang])
    context.set_default_timeout(15_000)
    return context


def new_page(context):
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("dialog", lambda dialog: dialog.accept())
    pg.errors = errors
    return pg


def set_lang(context, server, lang: str) -> None:
    context.add_cookies([{"name": "mewdex_lang", "value": lang, "url": server.url}])


def sign_in(pg, server, email: str, password: str, next_path: str = "/") -> None:
    pg.goto(f"{server.url}/login?next={next_path}")
    pg.fill("input[name=email]", email)
    pg.fill("input[name=password]", password)
    pg.locator("#login-form button[value=login]").click()
    pg.wait_for_url(lambda url: "/login" not in url and url.split("?")[0].endswith(next_path))
    pg.wait_for_load_state()


def shoot_everywhere(browser, server, pages: dict[str, str], *, email: str | None = None):
    """``account-<name>-<size>-<lang>.png`` of each ``{name: path}`` at both sizes in both languages
    (one browser context, signed in as ``email`` when given, per size and language); no page
    overflows sideways at 375 px."""
    for lang in LOCALES:
        for size in SIZES:
            context = context_for(browser, lang, size)
            pg = new_page(context)
            try:
                if email:
                    sign_in(pg, server, email, State.admin_password)
                set_lang(context, server, lang)  # over the account's language that signing in brought
                for name, path in pages.items():
                    pg.goto(server.url + path)
                    pg.wait_for_load_state()
                    pg.wait_for_function("() => !document.querySelector('time[data-when]:not([data-local])')")
                    if name == "schedules":
                        pg.locator("#sched-next li").first.wait_for()  # the preview, in the page's language
                    pg.screenshot(path=str(SCREENSHOTS / f"account-{name}-{size}-{lang}.png"), full_page=True)
                    if size == "375":
                        assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth + 1"), (name, lang)
                assert not pg.errors, pg.errors
            finally:
                context.close()


def test_setup_page_explains_and_creates_the_admin_with_the_printed_code(browser, acct):
    log = acct.log.read_text()
    found = re.search(r"one-time setup code (\S+)", log)
    assert found, log
    shoot_everywhere(browser, acct, {"setup": "/login"})
    context = context_for(browser, "zh")
    set_lang(context, acct, "zh")
    pg = new_page(context)
    try:
        pg.goto(acct.url + "/login")
        notice = pg.locator("#setup-notice").inner_text()
        assert "所有人都需要登录" in notice and "本机" in notice
        # the setup-code field comes before the button
        assert pg.evaluate(
            """() => { const code = document.querySelector('input[name=setup_code]');
                       const button = document.querySelector('#login-form button[type=submit]');
                       return !!(code.compareDocumentPosition(button) & Node.DOCUMENT_POSITION_FOLLOWING); }"""
        )
        pg.fill("input[name=email]", State.admin_email)
        pg.fill("input[name=password]", PASSWORD)
        pg.fill("input[name=setup_code]", "not-the-code")
        pg.locator("#login-form button[type=submit]").click()
        error = pg.locator("#login-error")
        wait_until(lambda: error.inner_text() != "", 10, 0.1, "the error")
        assert "`" not in error.inner_text() and "设置码" in error.inner_text()
        pg.fill("input[name=setup_code]", found.group(1))
        pg.locator("#login-form button[type=submit]").click()
        pg.wait_for_selector(".account [data-action=sign-out]")
    finally:
        context.close()
    # sign-in is on for everyone now, this machine included
    r = httpx.get(acct.url + "/library", headers={"Accept": "text/html"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login")
    assert httpx.get(acct.url + "/api/v1/me").status_code == 401


def test_token_is_shown_once_works_with_its_scopes_and_revoking_stops_it(browser, acct):
    context = context_for(browser)
    pg = new_page(context)
    try:
        sign_in(pg, acct, State.admin_email, State.admin_password, "/settings")
        pg.fill("#token-name", "read-only script")
        pg.locator("#token-form input[value=write]").uncheck()
        pg.select_option("#token-expiry", "30")
        pg.locator("#token-form button[type=submit]").dblclick()  # one token, not two
        pg.locator("#token-new").wait_for()
        token = pg.locator("#token-value").inner_text()
        assert token.startswith("mdx_")
        row = pg.locator("#token-list tr", has_text="read-only script")
        row.wait_for()
        assert token[:8] in row.inner_text() and token not in pg.locator("#token-list").inner_html()
        expires = datetime.fromisoformat(row.locator("time").nth(1).get_attribute("datetime").replace("Z", "+00:00"))
        assert abs(expires - datetime.now(expires.tzinfo) - timedelta(days=30)) < timedelta(minutes=5)
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.get(acct.url + "/api/v1/me", headers=auth).status_code == 200
        r = httpx.post(acct.url + "/api/v1/collections", headers=auth, json={"name": "nope"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "insufficient_scope"
        pg.reload()  # shown once: the page never shows it again
        assert token not in pg.content()
        assert pg.locator("#token-list tr", has_text="read-only script").count() == 1
        pg.locator("#token-list tr", has_text="read-only script").locator("[data-action=revoke-token]").click()
        revoked = pg.locator("#token-list tr.is-off", has_text="read-only script")
        revoked.wait_for()
        assert "revoked" in revoked.inner_text()
        assert httpx.get(acct.url + "/api/v1/me", headers=auth).status_code == 401
        assert not pg.errors, pg.errors
    finally:
        context.close()


def test_password_change_signs_out_other_browsers(browser, acct):
    other = context_for(browser)
    other_pg = new_page(other)
    context = context_for(browser)
    pg = new_page(context)
    try:
        sign_in(other_pg, acct, State.admin_email, State.admin_password, "/library")
        sign_in(pg, acct, State.admin_email, State.admin_password, "/settings")
        form = pg.locator("#password-form")
        form.locator("input[name=current_password]").fill("wrong password here")
        form.locator("input[name=new_password]").fill(NEW_PASSWORD)
        form.locator("input[name=confirm_password]").fill(NEW_PASSWORD + "x")
        form.locator("button[type=submit]").click()
        assert pg.locator("#password-error").inner_text() == "The two new passwords differ."
        form.locator("input[name=confirm_password]").fill(NEW_PASSWORD)
        form.locator("button[type=submit]").click()
        wait_until(lambda: "Wrong" in pg.locator("#password-error").inner_text(), 10, 0.1, "wrong password error")
        form.locator("input[name=current_password]").fill(State.admin_password)
        form.locator("button[type=submit]").click()
        pg.locator("#toast.show", has_text="Password changed").wait_for()
        State.admin_password = NEW_PASSWORD
        pg.goto(acct.url + "/settings")  # this browser stays signed in
        assert pg.locator(".account [data-action=sign-out]").count() == 1
        other_pg.goto(acct.url + "/library")  # the other one was signed out
        other_pg.wait_for_url(re.compile(r".*/login\b.*"))
        r = httpx.post(acct.url + "/api/v1/auth/login", json={"email": State.admin_email, "password": PASSWORD})
        assert r.status_code == 401
        # sign out everywhere: the other browser signs in again, then both are out
        sign_in(other_pg, acct, State.admin_email, State.admin_password, "/library")
        pg.locator("#sign-out-everywhere").click()
        pg.wait_for_url(re.compile(r".*/login\b.*"))
        other_pg.goto(acct.url + "/library")
        other_pg.wait_for_url(re.compile(r".*/login\b.*"))
        assert not pg.errors and not other_pg.errors
    finally:
        context.close()
        other.close()


def test_admin_creates_a_user_whose_link_works_once_disables_them_and_flips_sign_up(browser, acct):
    context = context_for(browser)
    pg = new_page(context)
    user_ctx = context_for(browser)
    user_pg = new_page(user_ctx)
    email = f"friend-{uuid.uuid4().hex[:6]}@example.com"
    try:
        sign_in(pg, acct, State.admin_email, State.admin_password, "/admin")
        pg.fill("#create-user-form input[name=email]", email)
        pg.locator("#create-user-form button[type=submit]").click()
        pg.locator("#reset-link-box").wait_for()
        link = pg.locator("#reset-link-value").inner_text()
        assert "/reset#mdr_" in link
        row = pg.locator(f"tr[data-email='{email}']")
        row.wait_for()
        # the friend sets a password with the link, once
        user_pg.goto(link)
        assert "#" not in user_pg.url  # the token left the address bar
        user_pg.fill("#reset-form input[name=new_password]", PASSWORD)
        user_pg.fill("#reset-form input[name=confirm_password]", PASSWORD)
        user_pg.locator("#reset-form button[type=submit]").click()
        user_pg.locator("#reset-done").wait_for()
        again = new_page(user_ctx)  # the link opened a second time, in a new tab
        again.goto(link)
        again.fill("#reset-form input[name=new_password]", NEW_PASSWORD)
        again.fill("#reset-form input[name=confirm_password]", NEW_PASSWORD)
        again.locator("#reset-form button[type=submit]").click()
        wait_until(lambda: "already used" in again.locator("#reset-error").inner_text(), 10, 0.1, "used link")
        again.close()
        # a mangled link (a stray "%") says so, and the new password never goes into the address
        mangled = new_page(user_ctx)
        mangled.goto(acct.url + "/reset#mdr_%E0%A4%A")
        mangled.fill("#reset-form input[name=new_password]", NEW_PASSWORD)
        mangled.fill("#reset-form input[name=confirm_password]", NEW_PASSWORD)
        mangled.locator("#reset-form button[type=submit]").click()
        wait_until(lambda: mangled.locator("#reset-error").inner_text(), 10, 0.1, "mangled link refused")
        assert "password" not in mangled.url and not mangled.errors, (mangled.url, mangled.errors)
        mangled.close()
        sign_in(user_pg, acct, email, PASSWORD, "/library")
        # disabling signs the friend out at once; enabling lets them sign in again
        row.locator("[data-action=disable-user]").click()
        pg.locator(f"tr.is-off[data-email='{email}']").wait_for()
        user_pg.goto(acct.url + "/library")
        user_pg.wait_for_url(re.compile(r".*/login\b.*"))
        pg.locator(f"tr[data-email='{email}'] [data-action=enable-user]").click()
        pg.locator(f"tr[data-email='{email}']:not(.is-off) [data-action=disable-user]").wait_for()
        sign_in(user_pg, acct, email, PASSWORD, "/library")
        # quotas: 2 memes at most
        quota = pg.locator(f"tr[data-email='{email}'] details.quota-edit")
        quota.locator("summary").click()
        quota.locator("input[name=memes]").fill("2")
        quota.locator("button[type=submit]").click()
        wait_until(lambda: "0 / 2" in pg.locator(f"tr[data-email='{email}']").inner_text(), 10, 0.1, "quota")
        # delete (after the confirmation): the row goes and the friend is signed out for good
        pg.locator(f"tr[data-email='{email}'] [data-action=delete-user]").click()
        pg.locator(f"tr[data-email='{email}']").wait_for(state="detached")
        user_pg.goto(acct.url + "/library")
        user_pg.wait_for_url(re.compile(r".*/login\b.*"))
        # sign-up: closed → open (the sign-in page offers "Create account") → closed
        anon = httpx.get(acct.url + "/login").text
        assert 'value="signup"' not in anon
        pg.locator("#signup-toggle").click()
        pg.wait_for_function("() => document.querySelector('#signup-toggle').dataset.enabled === 'true'")
        assert 'value="signup"' in httpx.get(acct.url + "/login").text
        pg.locator("#signup-toggle").click()
        pg.wait_for_function("() => document.querySelector('#signup-toggle').dataset.enabled === 'false'")
        assert 'value="signup"' not in httpx.get(acct.url + "/login").text
        assert not pg.errors and not user_pg.errors
    finally:
        context.close()
        user_ctx.close()


def test_times_show_in_the_accounts_zone_and_the_pages_language(browser, acct):
    context = context_for(browser, "zh")
    set_lang(context, acct, "zh")
    pg = new_page(context)
    try:
        sign_in(pg, acct, State.admin_email, State.admin_password, "/settings")
        pg.fill("#prefs-tz", "Asia/Tokyo")
        pg.select_option("#prefs-language", "zh")
        pg.locator("#prefs-form button[type=submit]").click()
        pg.wait_for_url("**/settings?saved=1")
        assert pg.evaluate("() => document.documentElement.dataset.tz") == "Asia/Tokyo"
        pg.goto(acct.url + "/admin")
        stamp = pg.locator("#user-rows time").first
        stamp.wait_for()
        utc = datetime.fromisoformat(stamp.get_attribute("datetime").replace("Z", "+00:00"))
        shown = stamp.inner_text()
        tokyo = utc + timedelta(hours=9)
        assert (
            f"{tokyo.year}年{tokyo.month}月{tokyo.day}日" in shown and f"{tokyo.hour:02d}:{tokyo.minute:02d}" in shown
        )
        assert "UTC" in stamp.get_attribute("title")  # the server's UTC text stays as the hover title
        # the schedule preview: weekdays in Chinese on the Chinese page
        pg.goto(acct.url + "/schedules")
        first_run = pg.locator("#sched-next li").first
        first_run.wait_for()
        run_text = first_run.inner_text()
        assert re.search(r"周[一二三四五六日]", run_text) and not re.search(
            r"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun)\b", run_text
        )
        assert not pg.errors, pg.errors
    finally:
        context.close()


def test_screenshots_of_the_account_and_admin_pages(browser, acct):
    shoot_everywhere(
        browser,
        acct,
        {"settings": "/settings", "admin": "/admin", "reset": "/reset#mdr_example", "schedules": "/schedules"},
        email=State.admin_email,
    )
