"""Issue 46, item 1, in a real browser: the sign-in page's single sign-on button, clicked, goes to a
real OpenID Connect provider (``oidc-provider-mock`` on loopback), whose form signs in, and comes
back to mewdex signed in — plain links and redirects, no script of ours on the way. The sign-in page
with the button is shot at 1280 and 375 px in English and Chinese (``tests/e2e/screenshots/sso-*``).
"""

from __future__ import annotations

import uuid

import pytest

from accounts_helpers import PASSWORD, delete_users, own_scope_users
from conftest import drop_scope, new_scope
from oidc_helpers import oidc_provider
from ui_helpers import SCREENSHOTS, start_server

SIZES = {"1280": {"width": 1280, "height": 900}, "375": {"width": 375, "height": 812}}
LOCALES = {"en": "en-US", "zh": "zh-CN"}
# The provider (oidc-provider-mock) still uses Authlib's deprecated JOSE module and JWT configuration.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def sso_server(mewdex_env, sessions, tmp_path_factory):
    scope = new_scope(sessions, "t-sso")
    with sessions.begin() as session:
        (user,), made = own_scope_users(session, ["sso-ui"], PASSWORD, role="user")
        email = user.email
    mp = pytest.MonkeyPatch()
    with oidc_provider(register=False) as provider:
        for key, value in {
            "MEWDEX_AUTH": "required",
            "MEWDEX_OIDC_ISSUER": provider.issuer,
            "MEWDEX_OIDC_CLIENT_ID": "mewdex-ui",
            "MEWDEX_OIDC_CLIENT_SECRET": "ui-secret",
            "MEWDEX_OIDC_NAME": "Authelia",
        }.items():
            mp.setenv(key, value)
        server = start_server(mewdex_env, scope, tmp_path_factory.mktemp("serve") / "sso.log")
        try:
            yield server, provider, email
        finally:
            server.stop()
            mp.undo()
            delete_users(sessions, made)
            drop_scope(sessions, scope)


def test_the_button_signs_in_through_the_provider(browser, sso_server):
    server, provider, email = sso_server
    sub = f"ui-{uuid.uuid4().hex[:8]}"
    provider.user(sub, email=email, email_verified=True, name="UI Person")
    for size, viewport in SIZES.items():
        for lang, locale in LOCALES.items():
            context = browser.new_context(viewport=viewport, locale=locale)
            page = context.new_page()
            page.goto(server.url + "/login")
            button = page.locator("#oidc-login")
            assert button.is_visible()
            label = "Sign in with Authelia" if lang == "en" else "使用 Authelia 登录"
            assert button.inner_text().strip() == label
            box = button.bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"], box  # not cut off
            page.screenshot(path=str(SCREENSHOTS / f"sso-login-{size}-{lang}.png"), full_page=True)
            context.close()

    context = browser.new_context(viewport=SIZES["1280"], locale="en-US")
    context.set_default_timeout(15_000)
    context.route("**/cdn.jsdelivr.net/**", lambda route: route.abort())  # the provider's stylesheet (offline)
    errors: list[str] = []
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server.url + "/login?next=/settings")
    page.click("#oidc-login")
    page.wait_for_url(provider.issuer + "/oauth2/authorize*")
    page.fill('input[name="sub"]', sub)
    page.click('button:has-text("Authorize")')
    page.wait_for_url(server.url + "/settings")
    assert email in page.locator("main").inner_text()
    me = page.evaluate("fetch('/api/v1/me').then(r => r.json())")
    assert me["user"]["email"] == email and me["auth"]["via"] == "session"
    page.screenshot(path=str(SCREENSHOTS / "sso-signed-in-1280-en.png"), full_page=True)
    context.close()
    assert not errors, errors

    # A callback this browser did not start: the page says so, in the page's language.
    for size, viewport in SIZES.items():
        for lang, locale in LOCALES.items():
            context = browser.new_context(viewport=viewport, locale=locale)
            page = context.new_page()
            response = page.goto(server.url + "/auth/oidc/callback?code=stolen&state=" + "x" * 32)
            assert response is not None and response.status == 400
            text = page.locator("#sso-error").inner_text()
            assert ("not started in this browser" if lang == "en" else "不是在此浏览器中发起的") in text
            page.screenshot(path=str(SCREENSHOTS / f"sso-refused-{size}-{lang}.png"), full_page=True)
            context.close()
