"""Issue 15, point 8 in a real browser: an admin creates a connector definition and grants it, a
user connects it with their own key (only the hint shows), a config change asks them to verify
again, and both see the audit viewer. Screenshots at desktop and 375 px, in English and Chinese."""

from __future__ import annotations

import json
import os
import uuid
from unittest import mock

import pytest
from sqlalchemy import text

from conftest import drop_scope, new_scope
from fakes.openai_server import FakeOpenAI
from ui_helpers import DESKTOP, SCREENSHOTS, start_server

PHONE = {"width": 375, "height": 812}
PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def setup(mewdex_env, sessions, tmp_path_factory):
    """A ``mewdex serve`` that requires login, an admin and a user, and a fake OpenAI endpoint."""
    from mewdex.platform.users import create_user

    scope = new_scope(sessions, "t-conn")
    made = []
    with sessions.begin() as session:
        for prefix, role in (("eadm", "admin"), ("euser", "user")):
            user = create_user(session, f"{prefix}-{uuid.uuid4().hex[:8]}@example.com", PASSWORD, role=role)
            made.append((user.email, str(user.user_id), user.scope_id))
    fake = FakeOpenAI(api_key="sk-e2e-secret-key-4321")
    env = {
        "MEWDEX_AUTH": "required",
        "MEWDEX_BCRYPT_ROUNDS": "4",
        "MEWDEX_EGRESS_ALLOW_HOSTS": json.dumps([fake.host_port]),
    }
    with mock.patch.dict(os.environ, env):
        server = start_server(mewdex_env, scope, tmp_path_factory.mktemp("serve") / "connectors.log")
    try:
        yield server, made, fake
    finally:
        server.stop()
        fake.close()
        with sessions.begin() as session:
            ids = [m[1] for m in made]
            owned = "SELECT definition_id FROM external_system_definitions WHERE created_by = ANY(CAST(:u AS uuid[]))"
            for table in ("external_system_audits", "external_systems"):
                session.execute(text(f"DELETE FROM {table} WHERE definition_id IN ({owned})"), {"u": ids})
            session.execute(
                text("DELETE FROM external_system_definitions WHERE created_by = ANY(CAST(:u AS uuid[]))"), {"u": ids}
            )
            for _, uid, scope_id in made:
                session.execute(text("DELETE FROM users WHERE user_id = :u"), {"u": uid})
                if scope_id != "local":
                    session.execute(text("DELETE FROM scopes WHERE id = :s"), {"s": scope_id})
        drop_scope(sessions, scope)


def _signed_in(browser, server, email, *, viewport=DESKTOP, locale="en-US"):
    context = browser.new_context(viewport=viewport, locale=locale)
    context.set_default_timeout(20_000)
    r = context.request.post(server.url + "/api/v1/auth/login", data={"email": email, "password": PASSWORD})
    assert r.status == 200, r.text()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return context, page, errors


def test_admin_grants_user_connects_verifies_and_reads_the_audit_log(browser, setup):
    server, made, fake = setup
    (admin_email, _, _), (user_email, user_id, _) = made
    context, admin, admin_errors = _signed_in(browser, server, admin_email)
    user_context, user, user_errors = _signed_in(browser, server, user_email)
    try:
        admin.goto(server.url + "/admin/connectors")
        form = admin.locator("#create-definition")
        form.locator("select[name=provider]").select_option("openai_compatible")
        form.locator("input[name=name]").fill("e2e-lab")
        config = {"base_url": fake.base_url, "chat_model": "fake-chat", "vision_model": "fake-vision"}
        form.locator("textarea[name=config]").fill(json.dumps(config))
        form.locator("button[type=submit]").click()
        definition = admin.locator(".definition", has_text="e2e-lab")
        definition.wait_for()
        definition_id = definition.get_attribute("data-definition")

        user.goto(server.url + "/connectors")
        assert user.locator(f'.definition[data-definition="{definition_id}"]').count() == 0  # not granted yet

        definition.locator("select[name=user_id]").select_option(user_id)
        definition.locator(".grant-form button").click()
        admin.locator(f'.definition[data-definition="{definition_id}"] .chip[data-user="{user_id}"]').wait_for()
        admin.screenshot(path=str(SCREENSHOTS / "admin-connectors-en.png"), full_page=True)

        user.goto(server.url + "/connectors")
        card = user.locator(f'.definition[data-definition="{definition_id}"]')
        card.locator("input[name=api_key]").fill(fake.api_key)
        card.locator("button[type=submit]").click()
        row = user.locator("table.connections tr[data-connection]")
        row.wait_for()
        assert row.get_attribute("data-state") == "verified"
        assert "sk-…4321" in row.inner_text()
        assert fake.api_key not in user.content()
        user.screenshot(path=str(SCREENSHOTS / "connectors-en.png"), full_page=True)

        # The admin changes the config: a new revision; the user must verify again.
        definition = admin.locator(f'.definition[data-definition="{definition_id}"]')
        definition.locator("details.edit summary").click()
        config["embedding_model"] = "fake-embed"
        definition.locator("textarea[name=config]").fill(json.dumps(config))
        definition.locator("form[data-connector-form=patch] button[type=submit]").click()
        admin.locator(f'.definition[data-definition="{definition_id}"] .badge', has_text="revision 2").wait_for()
        user.reload()
        row = user.locator("table.connections tr[data-connection]")
        assert row.get_attribute("data-state") == "needs_verification"
        user.screenshot(path=str(SCREENSHOTS / "connectors-verify-again-en.png"), full_page=True)
        row.locator("[data-connector-action=verify]").click()
        user.wait_for_selector('table.connections tr[data-state="verified"]')

        user.goto(server.url + "/connectors/audits")
        assert user.locator("tr[data-audit]").count() == 2
        user.select_option("#audit-filters select[name=outcome]", "failed")
        user.click("#audit-filters button[type=submit]")
        user.wait_for_url("**outcome=failed**")
        assert user.locator("tr[data-audit]").count() == 0 and user.locator("#no-audits").is_visible()
        user.goto(server.url + "/connectors/audits")
        user.screenshot(path=str(SCREENSHOTS / "audits-en.png"), full_page=True)

        admin.goto(server.url + f"/admin/connectors/audits?user={user_id}")
        assert admin.locator("tr[data-audit]").count() == 2
        admin.screenshot(path=str(SCREENSHOTS / "admin-audits-en.png"), full_page=True)
        assert not admin_errors and not user_errors, admin_errors + user_errors
    finally:
        context.close()
        user_context.close()


@pytest.mark.parametrize("locale,lang", [("en-US", "en"), ("zh-CN", "zh")])
def test_connector_pages_at_375_px_and_desktop(browser, setup, locale, lang):
    server, made, _ = setup
    (admin_email, _, _), (user_email, _, _) = made
    for viewport, size in ((PHONE, "375"), (DESKTOP, "desktop")):
        for email, paths in (
            (user_email, ("/connectors", "/connectors/audits")),
            (admin_email, ("/admin/connectors",)),
        ):
            context, pg, errors = _signed_in(browser, server, email, viewport=viewport, locale=locale)
            try:
                for path in paths:
                    pg.goto(server.url + path)
                    assert pg.locator("html").get_attribute("lang") == ("zh-CN" if lang == "zh" else "en")
                    assert pg.evaluate("() => document.documentElement.scrollWidth <= innerWidth"), path
                    name = path.strip("/").replace("/", "-")
                    pg.screenshot(path=str(SCREENSHOTS / f"{name}-{size}-{lang}.png"), full_page=True)
                assert not errors, errors
            finally:
                context.close()
