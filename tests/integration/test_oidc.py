"""Issue 46, item 1: sign in through a real OpenID Connect provider.

Real parts: ``oidc-provider-mock`` (Authlib's authorization server: discovery, JWKS, RS256 ID tokens,
one-time codes, a registered client whose secret and redirect URI it checks) on a loopback port;
``mewdex serve`` as a subprocess (uvicorn as the command starts it) on the embedded PostgreSQL, its
client secret read from a file (``MEWDEX_OIDC_CLIENT_SECRET_FILE``); the test plays the browser with
httpx (cookies, the provider's form, each redirect by hand).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from contextlib import contextmanager

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from accounts_helpers import PASSWORD, delete_users, own_scope_users
from conftest import LOCAL_CLIENT, MEWDEX_BIN
from oidc_helpers import approve, oidc_provider, sso_sign_in
from ui_helpers import free_port, serve

ADMINS = "mewdex-admins"
# The provider (oidc-provider-mock) still uses Authlib's deprecated JOSE module and JWT configuration.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class Sso:
    """The module's provider and server: ``issuer``, ``url``, ``provider``, ``log`` (the server's output)."""


@contextmanager
def _serve(mewdex_env, port: int, log_path, **settings: str):
    env = {**os.environ, **mewdex_env.env, "MEWDEX_AUTH": "required", "MEWDEX_BCRYPT_ROUNDS": "4", **settings}
    server = serve(env, log_path, port=port)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def sso(mewdex_env, sessions, tmp_path_factory):
    made_before = _user_ids(sessions)
    with sessions.begin() as session:  # an installation with accounts: a sign-in never makes the first one here
        own_scope_users(session, [], PASSWORD)
    with oidc_provider() as provider:
        port = free_port()
        client_id, client_secret = provider.register_client(f"http://127.0.0.1:{port}/auth/oidc/callback")
        secret_file = tmp_path_factory.mktemp("secrets") / "oidc_client_secret"
        secret_file.write_text(client_secret + "\n")
        log_path = tmp_path_factory.mktemp("serve") / "sso.log"
        with _serve(
            mewdex_env,
            port,
            log_path,
            MEWDEX_OIDC_ISSUER=provider.issuer,
            MEWDEX_OIDC_CLIENT_ID=client_id,
            MEWDEX_OIDC_CLIENT_SECRET_FILE=str(secret_file),
            MEWDEX_OIDC_NAME="Authelia",
            MEWDEX_OIDC_ADMIN_CLAIM="groups",
            MEWDEX_OIDC_ADMIN_VALUE=ADMINS,
        ) as url:
            state = Sso()
            state.issuer, state.url, state.provider, state.log = provider.issuer, url, provider, log_path
            state.secret = client_secret
            yield state
    # Every account this module made (by its fixtures or through sign-in) goes.
    delete_users(sessions, _user_ids(sessions) - made_before)
    _set_signup(sessions, None)


def _user_ids(sessions) -> set[str]:
    with sessions.begin() as session:
        return {str(u) for u in session.execute(text("SELECT user_id FROM users")).scalars()}


def _set_signup(sessions, enabled: bool | None) -> None:
    """The admin's sign-up switch (None: back to unset, i.e. closed)."""
    from mewdex.platform.instance import delete_setting, set_setting

    with sessions.begin() as session:
        if enabled is None:
            delete_setting(session, "signup_enabled")
        else:
            set_setting(session, "signup_enabled", enabled)


def _row(sessions, email: str) -> dict | None:
    with sessions.begin() as session:
        row = session.execute(
            text(
                "SELECT user_id, email, oidc_subject, role, password_hash, disabled, quota_memes FROM users "
                "WHERE lower(email) = lower(:e)"
            ),
            {"e": email},
        ).first()
        return dict(row._mapping) if row else None


@pytest.fixture
def account(sessions, sso):
    """An existing account (password sign-in, no provider identity linked yet): its email."""
    with sessions.begin() as session:
        (user,), _made = own_scope_users(session, ["sso"], PASSWORD, role="user")
        return user.email


