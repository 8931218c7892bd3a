"""``mewdex user …`` on the local database, and ``mewdex search --server URL --token`` against a
real server (uvicorn in this process, the CLI as a subprocess)."""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid

from sqlalchemy import text

from accounts_helpers import PASSWORD, add_meme, delete_users, png
from conftest import wait_until


def _user(sessions, email):
    with sessions.begin() as session:
        row = session.execute(
            text("SELECT user_id, role, disabled FROM users WHERE lower(email) = lower(:e)"), {"e": email}
        ).first()
    return row


def test_user_commands(mewdex_env, sessions, settings_env):
    settings_env(MEWDEX_BCRYPT_ROUNDS="4")
    email = f"cli-{uuid.uuid4().hex[:8]}@example.com"
    keeper = f"keeper-{uuid.uuid4().hex[:8]}@example.com"  # an admin stays when ours is disabled
    try:
        mewdex_env.cli("user", "create", keeper, "--admin", "--password-stdin", input=PASSWORD + "\n", check=True)
        r = mewdex_env.cli("user", "create", email, "--password-stdin", input=PASSWORD + "\n")
        assert r.returncode == 0, r.stderr
        r = mewdex_env.cli("user", "create", email.upper(), "--password-stdin", input=PASSWORD + "\n")
        assert r.returncode == 3 and "email_taken" in r.stderr
        r = mewdex_env.cli("user", "create", "x" + email, "--password-stdin", input="a" * 73 + "\n")
        assert r.returncode == 2 and "password_too_long" in r.stderr
        mewdex_env.cli("user", "promote", email, check=True)
        assert _user(sessions, email).role == "admin"
        mewdex_env.cli("user", "disable", email, check=True)
        assert _user(sessions, email).disabled is True
        mewdex_env.cli("user", "disable", email, "--enable", check=True)
        mewdex_env.cli("user", "reset-password", email, "--password-stdin", input="brand new pw\n", check=True)
        from mewdex.platform import sessions as auth_sessions

        with sessions.begin() as session:
            assert auth_sessions.authenticate(session, email, "brand new pw", "cli-test").email == email
        listed = json.loads(mewdex_env.cli("user", "list", "--json", check=True).stdout)
        assert email in [u["email"] for u in listed]
        assert mewdex_env.cli("user", "promote", "nobody@example.com").returncode == 4
    finally:
        rows = [_user(sessions, e) for e in (email, keeper)]
        delete_users(sessions, [str(r.user_id) for r in rows if r])


def test_cli_searches_a_server_with_a_token(auth_app, mewdex_env, sessions, store, drain):
    import uvicorn

    from mewdex.db.models import ScopeContext

    u = auth_app.new("remote")
    meme_id = add_meme(sessions, store, u.scope_id, png(41, 48), name="remote walrus.png", process=True)
    drain(ScopeContext(u.scope_id))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            auth_app.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", proxy_headers=False
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 30, 0.05, "the API server to start")
    try:
        url = f"http://127.0.0.1:{port}"
        # The token comes from MEWDEX_TOKEN (or a prompt), never from argv where `ps` shows it.
        assert mewdex_env.cli("search", "x", "--server", url, "--token", u.token).returncode == 2
        os.environ["MEWDEX_TOKEN"] = u.token
        r = mewdex_env.cli("search", "remote walrus", "--json", "--server", url, check=True)
        assert meme_id in [x["id"] for x in json.loads(r.stdout)["results"]]
        os.environ["MEWDEX_TOKEN"] = "mdx_wrong"
        r = mewdex_env.cli("search", "remote walrus", "--server", url)
        assert r.returncode == 1 and "invalid_token" in r.stderr
    finally:
        os.environ.pop("MEWDEX_TOKEN", None)
        server.should_exit = True
        thread.join(10)
