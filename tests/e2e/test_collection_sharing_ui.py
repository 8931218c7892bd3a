"""A collection's sharing section (issue 43) in a real browser, on the owner's collection page: share with
an account by email as viewer, make it an editor, remove it; create a public link with an expiry, its
URL shown once and working, delete it (the URL then 404s) — all through the API routes, no reload. en and
zh, desktop and 375 px (screenshots)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from accounts_helpers import delete_users, own_scope_users
from ui_helpers import DESKTOP, SCREENSHOTS

PHONE = {"width": 375, "height": 812}


@pytest.fixture(scope="module")
def friend(sessions):
    with sessions.begin() as session:
        users, made = own_scope_users(session, ["friend"])
        email = users[0].email
    yield email
    delete_users(sessions, made)


def test_share_with_an_account_and_by_a_public_link(browser, work_server, friend):
    url = work_server.url
    cid = httpx.post(f"{url}/api/v1/collections", json={"name": f"Friday {uuid.uuid4().hex[:6]}"}, timeout=30).json()
    cid = cid["id"]
    context = browser.new_context(viewport=PHONE, locale="en-US")
    context.set_default_timeout(15_000)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        pg.goto(f"{url}/collections/{cid}")
        box = pg.locator("[data-component=sharing]")
        box.locator("summary").click()
        pg.evaluate("() => { window.__stayed = true; }")
        form = box.locator("[data-share-form=member]")
        form.locator("input[name=email]").fill("nobody-" + uuid.uuid4().hex[:6] + "@example.com")
        form.locator("button[type=submit]").click()
        pg.wait_for_function("() => document.querySelector('[data-share-form=member] .form-error')?.textContent")
        assert form.locator(".form-error").inner_text() == "No account has that email."
        form.locator("input[name=email]").fill(friend)
        form.locator("select[name=role]").select_option("viewer")
        form.locator("button[type=submit]").click()
        row = box.locator(f"[data-member-list] li[data-email='{friend}']")
        row.wait_for()
        row.locator("select").select_option("editor")
        pg.wait_for_function("() => document.getElementById('toast').textContent.startsWith('Role of')")
        members = httpx.get(f"{url}/api/v1/collections/{cid}/members", timeout=30).json()["members"]
        assert [(m["email"], m["role"]) for m in members] == [(friend, "editor")]

        links = box.locator("[data-share-form=link]")
        links.locator("select[name=days]").select_option("7")
        links.locator("button[type=submit]").click()
        box.locator("[data-new-link]:not([hidden])").wait_for()
        link_url = box.locator("[data-new-link-url]").input_value()
        assert "/s/" in link_url and httpx.get(link_url, timeout=30).status_code == 200
        box.locator("[data-share-action=copy-url]").click()
        pg.wait_for_function("() => document.getElementById('toast').textContent === 'Link copied'")
        assert pg.evaluate("() => navigator.clipboard.readText()") == link_url
        assert box.locator("[data-link-list] li").count() == 1
        assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
        assert pg.evaluate("() => window.__stayed === true")
    finally:
        context.close()
    assert not errors, errors

    # both languages, desktop and 375 px, with an account and a link in the lists
    for locale, lang in (("en-US", "en"), ("zh-CN", "zh")):
        for viewport, size in ((DESKTOP, "desktop"), (PHONE, "375")):
            context = browser.new_context(viewport=viewport, locale=locale)
            pg = context.new_page()
            pg.goto(f"{url}/collections/{cid}")
            assert pg.locator("[data-component=sharing] summary h2").inner_text() == (
                "Sharing" if lang == "en" else "共享"
            )
            assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
            pg.screenshot(path=str(SCREENSHOTS / f"collection-sharing-{size}-{lang}.png"), full_page=True)
            context.close()

    context = browser.new_context(viewport=PHONE, locale="en-US")
    context.set_default_timeout(15_000)
    pg = context.new_page()
    try:
        pg.goto(f"{url}/collections/{cid}")
        box = pg.locator("[data-component=sharing]")
        box.locator("[data-link-list] [data-share-action=delete-link]").click()
        box.locator("[data-links-none]:not([hidden])").wait_for()
        assert httpx.get(link_url, timeout=30).status_code == 404
        box.locator(f"li[data-email='{friend}'] [data-share-action=remove-member]").click()
        box.locator("[data-members-none]:not([hidden])").wait_for()
        assert httpx.get(f"{url}/api/v1/collections/{cid}/members", timeout=30).json()["members"] == []
    finally:
        context.close()
