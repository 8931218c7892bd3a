"""Fixtures and helpers for the account tests: an app in ``MEWDEX_AUTH=required`` mode over the
real database, users made through the real HTTP API, and cleanup of every user they create."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from conftest import LOCAL_CLIENT

PASSWORD = "correct horse battery"


@dataclass
class Account:
    email: str
    user_id: str
    scope_id: str
    csrf: str
    token: str
    client: TestClient  # signed in with the session cookie


def delete_users(sessions, user_ids) -> None:
    """Remove users, then their scopes (memes and everything else cascade from the scope)."""
    with sessions.begin() as session:
        for uid in user_ids:
            scope_id = session.execute(text("SELECT scope_id FROM users WHERE user_id = :u"), {"u": uid}).scalar()
            session.execute(text("DELETE FROM users WHERE user_id = :u"), {"u": uid})
            if scope_id and scope_id != "local":
                session.execute(text("DELETE FROM scopes WHERE id = :s"), {"s": scope_id})


def own_scope_users(session, prefixes: list[str], password: str = PASSWORD, **kw) -> tuple[list, list[str]]:
    """``(users, made)``: a user per prefix, each owning a new scope of its own, never the
    installation's shared default scope (which the first account of an installation takes, with the
    memes already in it). When no account exists yet, one placeholder first account is made before
    them; ``made`` lists every user id made (the placeholder too) for :func:`delete_users`."""
    from mewdex.platform.users import any_users, create_user

    made: list[str] = []
    if not any_users(session):
        first = create_user(session, f"first-{uuid.uuid4().hex[:8]}@example.com", password, role="user")
        made.append(str(first.user_id))
    users = [create_user(session, f"{p}-{uuid.uuid4().hex[:8]}@example.com", password, **kw) for p in prefixes]
    assert all(u.scope_id != "local" for u in users)
    made += [str(u.user_id) for u in users]
    return users, made


@pytest.fixture
def auth_app(settings_env, sessions):
    """``(app, accounts)``: the real app with login required; ``accounts.new()`` signs up a user."""
    from mewdex.web.app import create_app

    settings_env(MEWDEX_AUTH="required", MEWDEX_BCRYPT_ROUNDS="4")
    with sessions.begin() as session:  # the counters of sign-ins, sign-ups and public links
        session.execute(text("DELETE FROM login_failures"))
    app = create_app(workers=0)
    made: list[str] = []

    class Accounts:
        def __init__(self):
            self.app = app

        def client(self) -> TestClient:
            c = TestClient(app, **LOCAL_CLIENT, raise_server_exceptions=False)
            c.__enter__()
            clients.append(c)
            return c

        def new(self, prefix: str = "u", *, admin: bool = False) -> Account:
            email = f"{prefix}-{uuid.uuid4().hex[:10]}@example.com"
            if admin:
                from mewdex.platform.users import create_user

                with sessions.begin() as session:
                    made.append(str(create_user(session, email, PASSWORD, role="admin").user_id))
            c = self.client()
            if not admin:
                r = c.post("/api/v1/auth/signup", json={"email": email, "password": PASSWORD})
                assert r.status_code == 201, r.text
                made.append(r.json()["user"]["id"])
            r = c.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
            assert r.status_code == 200, r.text
            user, csrf = r.json()["user"], r.json()["csrf_token"]
            r = c.post("/api/v1/tokens", json={"name": "test"}, headers={"X-CSRF-Token": csrf})
            assert r.status_code == 201, r.text
            return Account(email, user["id"], user["scope_id"], csrf, r.json()["token"], c)

    clients: list[TestClient] = []
    accounts = Accounts()
    accounts.client()  # runs the lifespan (migrations) once
    from mewdex.platform.instance import set_setting
    from mewdex.platform.users import any_users, create_user

    with sessions.begin() as session:
        before = set(session.execute(text("SELECT user_id::text FROM users")).scalars())
        if not any_users(session):
            # The installation's first account: admin, and owner of the default (single-user) scope.
            first = create_user(session, f"first-{uuid.uuid4().hex[:8]}@example.com", PASSWORD)
            assert first.role == "admin" and first.scope_id == "local"
            made.append(str(first.user_id))
        set_setting(session, "signup_enabled", True)  # off by default; these tests sign users up
    try:
        yield accounts
    finally:
        with sessions.begin() as session:
            set_setting(session, "signup_enabled", False)
        for c in clients:
            c.__exit__(None, None, None)
        # every account made meanwhile (also a test's own sign-ups): later tests of this process expect
        # the accounts they found (with one, ``auto`` asks for a login)
        with sessions.begin() as session:
            now = set(session.execute(text("SELECT user_id::text FROM users")).scalars())
        delete_users(sessions, sorted(set(made) | (now - before)))
        with sessions.begin() as session:
            session.execute(text("DELETE FROM login_failures WHERE key LIKE 'signup:%'"))


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def add_meme(sessions, store, scope_id: str, data: bytes, name: str = "cat.png", process: bool = False) -> str:
    """A meme added through the library service (the upload path) into ``scope_id``."""
    from mewdex.db.models import ScopeContext
    from mewdex.library.memes import add_image

    result = add_image(
        sessions,
        store,
        ScopeContext(scope_id),
        data,
        filename=name,
        provenance={"source": "test"},
        collection_names=["things"],
        process=process,
    )
    assert result.status == "created", result
    return result.meme_id


def png(seed: int, size: int = 32) -> bytes:
    """A small distinct PNG."""
    import io

    from PIL import Image

    img = Image.new("RGB", (size, size), ((seed * 37) % 256, (seed * 91) % 256, (seed * 13) % 256))
    img.putpixel((seed % size, (seed // size) % size), (255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()
