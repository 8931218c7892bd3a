"""The account and admin APIs behind the account pages, over real HTTP against the real database:
preferences (time zone, language), one-time password reset links, accounts made by the admin, the
instance usage."""

from __future__ import annotations

from accounts_helpers import PASSWORD, bearer


def code(r) -> str:
    return r.json()["error"]["code"]


def test_time_zone_defaults_from_the_browser_once_and_the_account_changes_it(auth_app):
    user = auth_app.new("tz")
    c = auth_app.client()
    r = c.post("/api/v1/auth/login", json={"email": user.email, "password": PASSWORD, "time_zone": "Not/AZone"})
    assert r.status_code == 200 and r.json()["user"]["time_zone"] is None  # an unknown zone is ignored
    r = c.post("/api/v1/auth/login", json={"email": user.email, "password": PASSWORD, "time_zone": "Asia/Shanghai"})
    assert r.status_code == 200 and r.json()["user"]["time_zone"] == "Asia/Shanghai"
    # a later sign-in from a browser elsewhere does not overwrite the account's zone
    r = c.post("/api/v1/auth/login", json={"email": user.email, "password": PASSWORD, "time_zone": "Europe/Berlin"})
    assert r.json()["user"]["time_zone"] == "Asia/Shanghai"
    csrf = {"X-CSRF-Token": r.json()["csrf_token"]}
    r = c.patch("/api/v1/me", json={"time_zone": "America/New_York", "language": "zh"}, headers=csrf)
    assert r.status_code == 200, r.text
    assert (r.json()["time_zone"], r.json()["language"]) == ("America/New_York", "zh")
    # the tz database's files that browsers do not know as zones are refused too ("localtime" is the server's)
    for bad in (
        "Mars/Olympus",
        "../etc/passwd",
        "",
        "x" * 65,
        "localtime",
        "posixrules",
        "posix/Asia/Shanghai",
        "right/UTC",
    ):
        r = c.patch("/api/v1/me", json={"time_zone": bad}, headers=csrf)
        assert (r.status_code, code(r)) == (422, "timezone_invalid"), bad
    r = c.patch("/api/v1/me", json={"language": "fr"}, headers=csrf)
    assert (r.status_code, code(r)) == (422, "language_invalid")
    r = c.patch("/api/v1/me", json={"language": None}, headers=csrf)  # back to the browser's; the zone stays
    assert (r.json()["language"], r.json()["time_zone"]) == (None, "America/New_York")
    # the page carries the zone for times.js, and a sign-in brings the account's language along
    r = c.patch("/api/v1/me", json={"language": "zh"}, headers=csrf)
    fresh = auth_app.client()
    r = fresh.post("/api/v1/auth/login", json={"email": user.email, "password": PASSWORD})
    assert r.cookies.get("mewdex_lang") == "zh"
    page = fresh.get("/settings")
    assert page.status_code == 200 and 'data-tz="America/New_York"' in page.text and 'lang="zh-CN"' in page.text


def test_reset_link_works_once_ends_sessions_and_tokens(auth_app):
    admin = auth_app.new("resetadmin", admin=True)
    user = auth_app.new("resetuser")
    r = admin.client.post(f"/api/v1/admin/users/{user.user_id}/reset-link", headers={"X-CSRF-Token": admin.csrf})
    assert r.status_code == 201, r.text
    url = r.json()["url"]
    assert "/reset#mdr_" in url
    token = url.split("#", 1)[1]
    anon = auth_app.client()
    r = anon.post("/api/v1/auth/reset", json={"token": token, "new_password": "short"})
    assert (r.status_code, code(r)) == (422, "password_too_short")  # the link is not used up by a refusal
    r = anon.post("/api/v1/auth/reset", json={"token": token, "new_password": "a brand new password"})
    assert r.status_code == 204, r.text
    r = anon.post("/api/v1/auth/reset", json={"token": token, "new_password": "another new password"})
    assert (r.status_code, code(r)) == (410, "reset_link_invalid")
    assert user.client.get("/api/v1/me").status_code == 401  # the user's session ended
    assert anon.get("/api/v1/me", headers=bearer(user.token)).status_code == 401  # and the token
    r = anon.post("/api/v1/auth/login", json={"email": user.email, "password": "a brand new password"})
    assert r.status_code == 200
    # a newer link voids the older unused one; a disabled account gets no link
    first = admin.client.post(f"/api/v1/admin/users/{user.user_id}/reset-link", headers={"X-CSRF-Token": admin.csrf})
    second = admin.client.post(f"/api/v1/admin/users/{user.user_id}/reset-link", headers={"X-CSRF-Token": admin.csrf})
    old = first.json()["url"].split("#", 1)[1]
    r = anon.post("/api/v1/auth/reset", json={"token": old, "new_password": "a brand new password"})
    assert (r.status_code, code(r)) == (410, "reset_link_invalid")
    r = admin.client.patch(
        f"/api/v1/admin/users/{user.user_id}", json={"disabled": True}, headers={"X-CSRF-Token": admin.csrf}
    )
    assert r.status_code == 200
    newest = second.json()["url"].split("#", 1)[1]
    r = anon.post("/api/v1/auth/reset", json={"token": newest, "new_password": "a brand new password"})
    assert (r.status_code, code(r)) == (410, "reset_link_invalid")  # disabled: the link does not work
    r = admin.client.post(f"/api/v1/admin/users/{user.user_id}/reset-link", headers={"X-CSRF-Token": admin.csrf})
    assert (r.status_code, code(r)) == (409, "user_disabled")
    # users cannot make links; garbage tokens are just invalid
    assert user.client.post(f"/api/v1/admin/users/{admin.user_id}/reset-link").status_code in (401, 404)
    for junk in ("", "mdr_x", "x" * 500):
        r = anon.post("/api/v1/auth/reset", json={"token": junk, "new_password": "a brand new password"})
        assert (r.status_code, code(r)) == (410, "reset_link_invalid")


