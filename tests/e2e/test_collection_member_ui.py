"""A member's side of a shared collection (issue 43 item 5) in a real browser against ``mewdex serve`` with
sign-in required: the member (an editor) finds the collection under "Shared with me" with its owner,
opens its read-only page, searches inside it, turns on "Use in my chat answers" and adds a meme of its own
library (a copy lands in the owner's collection) — no JavaScript errors, nothing wider than 375 px.
Screenshots of both pages, en and zh, desktop and 375 px."""

from __future__ import annotations

import pytest

from accounts_helpers import PASSWORD, delete_users, own_scope_users
from conftest import drop_scope, new_scope
from mewdex.db.models import ScopeContext
from mewdex.library import collections, sharing
from test_collection_members import _meme
from ui_helpers import DESKTOP, SCREENSHOTS, start_server

PHONE = {"width": 375, "height": 812}


@pytest.fixture(scope="module")
def shared(mewdex_env, sessions, store, tmp_path_factory):
    """A server with sign-in required; an owner's collection of two memes shared with an editor that has
    a meme of its own. ``(server, member email, collection id, the member's own meme id, owner email)``."""
    with sessions.begin() as session:
        (owner, member), made = own_scope_users(session, ["owner", "member"])
        owner_scope, owner_email, member_email = owner.scope_id, owner.email, member.email
        member_scope = member.scope_id
    a = _meme(sessions, store, owner_scope, 6101, "platypus waves hello")
    b = _meme(sessions, store, owner_scope, 6102, "echidna rolls away")
    mine = _meme(sessions, store, member_scope, 6103, "my own bilby")
    with sessions.begin() as session:
        c = collections.create(session, ScopeContext(owner_scope), "Monotremes")
        collections.add_members(session, ScopeContext(owner_scope), c.id, [a, b])
        sharing.set_member(session, ScopeContext(owner_scope), c.id, member_email, "editor")
    scope = new_scope(sessions, "t-member")
    server = start_server(
        mewdex_env,
        scope,
        tmp_path_factory.mktemp("serve") / "member.log",
        env={"MEWDEX_AUTH": "required", "MEWDEX_BCRYPT_ROUNDS": "4"},
    )
    try:
        yield server, member_email, str(c.id), mine, owner_email
    finally:
        server.stop()
        delete_users(sessions, made)
        drop_scope(sessions, scope)


def _signed_in(browser, server, email: str, viewport, locale: str):
    context = browser.new_context(viewport=viewport, locale=locale)
    context.set_default_timeout(15_000)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.goto(f"{server.url}/login?next=/collections")
    pg.fill("input[name=email]", email)
    pg.fill("input[name=password]", PASSWORD)
    pg.locator("#login-form button[value=login]").click()
    pg.wait_for_url(lambda url: url.split("?")[0].endswith("/collections"))
    context.add_cookies([{"name": "mewdex_lang", "value": locale[:2], "url": server.url}])
    return context, pg, errors


def test_member_reads_searches_chooses_and_adds(browser, shared, sessions):
    server, email, cid, mine, owner_email = shared
    context, pg, errors = _signed_in(browser, server, email, PHONE, "en-US")
    try:
        pg.goto(f"{server.url}/collections")
        row = pg.locator(f".shared-with-me li[data-collection='{cid}']")
        assert owner_email in row.inner_text() and "Editor" in row.inner_text()
        pg.wait_for_function("() => document.querySelector('.shared-with-me .cover img').naturalWidth > 0")  # its cover
        row.locator("a.collection-name").click()
        pg.wait_for_url(f"**/collections/{cid}")
        assert pg.locator(".member-grid").first.locator("li.card").count() == 2
        assert pg.locator("[data-component=sharing]").count() == 0
        pg.fill("#member-q", "platypus")
        pg.locator("#member-q").press("Enter")
        pg.wait_for_url("**q=platypus**")
        assert pg.locator(".member-grid").first.locator("li.card").count() == 1
        pg.locator(".member-grid li.card img").first.wait_for()
        pg.wait_for_function(  # the picture loads through the member route (not only its element is there)
            "() => { const el = document.querySelector('.member-grid li.card img');"
            " return el && el.complete && el.naturalWidth > 0; }"
        )

        pg.locator("[data-member-action=use-in-chat]").check()
        pg.wait_for_function("() => document.getElementById('toast').textContent.includes('chat answers')")
        with sessions.begin() as session:
            assert [str(a.collection.id) for a in sharing.chat_pools(session, _scope_of(session, email))] == [cid]

        # the member's web chat answers from it: the card's picture, copy and download go through the member route
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
        pg.goto(f"{server.url}/chat")
        pg.fill("#chat-input", "platypus")
        pg.press("#chat-input", "Enter")
        card = pg.locator(".chat-assistant .chat-card").first
        card.wait_for()
        assert card.get_attribute("data-src") == sharing.member_media_path(cid, card.get_attribute("data-id"))
        pg.wait_for_function("() => document.querySelector('.chat-assistant .chat-card img').naturalWidth > 0")
        card.locator("[data-action=copy-image]").click()
        pg.wait_for_function("() => document.getElementById('toast').textContent === 'Image copied'")
        assert (
            card.locator("a[download]")
            .get_attribute("href")
            .endswith(f"/collections/{cid}/media/{card.get_attribute('data-id')}?download=1")
        )

        pg.goto(f"{server.url}/collections/{cid}")
        pg.locator(f"[data-member-action=add][data-meme='{mine}']").click()
        pg.wait_for_function("() => document.getElementById('toast').textContent === 'Added to the collection'")
        pg.wait_for_load_state()
        pg.wait_for_function("() => document.querySelectorAll('.member-grid')[0].children.length === 3")
        assert pg.locator("[data-member-action=use-in-chat]").is_checked()
        assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
    finally:
        context.close()
    assert not errors, errors

    for locale, lang in (("en-US", "en"), ("zh-CN", "zh")):
        for viewport, size in ((DESKTOP, "desktop"), (PHONE, "375")):
            context, pg, errors = _signed_in(browser, server, email, viewport, locale)
            try:
                for name, path in (("list", "/collections"), ("page", f"/collections/{cid}")):
                    pg.goto(server.url + path)
                    pg.wait_for_load_state()
                    pg.wait_for_function("() => [...document.images].every((i) => i.complete && i.naturalWidth > 0)")
                    if name == "page":
                        label = pg.locator("label.check").first.inner_text().strip()
                        assert label == ("Use in my chat answers" if lang == "en" else "用于我的聊天回答")
                    assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth + 1"), (name, size)
                    pg.screenshot(path=str(SCREENSHOTS / f"collection-member-{name}-{size}-{lang}.png"), full_page=True)
            finally:
                context.close()
            assert not errors, errors


def _scope_of(session, email: str) -> str:
    from mewdex.platform.users import find_by_email

    user = find_by_email(session, email)
    assert user is not None
    return user.scope_id
