"""Accounts over real HTTP against the real database: sign-up/in, passwords, sessions + CSRF,
tokens, rate limits, admin, quotas, metering, signed media URLs, single-user mode."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from accounts_helpers import PASSWORD, add_meme, bearer, png
from conftest import LOCAL_CLIENT


def code(r) -> str:
    return r.json()["error"]["code"]


def test_password_length_is_counted_in_utf8_bytes(auth_app):
    c = auth_app.client()

    def signup(pw):
        return c.post("/api/v1/auth/signup", json={"email": f"pw{time.monotonic_ns()}@example.com", "password": pw})

    ok72 = signup("a" * 72)
    assert ok72.status_code == 201, ok72.text
    assert code(signup("a" * 73)) == "password_too_long" and signup("a" * 73).status_code == 422
    # 24 × "密" = 72 bytes (ok); 25 = 75 bytes (too long) although only 25 characters.
    assert signup("密" * 24).status_code == 201
    r = signup("密" * 25)
    assert r.status_code == 422 and code(r) == "password_too_long"
    assert code(signup("short")) == "password_too_short"
    started = time.perf_counter()
    r = signup("x" * 1000)
    assert r.status_code == 422 and code(r) == "password_too_long"
    assert time.perf_counter() - started < 1.0
    r = c.post("/api/v1/auth/login", json={"email": "nobody@example.com", "password": "y" * 1000})
    assert r.status_code == 401 and code(r) == "invalid_credentials"
    r = c.post(
        "/api/v1/auth/signup",
        content=b'{"email": "s@example.com", "password": "bad\\ud800surrogate"}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422 and code(r) == "invalid_text"  # unstorable JSON text, refused before the route
    # the 72-byte password signs in
    email = ok72.request.content.decode().split('"email":"')[1].split('"')[0]
    assert c.post("/api/v1/auth/login", json={"email": email.upper(), "password": "a" * 72}).status_code == 200


def test_email_is_unique_case_insensitively_and_first_account_rules(auth_app):
    a = auth_app.new("dup")
    c = auth_app.client()
    r = c.post("/api/v1/auth/signup", json={"email": a.email.upper(), "password": PASSWORD})
    assert r.status_code == 409 and code(r) == "signup_failed"  # the answer does not say "taken"
    r = c.post("/api/v1/auth/signup", json={"email": "not-an-email", "password": PASSWORD})
    assert r.status_code == 422 and code(r) == "email_invalid"
    assert a.scope_id and "@" not in a.scope_id


def test_sign_in_failures_are_generic_and_rate_limited(auth_app, settings_env):
    settings_env(MEWDEX_LOGIN_MAX_FAILURES_PER_ACCOUNT="3", MEWDEX_LOGIN_MAX_FAILURES_PER_IP="6")
    a = auth_app.new("rl")
    c = auth_app.client()
    wrong = c.post("/api/v1/auth/login", json={"email": a.email, "password": "wrong password"})
    missing = c.post("/api/v1/auth/login", json={"email": "ghost@example.com", "password": "wrong password"})
    assert wrong.status_code == missing.status_code == 401
    assert wrong.json() == missing.json()
    c.post("/api/v1/auth/login", json={"email": a.email, "password": "wrong password"})
    c.post("/api/v1/auth/login", json={"email": a.email, "password": "wrong password"})
    # The account is slowed for addresses it never signed in from (even with the right password) …
    stranger = TestClient(auth_app.app, base_url=LOCAL_CLIENT["base_url"], client=("198.51.100.7", 1))
    r = stranger.post("/api/v1/auth/login", json={"email": a.email, "password": PASSWORD})
    assert r.status_code == 429 and code(r) == "rate_limited" and int(r.headers["Retry-After"]) >= 1
    # … not for the one it signed in from before (the owner is never locked out).
    assert c.post("/api/v1/auth/login", json={"email": a.email, "password": PASSWORD}).status_code == 200
    # per IP: other accounts from the same client trip the IP limit
    for i in range(6):
        c.post("/api/v1/auth/login", json={"email": f"spray{i}@example.com", "password": "wrong password"})
    r = c.post("/api/v1/auth/login", json={"email": "spray-last@example.com", "password": "wrong password"})
    assert r.status_code == 429


def test_session_cookie_flags_and_csrf(auth_app):
    c = auth_app.client()
    email = f"csrf{time.monotonic_ns()}@example.com"
    r = c.post("/api/v1/auth/signup", json={"email": email, "password": PASSWORD})
    assert r.status_code == 201
    cookies = r.headers.get_list("set-cookie")
    session_cookie = next(h for h in cookies if h.startswith("__Host-mewdex_session="))
    assert "httponly" in session_cookie.lower() and "samesite=lax" in session_cookie.lower()
    assert "secure" in session_cookie.lower() and "path=/" in session_cookie.lower()  # what __Host- requires
    assert "domain=" not in session_cookie.lower()
    assert any(h.startswith("__Host-mewdex_csrf=") and "secure" in h.lower() for h in cookies)
    csrf = r.json()["csrf_token"]
    assert c.get("/api/v1/me").json()["user"]["email"] == email  # reads need no CSRF token
    r = c.post("/api/v1/tokens", json={"name": "no csrf"})
    assert r.status_code == 403 and code(r) == "csrf_failed"
    r = c.post("/api/v1/tokens", json={"name": "bad csrf"}, headers={"X-CSRF-Token": "nope"})
    assert r.status_code == 403
    r = c.post("/api/v1/tokens", json={"name": "with csrf"}, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 201
    # a bearer token needs no CSRF header
    anon = auth_app.client()
    r = anon.post("/api/v1/tokens", json={"name": "via token"}, headers=bearer(r.json()["token"]))
    assert r.status_code == 201
    assert c.post("/api/v1/auth/logout").status_code == 204
    assert c.get("/api/v1/me").status_code == 401


def test_token_shown_once_hashed_and_revoked_at_once(auth_app, sessions):
    a = auth_app.new("tok")
    anon = auth_app.client()
    r = anon.get("/api/v1/me", headers=bearer(a.token))
    assert r.status_code == 200 and r.json()["user"]["id"] == a.user_id and r.json()["auth"]["via"] == "token"
    listed = a.client.get("/api/v1/tokens").json()["tokens"]
    assert len(listed) == 1 and "token" not in listed[0] and listed[0]["last_used_at"] is not None
    with sessions.begin() as session:
        stored = session.execute(
            text("SELECT token_hash FROM api_tokens WHERE user_id = :u"), {"u": a.user_id}
        ).scalar_one()
    assert a.token not in stored and len(stored) == 64
    r = anon.delete(f"/api/v1/tokens/{listed[0]['id']}", headers=bearer(a.token))
    assert r.status_code == 204
    r = anon.get("/api/v1/me", headers=bearer(a.token))
    assert r.status_code == 401 and code(r) == "invalid_token"
    assert anon.get("/api/v1/me", headers=bearer("mdx_forged")).status_code == 401


def test_another_users_token_id_answers_404(auth_app):
    a, b = auth_app.new("ta"), auth_app.new("tb")
    token_id = a.client.get("/api/v1/tokens").json()["tokens"][0]["id"]
    r = b.client.delete(f"/api/v1/tokens/{token_id}", headers={"X-CSRF-Token": b.csrf})
    assert r.status_code == 404
    assert auth_app.client().get("/api/v1/me", headers=bearer(a.token)).status_code == 200


def test_password_change_ends_other_sessions(auth_app):
    a = auth_app.new("pwc")
    other = auth_app.client()
    assert other.post("/api/v1/auth/login", json={"email": a.email, "password": PASSWORD}).status_code == 200
    r = a.client.post(
        "/api/v1/auth/password",
        json={"current_password": "wrong one!", "new_password": "n3w password"},
        headers={"X-CSRF-Token": a.csrf},
    )
    assert r.status_code == 401
    r = a.client.post(
        "/api/v1/auth/password",
        json={"current_password": PASSWORD, "new_password": "n3w password"},
        headers={"X-CSRF-Token": a.csrf},
    )
    assert r.status_code == 204
    assert other.get("/api/v1/me").status_code == 401
    assert a.client.get("/api/v1/me").status_code == 200
    assert (
        auth_app.client().post("/api/v1/auth/login", json={"email": a.email, "password": "n3w password"}).status_code
        == 200
    )


def test_admin_manages_users_quotas_signup_and_is_hidden_from_users(auth_app, sessions, store):
    admin = auth_app.new("adm", admin=True)
    u = auth_app.new("usr")
    assert u.client.get("/api/v1/admin/users").status_code == 404
    r = admin.client.get("/api/v1/admin/users")
    assert r.status_code == 200
    row = next(x for x in r.json()["users"] if x["id"] == u.user_id)
    assert row["role"] == "user" and row["disk"]["file_count"] == 0
    h = {"X-CSRF-Token": admin.csrf}
    r = admin.client.patch(
        f"/api/v1/admin/users/{u.user_id}", json={"quota": {"memes": 1, "storage_bytes": 10**6}}, headers=h
    )
    assert r.status_code == 200 and r.json()["quota"]["memes"] == 1
    r = admin.client.patch(f"/api/v1/admin/users/{u.user_id}", json={"role": "admin"}, headers=h)
    assert r.status_code == 200 and u.client.get("/api/v1/admin/users").status_code == 200
    r = admin.client.patch(f"/api/v1/admin/users/{u.user_id}", json={"role": "root"}, headers=h)
    assert r.status_code == 422 and code(r) == "role_invalid"
    assert admin.client.patch(f"/api/v1/admin/users/{u.user_id}", json={"role": "user"}, headers=h).status_code == 200
    # sign-up off
    assert admin.client.patch("/api/v1/admin/settings", json={"signup_enabled": False}, headers=h).json() == {
        "signup_enabled": False,
        "schedule_max_jobs_per_account": 20,
        "schedule_min_interval_minutes": 5,
    }
    try:
        r = auth_app.client().post("/api/v1/auth/signup", json={"email": "late@example.com", "password": PASSWORD})
        assert r.status_code == 403 and code(r) == "signup_disabled"
    finally:
        admin.client.patch("/api/v1/admin/settings", json={"signup_enabled": True}, headers=h)
    # disabling stops the user's token and session at once
    r = admin.client.patch(f"/api/v1/admin/users/{u.user_id}", json={"disabled": True}, headers=h)
    assert r.status_code == 200 and r.json()["disabled"] is True
    assert auth_app.client().get("/api/v1/me", headers=bearer(u.token)).status_code == 401
    assert u.client.get("/api/v1/me").status_code == 401


def test_quota_rejection_writes_nothing_and_duplicates_count_once(auth_app, sessions, store):
    from it_helpers import counts
    from mewdex.db.models import ScopeContext
    from mewdex.library.memes import add_image
    from mewdex.platform import quotas

    admin = auth_app.new("qadm", admin=True)
    u = auth_app.new("quota")
    first = png(1)
    meme_id = add_meme(sessions, store, u.scope_id, first)
    scope = ScopeContext(u.scope_id)
    me = u.client.get("/api/v1/me").json()
    assert me["disk"]["file_count"] == 1 and me["disk"]["bytes_used"] == len(first)
    # the same bytes again: a duplicate, not counted twice
    again = add_image(sessions, store, scope, first, filename="copy.png", provenance={})
    assert again.status == "duplicate" and again.meme_id == meme_id
    assert u.client.get("/api/v1/me").json()["disk"]["file_count"] == 1
    admin.client.patch(
        f"/api/v1/admin/users/{u.user_id}", json={"quota": {"memes": 1}}, headers={"X-CSRF-Token": admin.csrf}
    )
    before = counts(sessions, scope)
    r = add_image(sessions, store, scope, png(2), filename="second.png", provenance={})
    assert r.status == "skipped" and r.error == "quota_exceeded"
    assert counts(sessions, scope) == before  # no row, no job, no journal entry, no blob
    with sessions.begin() as session:
        ops = session.execute(
            text("SELECT count(*) FROM storage_operations WHERE scope_id = :s"), {"s": u.scope_id}
        ).scalar_one()
    assert ops == 1  # only the first upload's
    # the service upload paths call
    from mewdex.platform.errors import PlatformError

    with sessions.begin() as session:
        try:
            quotas.check_upload(session, scope, 10, 1)
            raise AssertionError("expected quota_exceeded")
        except PlatformError as exc:
            from mewdex.web.errors import http_status

            assert http_status(exc.code) == 413 and exc.code == "quota_exceeded" and "memes" in exc.details
    # drift is corrected by the full scan
    with sessions.begin() as session:
        session.execute(
            text("UPDATE user_disk_usage SET bytes_used = 5, file_count = 9 WHERE user_id = :u"), {"u": u.user_id}
        )
    fixed = quotas.rescan(sessions)
    assert fixed[u.user_id] == {"bytes": len(first) - 5, "files": -8}
    # deleting the meme gives the space back
    with sessions.begin() as session:
        session.execute(text("DELETE FROM memes WHERE id = :m"), {"m": meme_id})
    assert u.client.get("/api/v1/me").json()["disk"] == {
        **u.client.get("/api/v1/me").json()["disk"],
        "bytes_used": 0,
        "file_count": 0,
    }


def test_grants_are_idempotent_and_commit_writes_one_usage_event(auth_app, sessions):
    from mewdex.db.models import ScopeContext
    from mewdex.platform import grants

    u = auth_app.new("grant")
    scope = ScopeContext(u.scope_id)
    with sessions.begin() as session:
        g1 = grants.reserve(session, scope, "analysis.agent", "key-1")
        gid = g1.grant_id
    with sessions.begin() as session:
        g2 = grants.reserve(session, scope, "analysis.agent", "key-1")
        assert g2.grant_id == gid and g2.state == "acquired"
        grants.commit(session, g2, kind="analysis", model_profile="local-ocr-1", units={"images": 1})
        grants.commit(session, g2, kind="analysis", model_profile="local-ocr-1", units={"images": 1})
        grants.release(session, g2)
        assert g2.state == "committed"
    with sessions.begin() as session:
        g3 = grants.reserve(session, scope, "analysis.agent", "key-2")
        grants.release(session, g3)
        assert grants.reserve(session, scope, "analysis.agent", "key-2").state == "acquired"
    r = u.client.get("/api/v1/usage", params={"group_by": "kind"})
    assert r.status_code == 200
    assert r.json()["groups"] == [{"key": "analysis", "events": 1, "cost": 0.0}]


def test_analysis_budget_blocks_reservations(auth_app, sessions, settings_env):
    from mewdex.db.models import ScopeContext
    from mewdex.platform import grants, usage
    from mewdex.platform.errors import PlatformError

    settings_env(MEWDEX_PRICES='{"vlm": {"images": 0.5}}', MEWDEX_QUOTA_ANALYSIS_COST_PER_MONTH="1")
    u = auth_app.new("budget")
    scope = ScopeContext(u.scope_id)
    with sessions.begin() as session:
        for i in range(2):
            g = grants.reserve(session, scope, "analysis.agent", f"b-{i}")
            grants.commit(session, g, kind="analysis", model_profile="vlm", units={"images": 1})
        assert float(usage.month_cost(session, u.scope_id)) == 1.0
    with sessions.begin() as session:
        try:
            grants.reserve(session, scope, "analysis.agent", "b-3")
            raise AssertionError("expected quota_exceeded")
        except PlatformError as exc:
            assert exc.code == "quota_exceeded"
    r = u.client.get("/api/v1/usage", params={"group_by": "day"}).json()
    assert r["total"] == {"events": 2, "cost": 1.0}


def test_pipeline_and_image_search_are_metered(auth_app, sessions, store, drain):
    u = auth_app.new("meter")
    add_meme(sessions, store, u.scope_id, png(7, 64), process=True)
    from mewdex.db.models import ScopeContext

    drain(ScopeContext(u.scope_id))
    r = auth_app.client().post(
        "/api/v1/search/image", files={"file": ("q.png", png(8, 64), "image/png")}, headers=bearer(u.token)
    )
    assert r.status_code == 200, r.text
    kinds = {g["key"]: g["events"] for g in u.client.get("/api/v1/usage", params={"group_by": "kind"}).json()["groups"]}
    # one embedding event per text leg (e5, USE), written together, each the owner's
    assert kinds.get("analysis") == 1 and kinds.get("embedding") == 2 and kinds.get("image_search") == 1
    with sessions.begin() as session:
        embedding = session.execute(
            text(
                "SELECT model_profile, user_id IS NOT NULL, units FROM usage_events"
                " WHERE scope_id = :s AND kind = 'embedding' ORDER BY model_profile"
            ),
            {"s": u.scope_id},
        ).all()
        assert len({profile for profile, _, _ in embedding}) == 2
        assert all(owned and units["passages"] >= 1 for _, owned, units in embedding)
        task_ids = (
            session.execute(
                text("SELECT task_id FROM usage_events WHERE scope_id = :s AND kind = 'analysis'"), {"s": u.scope_id}
            )
            .scalars()
            .all()
        )
        grant = session.execute(
            text("SELECT state FROM operation_grants WHERE scope_id = :s"), {"s": u.scope_id}
        ).scalar_one()
    assert task_ids[0] and grant == "committed"


def test_media_needs_auth_or_a_signed_url(auth_app, sessions, store):
    u = auth_app.new("media")
    meme_id = add_meme(sessions, store, u.scope_id, png(11))
    anon = auth_app.client()
    assert anon.get(f"/media/{meme_id}").status_code == 401
    assert u.client.get(f"/media/{meme_id}").status_code == 200
    assert anon.get(f"/media/{meme_id}", headers=bearer(u.token)).status_code == 200
    signed = u.client.get(f"/api/v1/memes/{meme_id}/signed-url", params={"ttl_seconds": 60}).json()
    r = anon.get(signed["url"])
    assert r.status_code == 200 and r.content == png(11)
    thumb = u.client.get(f"/api/v1/memes/{meme_id}/signed-url", params={"thumbnail": True}).json()["url"]
    assert anon.get(thumb).status_code == 200
    tampered = signed["url"].replace("sig=", "sig=0")
    assert anon.get(tampered).status_code == 401
    assert anon.get(signed["url"].replace(f"/media/{meme_id}", f"/media/{meme_id}/thumbnail")).status_code == 401
    expired = signed["url"].split("?")[0] + "?exp=1&sig=" + "0" * 64
    assert anon.get(expired).status_code == 401


def test_single_user_mode_and_startup_guard(settings_env, mewdex_env):
    from conftest import client_for
    from mewdex.platform.auth import is_loopback, startup_problem

    settings_env(MEWDEX_AUTH="none")
    with client_for() as c:
        me = c.get("/api/v1/me").json()
        assert me["user"] is None and me["auth"] == {"mode": "none", "via": "none"} and me["scope_id"] == "local"
        assert c.post("/api/v1/search", json={"query": "anything"}).status_code == 200
        assert c.get("/api/v1/admin/users").status_code == 200  # the local admin
        assert c.post("/api/v1/tokens", json={"name": "x"}).status_code == 409
    assert startup_problem("0.0.0.0") and "mewdex user create" in startup_problem("0.0.0.0")
    assert startup_problem("127.0.0.1") is None
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("192.168.1.2")
    settings_env(MEWDEX_AUTH="auto")
    with client_for(host="0.0.0.0") as c:
        assert c.get("/api/v1/me").status_code == 401
    settings_env(MEWDEX_AUTH="none")
    r = mewdex_env.cli("serve", "--host", "0.0.0.0", timeout=60)
    assert r.returncode == 2 and "mewdex user create" in r.stderr


def test_browser_pages_send_you_to_sign_in_and_back(auth_app):
    c = auth_app.client()
    r = c.get("/library", headers={"accept": "text/html"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login?next=/library"
    page = c.get("/login?next=/library")
    assert page.status_code == 200 and 'id="login-form"' in page.text
    assert 'data-next="/"' in c.get("/login?next=//evil.example").text  # no open redirect
    assert "X-CSRF-Token" in c.get("/static/auth.js").text
    assert c.get("/api/v1/me", headers={"accept": "text/html"}).status_code == 401  # the API never redirects
    u = auth_app.new("page")
    assert u.email in u.client.get("/login").text
    assert u.client.get("/admin").status_code == 404
    admin = auth_app.new("pageadmin", admin=True)
    admin.client.patch(
        f"/api/v1/admin/users/{u.user_id}", json={"quota": {"memes": 10}}, headers={"X-CSRF-Token": admin.csrf}
    )
    page = admin.client.get("/admin")
    assert page.status_code == 200 and u.email in page.text and "<meter" in page.text


def test_the_first_account_never_comes_from_an_anonymous_sign_up(sessions):
    """With no account yet, a web sign-up needs the one-time setup code `mewdex serve` printed (on
    any bind address: a loopback bind may be a proxy's or tunnel's upstream)."""
    from sqlalchemy import delete

    from mewdex.db.models import User
    from mewdex.platform.errors import PlatformError
    from mewdex.platform.setup import issue_setup_code
    from mewdex.platform.users import create_user

    session = sessions()
    try:
        session.execute(delete(User))  # as on a fresh install; rolled back below
        code = issue_setup_code(session)
        for wrong in (None, "", "not-the-code"):
            with pytest.raises(PlatformError) as refused:
                create_user(session, "first@example.com", PASSWORD, check_signup=True, setup_code=wrong)
            assert refused.value.code == "admin_required"
        assert create_user(session, "first@example.com", PASSWORD, check_signup=True, setup_code=code).role == "admin"
        with pytest.raises(PlatformError) as used:  # one time only; later sign-ups need sign-up opened
            create_user(session, "second@example.com", PASSWORD, check_signup=True, setup_code=code)
        assert used.value.code == "signup_disabled"
    finally:
        session.rollback()
        session.close()


def test_pages_show_who_is_signed_in_with_sign_out_and_admin(auth_app):
    """Issue 19, point 7: once accounts exist the header says who is signed in, offers sign-out, and Admin
    for admins only."""
    user = auth_app.new("hdr")
    admin = auth_app.new("hdradmin", admin=True)
    page = user.client.get("/library")
    assert page.status_code == 200
    assert f"Signed in as {user.email}" in page.text and 'data-action="sign-out"' in page.text
    assert 'href="/admin"' not in page.text
    assert 'href="/admin"' in admin.client.get("/library").text


@pytest.mark.parametrize(
    "base_url,prefixed",
    [("http://127.0.0.1:8275", True), ("https://memes.example.org", True), ("http://memes.example.org", False)],
)
def test_session_cookies_are_host_prefixed_where_browsers_keep_secure_cookies(
    auth_app, settings_env, base_url, prefixed
):
    """Issue 13 point 12: ``__Host-`` (Secure, Path=/, no Domain) over https and on loopback; a plain-http
    install on a LAN name keeps unprefixed, non-Secure cookies (a browser would drop Secure ones there)."""
    settings_env(MEWDEX_ALLOWED_HOSTS='["memes.example.org"]')
    account = auth_app.new("hostprefix")
    c = TestClient(auth_app.app, base_url=base_url, client=("127.0.0.1", 1), raise_server_exceptions=False)
    with c:
        r = c.post("/api/v1/auth/login", json={"email": account.email, "password": PASSWORD})
        assert r.status_code == 200, r.text
        set_cookies = r.headers.get_list("set-cookie")
        prefix = "__Host-" if prefixed else ""
        session_cookie = next(h for h in set_cookies if h.startswith(prefix + "mewdex_session="))
        csrf_cookie = next(h for h in set_cookies if h.startswith(prefix + "mewdex_csrf="))
        for header in (session_cookie, csrf_cookie):
            assert ("; secure" in header.lower()) == prefixed, header
        assert c.get("/api/v1/me").json()["user"]["email"] == account.email  # the cookie signs the browser in
        csrf = r.json()["csrf_token"]
        out = c.post("/api/v1/auth/logout", headers={"X-CSRF-Token": csrf})
        assert out.status_code == 204
        expired = out.headers.get_list("set-cookie")  # the same names (a __Host- one expires only when Secure)
        assert any(h.startswith(prefix + "mewdex_session=") and ("; secure" in h.lower()) == prefixed for h in expired)
        assert c.get("/api/v1/me").status_code == 401


def test_an_unprefixed_session_cookie_is_not_read_where_cookies_are_host_prefixed(auth_app):
    """A cookie a sibling domain or a plain-http page planted as ``mewdex_session`` does not sign in
    on https/loopback, where only ``__Host-mewdex_session`` counts."""
    account = auth_app.new("tossed")
    value = next(v for k, v in account.client.cookies.items() if k == "__Host-mewdex_session")
    planted = TestClient(auth_app.app, **LOCAL_CLIENT, raise_server_exceptions=False)
    with planted:
        planted.cookies.set("mewdex_session", value)
        assert planted.get("/api/v1/me").status_code == 401
        planted.cookies.set("__Host-mewdex_session", value)
        assert planted.get("/api/v1/me").status_code == 200