def test_admin_creates_accounts_with_a_password_link_and_sees_instance_usage(auth_app, sessions):
    from sqlalchemy import text

    from accounts_helpers import delete_users

    admin = auth_app.new("mkadmin", admin=True)
    h = {"X-CSRF-Token": admin.csrf}
    before = admin.client.get("/api/v1/admin/instance").json()
    email = f"made-{admin.user_id[:8]}@example.com"
    r = admin.client.post("/api/v1/admin/users", json={"email": email, "name": "Made"}, headers=h)
    assert r.status_code == 201, r.text
    made = r.json()
    try:
        assert made["user"]["role"] == "user" and made["user"]["email"] == email
        assert made["reset_link"]["url"].split("#")[1].startswith("mdr_")
        r = admin.client.post("/api/v1/admin/users", json={"email": email.upper()}, headers=h)
        assert (r.status_code, code(r)) == (409, "email_taken")
        r = admin.client.post("/api/v1/admin/users", json={"email": "x@example.com", "role": "root"}, headers=h)
        assert (r.status_code, code(r)) == (422, "role_invalid")
        # the person sets a password with the link and signs in
        anon = auth_app.client()
        token = made["reset_link"]["url"].split("#")[1]
        assert anon.post("/api/v1/auth/reset", json={"token": token, "new_password": PASSWORD}).status_code == 204
        assert anon.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD}).status_code == 200
        after = admin.client.get("/api/v1/admin/instance").json()
        assert after["users"] == before["users"] + 1
        assert set(after) == {"users", "users_disabled", "memes", "storage_bytes", "analysis_cost_this_month"}
        # not for users: 404 like a missing route
        user = auth_app.new("notadmin")
        assert user.client.get("/api/v1/admin/instance").status_code == 404
        assert (
            user.client.post(
                "/api/v1/admin/users", json={"email": "y@example.com"}, headers={"X-CSRF-Token": user.csrf}
            ).status_code
            == 404
        )
    finally:
        delete_users(sessions, [made["user"]["id"]])
        with sessions.begin() as session:
            assert session.execute(text("SELECT count(*) FROM users WHERE email = :e"), {"e": email}).scalar() == 0


def test_account_page_in_single_user_mode_has_no_account_parts(settings_env):
    from conftest import client_for

    settings_env(MEWDEX_AUTH="none")
    with client_for() as c:
        page = c.get("/settings")
        assert page.status_code == 200
        assert 'id="account-single-user"' in page.text and 'id="prefs-form"' in page.text
        assert 'id="account-tokens"' not in page.text and 'id="password-form"' not in page.text
        # what search learned from this library's choices: seen, exported and cleared here too
        assert 'class="feedback-section"' in page.text and 'href="/api/v1/feedback/export"' in page.text
        r = c.patch("/api/v1/me", json={"time_zone": "UTC"})
        assert (r.status_code, code(r)) == (409, "no_accounts")


def test_a_token_makes_no_token_beyond_its_own_scopes_or_lifetime(auth_app):
    admin = auth_app.new("tokadmin", admin=True)
    h = {"X-CSRF-Token": admin.csrf}
    r = admin.client.post(
        "/api/v1/tokens", json={"name": "rw", "scopes": ["read", "write"], "expires_in_days": 30}, headers=h
    )
    parent = r.json()
    anon = auth_app.client()
    # an admin's read+write token cannot mint an admin-scoped one (the browser session can)
    r = anon.post("/api/v1/tokens", json={"name": "esc", "scopes": ["admin", "read"]}, headers=bearer(parent["token"]))
    assert (r.status_code, code(r)) == (403, "insufficient_scope")
    r = admin.client.post("/api/v1/tokens", json={"name": "adm", "scopes": ["admin", "read"]}, headers=h)
    assert r.status_code == 201 and r.json()["scopes"] == ["read", "admin"]
    # a token made with a token never outlives it
    for asked in (None, 365):
        r = anon.post(
            "/api/v1/tokens", json={"name": "child", "expires_in_days": asked}, headers=bearer(parent["token"])
        )
        assert r.status_code == 201 and r.json()["expires_at"] == parent["expires_at"], r.text
    r = anon.post("/api/v1/tokens", json={"name": "short", "expires_in_days": 1}, headers=bearer(parent["token"]))
    assert r.json()["expires_at"] < parent["expires_at"]
    # pages show one account's data: the Back button after signing out must not bring them back
    assert admin.client.get("/settings").headers["cache-control"] == "no-store"


