"""Issue 40, findings 5 and 6: configuration alone decides who is calling, and every password check
is counted.

Real parts: ``mewdex serve`` as a subprocess (uvicorn started the way the command starts it) on the
embedded PostgreSQL, answering real HTTP on a local port; the test plays the browser, a local
process, and — where ``MEWDEX_TRUSTED_PROXIES`` names 127.0.0.1 — the reverse proxy that appends
the client it saw to ``X-Forwarded-For``.
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from accounts_helpers import PASSWORD, delete_users, own_scope_users
from conftest import LOCAL_CLIENT
from ui_helpers import serve

WRONG = "not the password at all"


@contextmanager
def _serve(mewdex_env, tmp_path_factory, **settings: str):
    """``mewdex serve`` (login required, no workers) with ``settings``; yields an httpx client on it."""
    env = {**os.environ, **mewdex_env.env, "MEWDEX_AUTH": "required", "MEWDEX_BCRYPT_ROUNDS": "4", **settings}
    for name in ("FORWARDED_ALLOW_IPS", "MEWDEX_TRUSTED_PROXIES", "MEWDEX_PROXY_CLIENT_HEADER"):
        if name not in settings:
            env.pop(name, None)
    server = serve(env, tmp_path_factory.mktemp("serve") / "serve.log", host=None)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        server.stop()


@pytest.fixture(scope="module")
def account(sessions):
    """An account (email) for the sign-in tests; removed afterwards."""
    with sessions.begin() as session:
        (user,), made = own_scope_users(session, ["addr"], PASSWORD, role="user")
        email = user.email
    yield email
    delete_users(sessions, made)


@pytest.fixture
def fresh_counters(sessions):
    with sessions.begin() as session:
        session.execute(text("DELETE FROM login_failures"))
    yield
    with sessions.begin() as session:
        session.execute(text("DELETE FROM login_failures"))


def _login(client: httpx.Client, email: str, password: str, headers: dict[str, str]) -> int:
    return client.post("/api/v1/auth/login", json={"email": email, "password": password}, headers=headers).status_code


def test_without_trusted_proxies_forwarding_headers_change_nothing(mewdex_env, tmp_path_factory, fresh_counters):
    """No MEWDEX_TRUSTED_PROXIES: a local process (or anything through a TCP tunnel) that rotates
    X-Forwarded-For / Forwarded / X-Real-IP is still the one address 127.0.0.1 — the sign-in limit
    per address holds, and the metrics allow-list does not open to a named address."""
    with _serve(
        mewdex_env,
        tmp_path_factory,
        MEWDEX_LOGIN_MAX_FAILURES_PER_IP="5",
        MEWDEX_METRICS_ALLOW="203.0.113.0/24",
        FORWARDED_ALLOW_IPS="*",  # uvicorn's own proxy handling would believe anyone: it must be off
    ) as server:
        answers = []
        for i in range(12):
            spoof = f"203.0.113.{i + 1}"
            headers = {"X-Forwarded-For": spoof, "Forwarded": f"for={spoof}", "X-Real-IP": spoof}
            answers.append(_login(server, f"nobody-{uuid.uuid4().hex[:8]}@example.com", WRONG, headers))
        assert answers[:5] == [401] * 5 and answers[5:] == [429] * 7, answers
        r = server.post("/api/v1/auth/login", json={"email": "x@example.com", "password": WRONG})
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited" and int(r.headers["Retry-After"])

        assert server.get("/metrics").status_code == 200  # this machine, no headers
        for header, value in (
            ("X-Forwarded-For", "203.0.113.9"),
            ("Forwarded", "for=203.0.113.9"),
            ("X-Real-IP", "203.0.113.9"),
        ):
            r = server.get("/metrics", headers={header: value})
            assert r.status_code == 404, (header, r.status_code)  # 127.0.0.1 with a header: not allowed


def test_behind_a_trusted_proxy_only_its_own_hop_names_the_client(
    mewdex_env, tmp_path_factory, account, fresh_counters
):
    """MEWDEX_TRUSTED_PROXIES = this proxy (127.0.0.1) and an inner one (10.0.0.0/8): the client is the
    rightmost X-Forwarded-For hop that is not a trusted proxy. What the client wrote to the left of
    it, or in another header (Forwarded), never wins; a request from the proxy's address is never
    "this machine"; one account is limited whatever addresses the guesses come from."""
    with _serve(
        mewdex_env,
        tmp_path_factory,
        MEWDEX_TRUSTED_PROXIES="127.0.0.1,10.0.0.0/8",
        MEWDEX_METRICS_ALLOW="203.0.113.0/24,198.51.100.7",
        MEWDEX_LOGIN_MAX_FAILURES_PER_IP="5",
        MEWDEX_LOGIN_MAX_FAILURES_PER_ACCOUNT="5",
    ) as server:
        # The real client 192.0.2.50 (not allowed) claims an allowed address in every way a client can.
        for headers in (
            {"X-Forwarded-For": "203.0.113.9, 192.0.2.50"},
            {"X-Forwarded-For": "203.0.113.9, 192.0.2.50, 10.0.0.2"},
            {"Forwarded": "for=203.0.113.9", "X-Forwarded-For": "192.0.2.50, 10.0.0.2"},
            {"X-Real-IP": "203.0.113.9", "X-Forwarded-For": "192.0.2.50"},
        ):
            assert server.get("/metrics", headers=headers).status_code == 404, headers
        # The allowed client through two proxies is let in: the inner proxy is skipped, not taken.
        chain = {"X-Forwarded-For": "192.0.2.1, 198.51.100.7, 10.0.0.2"}
        assert server.get("/metrics", headers=chain).status_code == 200
        # From the proxy's own address: a proxy (no "this machine"), whatever it sends or not.
        for headers in ({}, {"X-Forwarded-For": "not-an-address"}, {"X-Forwarded-For": "203.0.113.9, _hidden"}):
            assert server.get("/metrics", headers=headers).status_code == 404, headers

        # Rotating the left part does not escape the per-address limit of the real client …
        answers = [
            _login(
                server,
                f"nobody-{uuid.uuid4().hex[:8]}@example.com",
                WRONG,
                {"X-Forwarded-For": f"203.0.113.{i + 1}, 192.0.2.60"},
            )
            for i in range(8)
        ]
        assert answers[:5] == [401] * 5 and answers[5:] == [429] * 3, answers
        # … while another client behind the same proxy is not affected.
        assert _login(server, account, PASSWORD, {"X-Forwarded-For": "192.0.2.61"}) == 200

        # One account from 40 different addresses: limited per account (stable 429 rate_limited) …
        answers = [_login(server, account, WRONG, {"X-Forwarded-For": f"198.51.100.{i + 10}"}) for i in range(40)]
        assert answers[:5] == [401] * 5 and answers.count(429) >= 30, answers
        r = server.post(
            "/api/v1/auth/login",
            json={"email": account.upper(), "password": PASSWORD},  # the account, however it is written
            headers={"X-Forwarded-For": "198.51.100.99"},
        )
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited", r.text
        # … but never locked for the address the owner signed in from before.
        assert _login(server, account, PASSWORD, {"X-Forwarded-For": "192.0.2.61"}) == 200


def test_no_login_mode_is_only_this_machine_with_no_proxy_configured(settings_env, mewdex_env):
    """No-login mode: a loopback peer with no forwarding headers — and no proxy configured (behind a
    proxy on 127.0.0.1 every request comes from loopback)."""
    from mewdex.web.app import create_app

    settings_env(MEWDEX_AUTH="none")
    with TestClient(create_app(workers=0), **LOCAL_CLIENT, raise_server_exceptions=False) as c:
        assert c.get("/api/v1/me").status_code == 200
        settings_env(MEWDEX_TRUSTED_PROXIES="127.0.0.1")
        r = c.get("/api/v1/me")
        assert r.status_code == 401 and r.json()["error"]["code"] == "auth_required"
        assert c.post("/api/v1/collections", json={"name": "x"}).status_code == 401
        assert c.get("/metrics").status_code == 404  # nor the metrics' loopback rule


def test_a_wrong_current_password_is_counted_like_a_failed_sign_in(auth_app, sessions):
    """40 wrong current passwords on the password change: 429 from the per-address limit on, and the
    right one is refused too until the window has passed; the password stays unchanged meanwhile."""
    from mewdex.platform.users import check_password

    a = auth_app.new("pwchange")
    headers = {"X-CSRF-Token": a.csrf}
    new_password = "a brand new password"

    def change(current: str):
        return a.client.post(
            "/api/v1/auth/password",
            json={"current_password": current, "new_password": new_password},
            headers=headers,
        )

    answers = [change(WRONG) for _ in range(40)]
    codes = [r.status_code for r in answers]
    assert codes[:30] == [401] * 30 and codes[30:] == [429] * 10, codes  # MEWDEX_LOGIN_MAX_FAILURES_PER_IP = 30
    assert answers[-1].json()["error"]["code"] == "rate_limited" and int(answers[-1].headers["Retry-After"]) >= 1
    r = change(PASSWORD)
    assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
    with sessions.begin() as session:
        stored = session.execute(text("SELECT password_hash FROM users WHERE email = :e"), {"e": a.email}).scalar()
    assert check_password(stored, PASSWORD.encode())
    # The same counters as sign-in: this address may not sign in either now.
    r = a.client.post("/api/v1/auth/login", json={"email": a.email, "password": PASSWORD})
    assert r.status_code == 429
    # Once the window has passed, the right password works (and starts the count afresh).
    with sessions.begin() as session:
        session.execute(text("UPDATE login_failures SET window_started_at = window_started_at - interval '1 day'"))
    assert change(PASSWORD).status_code == 204
    with sessions.begin() as session:
        key = "account:" + a.email.lower()
        assert session.execute(text("SELECT count(*) FROM login_failures WHERE key = :k"), {"k": key}).scalar() == 0


def test_a_spray_cannot_keep_the_owner_out_past_a_password_reset(auth_app):
    """The per-account slow-down is bounded: a spray from many addresses slows every new address of
    the account, and an admin's reset link (a new password) starts its count afresh — the owner then
    signs in from anywhere at once."""
    admin = auth_app.new("sprayadmin", admin=True)
    victim = auth_app.new("sprayed")
    for i in range(12):
        stranger = TestClient(auth_app.app, base_url=LOCAL_CLIENT["base_url"], client=(f"203.0.113.{i + 1}", 1000))
        stranger.post("/api/v1/auth/login", json={"email": victim.email, "password": WRONG})
    new_place = TestClient(auth_app.app, base_url=LOCAL_CLIENT["base_url"], client=("192.0.2.77", 1000))
    r = new_place.post("/api/v1/auth/login", json={"email": victim.email, "password": PASSWORD})
    assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
    r = admin.client.post(f"/api/v1/admin/users/{victim.user_id}/reset-link", headers={"X-CSRF-Token": admin.csrf})
    token = r.json()["url"].split("#", 1)[1]
    new_password = "the owner's new password"
    assert new_place.post("/api/v1/auth/reset", json={"token": token, "new_password": new_password}).status_code == 204
    r = new_place.post("/api/v1/auth/login", json={"email": victim.email, "password": new_password})
    assert r.status_code == 200, r.text


def test_sign_ups_are_counted_per_address_as_sign_ins_are(auth_app, settings_env):
    """MEWDEX_SIGNUP_MAX_PER_IP counts in the sign-in limiter's unit (an IPv4 address, an IPv6 /64,
    an IPv4-mapped peer as its IPv4): one IPv6 host picks any of its /64's 2^64 addresses, and each
    new one got a fresh allowance (unlimited sign-ups from one home connection)."""
    settings_env(MEWDEX_SIGNUP_MAX_PER_IP="3")

    def sign_up(peer: str) -> int:
        c = TestClient(auth_app.app, base_url=LOCAL_CLIENT["base_url"], client=(peer, 1000))
        email = f"many-{uuid.uuid4().hex[:10]}@example.com"
        return c.post("/api/v1/auth/signup", json={"email": email, "password": PASSWORD}).status_code

    answers = [sign_up(f"2001:db8:40:5::{i + 1:x}") for i in range(5)]
    assert answers == [201, 201, 201, 429, 429], answers
    assert sign_up("2001:db8:40:6::1") == 201  # another /64: another host
    answers = [sign_up(peer) for peer in ("192.0.2.41", "::ffff:192.0.2.41", "192.0.2.41", "192.0.2.41")]
    assert answers == [201, 201, 201, 429], answers


def test_guesses_sent_at_once_are_held_to_the_limits(mewdex_env, tmp_path_factory, account, fresh_counters):
    """The limits are checked and counted in one step per attempt (the counters' rows locked), not
    read before the password work and written after it: 16 wrong guesses sent at once, each taking
    its bcrypt time, got 16 answers of 401 where the limit was 3 — per address, and per account from
    16 addresses (behind a trusted proxy)."""
    from concurrent.futures import ThreadPoolExecutor

    def at_once(url: str, attempts: list[tuple[str, dict[str, str]]]) -> list[int]:
        def one(attempt: tuple[str, dict[str, str]]) -> int:
            email, headers = attempt
            r = httpx.post(url + "/api/v1/auth/login", json={"email": email, "password": WRONG}, headers=headers)
            return r.status_code

        with ThreadPoolExecutor(len(attempts)) as pool:
            return list(pool.map(one, attempts))

    with _serve(
        mewdex_env,
        tmp_path_factory,
        MEWDEX_BCRYPT_ROUNDS="10",
        MEWDEX_TRUSTED_PROXIES="127.0.0.1",
        MEWDEX_LOGIN_MAX_FAILURES_PER_IP="3",
        MEWDEX_LOGIN_MAX_FAILURES_PER_ACCOUNT="3",
    ) as server:
        url = str(server.base_url).rstrip("/")
        one_address = [(f"nobody-{uuid.uuid4().hex[:8]}@example.com", {"X-Forwarded-For": "192.0.2.70"})] * 16
        answers = at_once(url, one_address)
        assert sorted(answers) == [401] * 3 + [429] * 13, answers
        many_addresses = [(account, {"X-Forwarded-For": f"198.51.100.{i + 20}"}) for i in range(16)]
        answers = at_once(url, many_addresses)
        # past 3 failures a new address waits 1 s after the last: at most one more comes in late
        assert answers.count(401) <= 4 and answers.count(429) >= 12, answers
