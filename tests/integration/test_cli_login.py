"""The CLI as a client of the running server (issue 35, item 3): a real ``mewdex serve`` with login
required, ``mewdex login`` / ``logout``, ``mewdex search`` asking that server with the stored token (links
on its port), a 401 that says how to sign in; and settings (item 11): a list setting written with commas
works for serve and the commands, a bad one stops a command and serve in one line."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import MEWDEX_BIN
from mewdex.db.models import Meme
from mewdex.search import keyword
from ui_helpers import free_port, serve

PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def served(mewdex_env, sessions, tmp_path_factory):
    """``(url, env, account)``: ``mewdex serve`` (login required, no workers) on a free port; an account
    whose scope holds one meme the keyword leg finds by the word ``loginbear``."""
    from accounts_helpers import delete_users, own_scope_users

    with sessions.begin() as session:
        (user,), made = own_scope_users(session, ["cli"], PASSWORD, role="user")
        email = user.email
        scope_id = user.scope_id
        sha = hashlib.sha256(email.encode()).hexdigest()
        meme = Meme(
            scope_id=scope_id,
            storage_key=sha + ".png",
            display_name="loginbear waving",
            name_source="uploaded",
            extension=".png",
            size_bytes=100,
            sha256=sha,
            provenance={},
            extensions={"image": {}},
        )
        session.add(meme)
        session.flush()
        keyword.index_document(
            session, scope_id, meme.id, "h", {"name": "loginbear waving", "ocr": "", "labels": "", "phrase": ""}
        )
        meme_id = str(meme.id)
    config_home = tmp_path_factory.mktemp("config")
    env = {
        **os.environ,
        **mewdex_env.env,
        "MEWDEX_AUTH": "required",
        "MEWDEX_BCRYPT_ROUNDS": "4",
        "XDG_CONFIG_HOME": str(config_home),
        # a list setting written the natural way (issue 35, item 11): serve and every command take it
        "MEWDEX_EGRESS_ALLOW_HOSTS": "127.0.0.1:9000, minio.lan:9000",
        "COLUMNS": "250",
        "NO_COLOR": "1",
    }
    env.pop("MEWDEX_TOKEN", None)
    server = None
    try:
        server = serve(env, tmp_path_factory.mktemp("serve") / "serve.log", host=None)
        yield (
            server.url,
            env,
            {"email": email, "meme_id": meme_id, "config": config_home / "mewdex" / "credentials.json"},
        )
    finally:
        if server is not None:
            server.stop()
        delete_users(sessions, made)


def run(env: dict, *args: str, stdin: str | None = None, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(MEWDEX_BIN), *args], env={**env, **extra}, input=stdin, capture_output=True, text=True, timeout=120
    )


def lines(stream: str) -> list[str]:
    return [line for line in stream.splitlines() if line.strip()]


def test_login_search_and_logout_against_the_running_server(served):
    url, env, account = served
    # Signed out: one line that says how to sign in, a non-zero exit, and no search here instead.
    refused = run(env, "search", "loginbear")
    assert refused.returncode == 1 and refused.stdout == ""
    assert len(lines(refused.stderr)) == 1, refused.stderr
    assert "401" in refused.stderr and "`mewdex login`" in refused.stderr and url in refused.stderr
    wrong = run(env, "login", account["email"], stdin="not the password\n")
    assert wrong.returncode == 1 and "invalid_credentials" in wrong.stderr and not account["config"].exists()

    signed_in = run(env, "login", account["email"], stdin=PASSWORD + "\n")
    assert signed_in.returncode == 0, signed_in.stderr
    assert account["email"] in signed_in.stdout and str(account["config"]) in signed_in.stdout.replace("\n", "")
    assert account["config"].stat().st_mode & 0o777 == 0o600
    (entry,) = json.loads(account["config"].read_text())["servers"].values()
    token = entry["token"]
    assert token.startswith("mdx_") and entry["url"] == url
    # issue 40, finding 4: the URL the password went to is named, the token is bound to its origin, and
    # the record the CLI proved (held open by `mewdex serve`) is readable by this user only
    assert f"signing in to {url}" in signed_in.stderr and entry["origin"] == url
    record = Path(env["MEWDEX_DATA_DIR"]) / "serve.json"
    assert json.loads(record.read_text())["url"].endswith(url.rsplit(":", 1)[1])
    assert record.stat().st_mode & 0o777 == 0o600

    # The server answers (its scope: the account's meme), and links use the server's own port.
    table = run(env, "search", "loginbear")
    assert table.returncode == 0, table.stderr
    flat = table.stdout.replace("\n", "").replace("│", "").replace(" ", "")
    assert "1results" in flat and f"{url}/memes/{account['meme_id']}" in flat

    # `similar` asks the server too: its answer for a meme whose visual stage has not run.
    similar = run(env, "similar", account["meme_id"])
    assert similar.returncode == 3 and "visual_not_ready" in similar.stderr, similar.stderr

    bogus = run(env, "search", "loginbear", MEWDEX_TOKEN="mdx_not_a_token")
    assert bogus.returncode == 1 and len(lines(bogus.stderr)) == 1 and "token was refused" in bogus.stderr

    signed_out = run(env, "logout")
    assert signed_out.returncode == 0 and "revoked" in signed_out.stdout, signed_out.stdout + signed_out.stderr
    assert json.loads(account["config"].read_text())["servers"] == {}
    revoked = run(env, "search", "loginbear", MEWDEX_TOKEN=token)
    assert revoked.returncode == 1 and "token was refused" in revoked.stderr


def test_a_bad_setting_stops_a_command_and_serve_in_one_line(mewdex_env):
    env = {**os.environ, **mewdex_env.env, "NO_COLOR": "1", "COLUMNS": "250"}
    for command in (("status",), ("serve", "--port", str(free_port()))):
        bad = run(env, *command, MEWDEX_EGRESS_ALLOW_HOSTS='["127.0.0.1:9000"')
        assert bad.returncode == 2 and "Traceback" not in bad.stderr
        assert lines(bad.stderr) == [
            "error: MEWDEX_EGRESS_ALLOW_HOSTS='[\"127.0.0.1:9000\"' is not valid (Expecting ',' delimiter: line 1 "
            "column 18 (char 17)); expected e.g. MEWDEX_EGRESS_ALLOW_HOSTS=127.0.0.1:9000,minio.lan:9000"
        ]