def _browser(sso, language: str = "en") -> httpx.Client:
    return httpx.Client(base_url=sso.url, timeout=30, headers={"Accept": "text/html", "Accept-Language": language})


def _signed_in_as(client: httpx.Client) -> dict | None:
    r = client.get("/api/v1/me", headers={"Accept": "application/json"})
    return r.json()["user"] if r.status_code == 200 else None


def _refused(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, (r.status_code, r.text[:800])
    assert f'data-code="{code}"' in r.text and "text/html" in r.headers["content-type"], r.text[:800]
    assert not any(c.startswith(("mewdex_session", "__Host-mewdex_session")) for c in r.cookies), r.cookies


def test_the_sign_in_page_offers_the_provider_as_a_plain_link(sso):
    with _browser(sso) as client:
        page = client.get("/login?next=/library").text
        assert 'href="/auth/oidc/login?next=/library"' in page and "Sign in with Authelia" in page
        assert 'id="login-form"' in page  # password sign-in stays beside it
    with _browser(sso, "zh-CN") as client:
        assert "使用 Authelia 登录" in client.get("/login").text


def test_an_existing_account_signs_in_by_verified_email_then_by_subject_after_the_email_changes(sso, sessions, account):
    sub = f"alice-{uuid.uuid4().hex[:8]}"
    sso.provider.user(sub, email=account.upper(), email_verified=True, name="Alice")
    with _browser(sso) as client:
        r = sso_sign_in(client, sub)
        assert r.status_code == 303 and r.headers["location"] == "/settings", (r.status_code, r.text[:500])
        assert _signed_in_as(client)["email"] == account
        session_cookie = client.cookies.get("mewdex_session") or client.cookies.get("__Host-mewdex_session")
        assert session_cookie and "mewdex_oidc" not in str(client.cookies.keys())  # the pending sign-in is used up
    row = _row(sessions, account)
    assert row["oidc_subject"] == f"{sso.issuer} {sub}"  # linked to the provider's subject
    assert row["role"] == "user" and row["password_hash"]  # no admin claim; the password is kept

    # The email changes at the provider (still verified, now unknown to mewdex): the subject signs in.
    sso.provider.user(sub, email=f"renamed-{uuid.uuid4().hex[:6]}@example.org", email_verified=True)
    with _browser(sso) as client:
        r = sso_sign_in(client, sub)
        assert r.status_code == 303, r.text[:500]
        me = _signed_in_as(client)
        assert me["email"] == account and me["id"] == str(row["user_id"])
    # The password still signs in too.
    r = httpx.post(sso.url + "/api/v1/auth/login", json={"email": account, "password": PASSWORD})
    assert r.status_code == 200, r.text
    # Nothing secret reached the server's log (it logs warnings and up).
    assert sso.secret not in sso.log.read_text()


def test_an_unknown_email_gets_an_account_only_while_sign_up_is_open(sso, sessions):
    email = f"newcomer-{uuid.uuid4().hex[:8]}@example.org"
    sub = f"newcomer-{uuid.uuid4().hex[:8]}"
    sso.provider.user(sub, email=email, email_verified=True, name="New Comer")

    _set_signup(sessions, False)
    with _browser(sso) as client:
        r = sso_sign_in(client, sub)
        _refused(r, 403, "signup_disabled")
        assert "No account on this server uses this email, and sign-up is closed" in r.text
        assert _signed_in_as(client) is None
    with _browser(sso, "zh-CN") as client:
        r = sso_sign_in(client, sub)
        _refused(r, 403, "signup_disabled")
        assert "没有使用这个邮箱的账号，且注册已关闭" in r.text
    assert _row(sessions, email) is None

    _set_signup(sessions, True)
    with _browser(sso) as client:
        r = sso_sign_in(client, sub, next_path="/library")
        assert r.status_code == 303 and r.headers["location"] == "/library", r.text[:500]
        me = _signed_in_as(client)
        assert me["email"] == email and me["name"] == "New Comer" and me["role"] == "user"
    row = _row(sessions, email)
    assert row["oidc_subject"] == f"{sso.issuer} {sub}" and row["password_hash"] is None
    assert row["quota_memes"] is not None  # the limits of an account made by sign-up
    _set_signup(sessions, False)


def test_an_unverified_email_never_takes_over_an_account(sso, sessions, account):
    for claims in ({"email_verified": False}, {}, {"email_verified": "false"}):
        sub = f"mallory-{uuid.uuid4().hex[:8]}"
        sso.provider.user(sub, email=account, **claims)
        with _browser(sso) as client:
            r = sso_sign_in(client, sub)
            _refused(r, 403, "oidc_email_unverified")
            assert _signed_in_as(client) is None
    assert _row(sessions, account)["oidc_subject"] is None
    # Even with sign-up open, an unverified unknown email makes no account.
    _set_signup(sessions, True)
    try:
        email = f"unverified-{uuid.uuid4().hex[:8]}@example.org"
        sso.provider.user("unverified-" + email, email=email, email_verified=False)
        with _browser(sso) as client:
            _refused(sso_sign_in(client, "unverified-" + email), 403, "oidc_email_unverified")
        assert _row(sessions, email) is None
    finally:
        _set_signup(sessions, False)


def test_a_callback_not_started_in_this_browser_or_replayed_is_refused(sso, sessions, account):
    sub = f"bob-{uuid.uuid4().hex[:8]}"
    sso.provider.user(sub, email=account, email_verified=True)
    with _browser(sso) as victim, _browser(sso) as attacker:
        # The attacker's own approved callback, opened in the victim's browser (login CSRF) …
        callback = approve(attacker, sub).callback
        _refused(victim.get(callback), 400, "oidc_state_invalid")
        assert _signed_in_as(victim) is None
        # … and a callback whose state was changed, in the browser that started it.
        approval = approve(victim, sub)
        forged = approval.callback.replace(approval.params["state"], "x" * 32)
        _refused(victim.get(forged), 400, "oidc_state_invalid")
        assert "was not started in this browser" in victim.get(forged).text

    with _browser(sso) as client:
        approval = approve(client, sub)
        pending = dict(client.cookies)
        assert client.get(approval.callback).status_code == 303  # signed in
        # Replayed in the same browser: the pending sign-in is used up.
        with _browser(sso) as again:
            again.cookies.update({k: v for k, v in pending.items() if "oidc" in k})
            # With the pending cookie put back, the provider refuses the used code: a page, not a 500.
            _refused(again.get(approval.callback), 502, "oidc_failed")
        _refused(client.get(approval.callback), 400, "oidc_state_invalid")


def test_a_refused_consent_is_a_page(sso):
    with _browser(sso) as client:
        approval = approve(client, None)
        assert approval.params["error"] == "access_denied"
        r = client.get(approval.callback)
        _refused(r, 403, "oidc_denied")
        assert "cancelled or refused at the provider" in r.text
    with _browser(sso, "zh-CN") as client:
        _refused(client.get(approve(client, None).callback), 403, "oidc_denied")


def test_the_admin_claim_sets_the_role_at_each_sign_in(sso, sessions, account):
    sub = f"carol-{uuid.uuid4().hex[:8]}"
    sso.provider.user(sub, email=account, email_verified=True, groups=["staff", ADMINS])
    with _browser(sso) as client:
        assert sso_sign_in(client, sub).status_code == 303
        assert _signed_in_as(client)["role"] == "admin"
        assert client.get("/admin").status_code == 200
    with sessions.begin() as session:  # another admin: the last enabled admin is never demoted
        own_scope_users(session, ["other-admin"], PASSWORD, role="admin")
    sso.provider.user(sub, email=account, email_verified=True, groups=["staff"])
    with _browser(sso) as client:
        assert sso_sign_in(client, sub).status_code == 303
        assert _signed_in_as(client)["role"] == "user"


def test_a_disabled_account_is_refused(sso, sessions, account):
    sub = f"dave-{uuid.uuid4().hex[:8]}"
    sso.provider.user(sub, email=account, email_verified=True)
    with sessions.begin() as session:
        session.execute(text("UPDATE users SET disabled = true WHERE email = :e"), {"e": account})
    with _browser(sso) as client:
        r = sso_sign_in(client, sub)
        _refused(r, 403, "account_disabled")
        assert _signed_in_as(client) is None


def test_an_unreachable_provider_is_a_page_and_password_sign_in_can_be_turned_off(settings_env, sessions):
    """In-process app: a provider nobody answers for (a closed loopback port) gives a clear page; with
    MEWDEX_PASSWORD_LOGIN=false the password sign-in and sign-up answer 403 and the page offers only
    the provider, while the CLI still manages accounts (the admin's way back in)."""
    from mewdex.web.app import create_app

    closed = free_port()
    settings_env(
        MEWDEX_AUTH="required",
        MEWDEX_OIDC_ISSUER=f"http://127.0.0.1:{closed}",
        MEWDEX_OIDC_CLIENT_ID="mewdex",
        MEWDEX_OIDC_CLIENT_SECRET="never-shown",
        MEWDEX_PASSWORD_LOGIN="false",
        MEWDEX_BCRYPT_ROUNDS="4",
    )
    with sessions.begin() as session:
        (user,), made = own_scope_users(session, ["nopw"], PASSWORD, role="user")
        email = user.email
    try:
        with TestClient(create_app(workers=0), **LOCAL_CLIENT, raise_server_exceptions=False) as c:
            r = c.get("/auth/oidc/login", headers={"Accept": "text/html"}, follow_redirects=False)
            assert r.status_code == 502 and 'data-code="oidc_unavailable"' in r.text, r.text[:500]
            assert "never-shown" not in r.text
            r = c.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
            assert r.status_code == 403 and r.json()["error"]["code"] == "password_login_disabled", r.text
            r = c.post("/api/v1/auth/signup", json={"email": "x-" + email, "password": PASSWORD})
            assert r.status_code == 403 and r.json()["error"]["code"] == "password_login_disabled", r.text
            page = c.get("/login").text
            assert 'id="oidc-login"' in page and 'id="login-form"' not in page and 'id="password-login-off"' in page
        env = {**os.environ, "MEWDEX_PASSWORD_LOGIN": "false"}
        new_admin = f"cli-admin-{uuid.uuid4().hex[:8]}@example.com"
        out = subprocess.run(
            [str(MEWDEX_BIN), "user", "create", new_admin, "--admin", "--password-stdin"],
            input=PASSWORD,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert _row(sessions, new_admin)["role"] == "admin"
        made.append(str(_row(sessions, new_admin)["user_id"]))
    finally:
        delete_users(sessions, made)


def test_the_account_rule_auto_create_and_a_subject_already_linked(settings_env, sessions):
    """The account rule itself (platform.oidc.account_for, on the real database): with
    MEWDEX_OIDC_AUTO_CREATE a confirmed new email gets an account although sign-up is closed; an
    account linked to one provider identity is not taken by another with the same email."""
    from mewdex.platform import oidc
    from mewdex.platform.errors import PlatformError

    issuer = "https://auth.example.org"
    settings_env(MEWDEX_OIDC_ISSUER=issuer, MEWDEX_OIDC_CLIENT_ID="mewdex")
    _set_signup(sessions, False)
    with sessions.begin() as session:
        own_scope_users(session, [], PASSWORD)  # not the installation's first account
    email = f"auto-{uuid.uuid4().hex[:8]}@example.org"
    claims = {"iss": issuer, "sub": "auto-1", "email": email, "email_verified": True}
    made: list[str] = []
    try:
        with sessions.begin() as session, pytest.raises(PlatformError) as info:
            oidc.account_for(session, claims)
        assert info.value.code == "signup_disabled"
        settings_env(MEWDEX_OIDC_AUTO_CREATE="true")
        with sessions.begin() as session:
            user = oidc.account_for(session, claims)
            made.append(str(user.user_id))
            assert (user.email, user.oidc_subject, user.password_hash) == (email, f"{issuer} auto-1", None)
        with sessions.begin() as session, pytest.raises(PlatformError) as info:
            oidc.account_for(session, {**claims, "sub": "someone-else"})
        assert info.value.code == "oidc_account_linked"
    finally:
        delete_users(sessions, made)