def test_quota_cost_beyond_the_column_is_refused_not_a_500(auth_app):
    admin = auth_app.new("costadmin", admin=True)
    user = auth_app.new("costuser")
    url, h = f"/api/v1/admin/users/{user.user_id}", {"X-CSRF-Token": admin.csrf}
    for cost in (1e6, 999999.9999999):
        r = admin.client.patch(url, json={"quota": {"analysis_cost_per_month": cost}}, headers=h)
        assert (r.status_code, code(r)) == (422, "invalid_request"), r.text
    r = admin.client.patch(url, json={"quota": {"analysis_cost_per_month": 999999}}, headers=h)
    assert r.status_code == 200 and r.json()["quota"]["analysis_cost_per_month"] == 999999


def test_reset_links_die_with_a_password_change_or_disabling(auth_app):
    admin = auth_app.new("voidadmin", admin=True)
    user = auth_app.new("voiduser")
    h, anon = {"X-CSRF-Token": admin.csrf}, auth_app.client()

    def link() -> str:
        r = admin.client.post(f"/api/v1/admin/users/{user.user_id}/reset-link", headers=h)
        return r.json()["url"].split("#", 1)[1]

    def reset(token: str):
        return anon.post("/api/v1/auth/reset", json={"token": token, "new_password": "taken over password"})

    token = link()  # the user then changes the password: whoever else holds the link is locked out
    r = user.client.post(
        "/api/v1/auth/password",
        json={"current_password": PASSWORD, "new_password": "my own new password"},
        headers={"X-CSRF-Token": user.csrf},
    )
    assert r.status_code == 204, r.text
    assert (reset(token).status_code, code(reset(token))) == (410, "reset_link_invalid")
    token = link()  # disabling voids it; enabling again does not bring it back
    for disabled in (True, False):
        r = admin.client.patch(f"/api/v1/admin/users/{user.user_id}", json={"disabled": disabled}, headers=h)
        assert r.status_code == 200
    assert code(reset(token)) == "reset_link_invalid"


def test_two_admins_disabling_each_other_at_once_leave_one(auth_app, sessions):
    import threading
    import uuid

    from sqlalchemy import text

    from conftest import wait_until
    from mewdex.db.models import User
    from mewdex.platform import users
    from mewdex.platform.errors import PlatformError

    x, y = auth_app.new("racex", admin=True), auth_app.new("racey", admin=True)
    with sessions.begin() as session:  # x and y are the only enabled admins
        others = (
            session.execute(
                text(
                    "UPDATE users SET disabled = true WHERE role = 'admin' AND NOT disabled"
                    " AND user_id NOT IN (:x, :y) RETURNING user_id"
                ),
                {"x": x.user_id, "y": y.user_id},
            )
            .scalars()
            .all()
        )
    outcome: dict = {}

    def y_disables_x() -> None:
        with sessions.begin() as session:
            try:
                users.set_disabled(session, session.get(User, uuid.UUID(x.user_id)), True)
                outcome["y"] = "disabled x"
            except PlatformError as exc:
                outcome["y"] = exc.code

    def waiting_on_a_lock() -> bool:
        with sessions.begin() as session:
            return bool(
                session.execute(
                    text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                ).scalar()
            )

    first = sessions()
    try:
        users.set_disabled(first, first.get(User, uuid.UUID(y.user_id)), True)  # x disables y, not committed yet
        other = threading.Thread(target=y_disables_x)
        other.start()
        wait_until(lambda: not other.is_alive() or waiting_on_a_lock(), 10, 0.05, "y's request to finish or wait")
        first.commit()
        other.join(10)
        assert outcome == {"y": "last_admin"}
    finally:
        first.close()
        with sessions.begin() as session:
            session.execute(
                text("UPDATE users SET disabled = false WHERE user_id = ANY(:ids)"),
                {"ids": [*others, uuid.UUID(x.user_id), uuid.UUID(y.user_id)]},
            )


def test_signing_in_returns_to_the_page_with_its_query(auth_app):
    # a picture shared to the installed app while signed out: /upload?shared=1 must survive the sign-in
    r = auth_app.client().get("/upload?shared=1", headers={"accept": "text/html"}, follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/login?next=/upload%3Fshared%3D1")
    page = auth_app.client().get(r.headers["location"])
    assert 'data-next="/upload?shared=1"' in page.text
