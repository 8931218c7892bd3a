"""``mewdex import`` into a server (issue 42, item 4): a real ``mewdex serve`` with sign-in required and two
accounts; the files land in the signed-in account's library (never the other's, never the default one), a
second run sends nothing, an interrupted run resumes, and ``POST /api/v1/memes/known`` answers only for the
caller's own memes."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess

import httpx
import pytest
from sqlalchemy import func, select

from accounts_helpers import PASSWORD, delete_users, own_scope_users, png
from conftest import MEWDEX_BIN, drop_scope, new_scope, wait_until
from mewdex.db.models import Meme
from ui_helpers import start_server


@pytest.fixture(scope="module")
def served(mewdex_env, sessions, tmp_path_factory):
    """``(server, env, accounts)``: ``mewdex serve`` with sign-in required, no workers; two accounts
    ``{"email", "scope_id", "user"}`` with libraries of their own."""
    from mewdex.platform.tokens import create_token

    with sessions.begin() as session:
        users, made = own_scope_users(session, ["owner", "other"], PASSWORD, role="user")
        accounts = [{"email": u.email, "scope_id": u.scope_id} for u in users]
        for account, user in zip(accounts, users, strict=True):
            account["token"] = create_token(session, user, "test import")[1]
    config = tmp_path_factory.mktemp("config")
    extra = {"MEWDEX_AUTH": "required", "MEWDEX_BCRYPT_ROUNDS": "4"}
    placeholder = new_scope(sessions, "t-import-remote")
    server = start_server(mewdex_env, placeholder, tmp_path_factory.mktemp("serve") / "serve.log", env=extra)
    env = {**os.environ, **mewdex_env.env, **extra, "XDG_CONFIG_HOME": str(config), "COLUMNS": "250", "NO_COLOR": "1"}
    for name in ("MEWDEX_TOKEN", "MEWDEX_SERVER"):
        env.pop(name, None)
    try:
        yield server, env, accounts
    finally:
        server.stop()
        delete_users(sessions, made)
        drop_scope(sessions, placeholder)


def mewdex(env: dict, *args: str, stdin: str | None = None, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(MEWDEX_BIN), *args], env={**env, **extra}, input=stdin, capture_output=True, text=True, timeout=180
    )


def folder(path, seeds) -> dict[str, str]:
    """PNG files in ``path/memes`` (three in ``path/memes/cats``: a folder collection); ``{sha256: name}``."""
    (path / "memes" / "cats").mkdir(parents=True)
    made = {}
    for i, seed in enumerate(seeds):
        name = f"cats/cat{seed}.png" if i < 3 else f"pic{seed}.png"
        data = png(seed, 16)
        (path / "memes" / name).write_bytes(data)
        made[hashlib.sha256(data).hexdigest()] = name
    (path / "memes" / "notes.txt").write_text("not an image")
    return made


def scopes_of(sessions, digests) -> dict[str, int]:
    with sessions.begin() as session:
        rows = session.execute(
            select(Meme.scope_id, func.count()).where(Meme.sha256.in_(list(digests))).group_by(Meme.scope_id)
        ).all()
    return {scope_id: n for scope_id, n in rows}


def uploads(server) -> float:
    """Upload requests the server answered so far (its ``/metrics``, readable from this machine)."""
    text = httpx.get(server.url + "/metrics", timeout=10).text
    found = re.findall(r'mewdex_http_requests_total\{[^}]*method="POST"[^}]*route="/api/v1/memes"[^}]*\} (\S+)', text)
    return sum(float(n) for n in found)


def test_import_after_login_fills_that_accounts_library_and_a_second_run_sends_nothing(served, sessions, tmp_path):
    server, env, (owner, _other) = served
    made = folder(tmp_path, range(1, 7))
    # `mewdex login` to this data dir's server: a plain `mewdex import` then goes to that account's library
    signed_in = mewdex(env, "login", owner["email"], stdin=PASSWORD + "\n")
    assert signed_in.returncode == 0, signed_in.stderr

    first = mewdex(env, "import", str(tmp_path / "memes"))
    assert first.returncode == 0, first.stdout + first.stderr
    summary = "6 created · 0 duplicates · 0 skipped · 1 ignored (not images, clips or stickers)"
    assert summary in first.stdout, first.stdout
    assert scopes_of(sessions, made) == {owner["scope_id"]: 6}  # that account's library, nobody else's
    with sessions.begin() as session:
        memes = session.execute(select(Meme).where(Meme.scope_id == owner["scope_id"])).scalars().all()
        paths = {m.provenance["relative_path"] for m in memes}
    assert "cats/cat1.png" in paths and "memes/pic4.png" in paths  # the paths a local import keeps
    listed = httpx.get(
        server.url + "/api/v1/collections", headers={"Authorization": f"Bearer {owner['token']}"}, timeout=10
    ).json()["collections"]
    assert [(c["name"], c["item_count"]) for c in listed] == [("cats", 3)]

    sent = uploads(server)
    again = mewdex(env, "import", str(tmp_path / "memes"))
    assert again.returncode == 0, again.stderr
    assert "0 created · 6 duplicates · 0 skipped" in again.stdout, again.stdout
    assert uploads(server) == sent  # hashes first: not one file was sent again
    assert scopes_of(sessions, made) == {owner["scope_id"]: 6}


def test_an_interrupted_import_resumes_with_the_rest(served, sessions, tmp_path):
    server, env, (_owner, other) = served
    made = folder(tmp_path, range(100, 160))
    command = [str(MEWDEX_BIN), "import", str(tmp_path / "memes"), "--server", server.url]
    process = subprocess.Popen(
        command, env={**env, "MEWDEX_TOKEN": other["token"]}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_until(lambda: scopes_of(sessions, made).get(other["scope_id"], 0) >= 3, 60, 0.02, "the first uploads")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    stored = scopes_of(sessions, made).get(other["scope_id"], 0)
    assert 3 <= stored < len(made), "the import ended before it was interrupted"

    resumed = mewdex(env, "import", str(tmp_path / "memes"), "--server", server.url, MEWDEX_TOKEN=other["token"])
    assert resumed.returncode == 0, resumed.stderr
    created = int(re.search(r"(\d+) created", resumed.stdout).group(1))
    duplicates = int(re.search(r"(\d+) duplicates", resumed.stdout).group(1))
    assert created + duplicates == len(made) and duplicates >= stored, resumed.stdout
    assert scopes_of(sessions, made) == {other["scope_id"]: len(made)}  # each file once


def test_known_hashes_answer_only_for_the_callers_library(served):
    server, _env, (owner, other) = served
    data = png(7001, 16)
    digest = hashlib.sha256(data).hexdigest()
    headers = {"Authorization": f"Bearer {other['token']}"}
    ask = {"sha256": [digest.upper(), "0" * 64]}
    assert httpx.post(server.url + "/api/v1/memes/known", json=ask, headers=headers).json() == {"known": []}
    uploaded = httpx.post(server.url + "/api/v1/memes", files={"files": ("a.png", data)}, headers=headers).json()
    meme_id = uploaded["results"][0]["meme"]["id"]
    assert httpx.post(server.url + "/api/v1/memes/known", json=ask, headers=headers).json() == {
        "known": [{"sha256": digest, "meme_id": meme_id}]
    }
    # in the trash it is not known: an import sends it again, and the upload brings it back
    assert httpx.delete(server.url + f"/api/v1/memes/{meme_id}", headers=headers).status_code == 204
    assert httpx.post(server.url + "/api/v1/memes/known", json=ask, headers=headers).json() == {"known": []}
    again = httpx.post(server.url + "/api/v1/memes", files={"files": ("a.png", data)}, headers=headers).json()
    assert again["results"][0]["meme"]["id"] == meme_id
    assert httpx.post(server.url + "/api/v1/memes/known", json=ask, headers=headers).json() == {
        "known": [{"sha256": digest, "meme_id": meme_id}]
    }
    theirs = {"Authorization": f"Bearer {owner['token']}"}  # another account: not known to it
    assert httpx.post(server.url + "/api/v1/memes/known", json=ask, headers=theirs).json() == {"known": []}
    bad = httpx.post(server.url + "/api/v1/memes/known", json={"sha256": ["not hex"]}, headers=headers)
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"
    assert httpx.post(server.url + "/api/v1/memes/known", json=ask).status_code == 401
