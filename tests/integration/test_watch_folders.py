"""Watched folders (issue 42, item 3): ``mewdex serve`` with ``MEWDEX_WATCH_DIRS`` imports what lay in the
folder at start and each new file, a rename keeps the meme (no second one), a removal marks it missing on
its page (never deletes it), and ``DIR=email`` fills that account's library; ``mewdex watch`` does the same
in the foreground."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess

import pytest
from sqlalchemy import select

from accounts_helpers import delete_users, own_scope_users, png
from conftest import MEWDEX_BIN, drop_scope, new_scope, wait_until
from mewdex.db.models import Meme
from ui_helpers import start_server


def memes_with(sessions, data: bytes) -> list[Meme]:
    digest = hashlib.sha256(data).hexdigest()
    with sessions.begin() as session:
        return list(session.execute(select(Meme).where(Meme.sha256 == digest)).scalars())


def watch_of(meme: Meme) -> dict:
    return (meme.extensions or {}).get("watch") or {}


@pytest.fixture(scope="module")
def watched(mewdex_env, sessions, tmp_path_factory):
    """``(server, folder, scope, account_folder, account_scope_id)``: ``mewdex serve`` watching two folders,
    one for the default library (a file already there before it starts) and one assigned to an account."""
    folder = tmp_path_factory.mktemp("watched")
    theirs = tmp_path_factory.mktemp("watched-theirs")
    (folder / "before.png").write_bytes(png(9001, 16))
    with sessions.begin() as session:
        (user,), made = own_scope_users(session, ["watcher"], role="user")
        email, account_scope = user.email, user.scope_id
    scope = new_scope(sessions, "t-watch")
    server = start_server(
        mewdex_env,
        scope,
        tmp_path_factory.mktemp("serve") / "serve.log",
        env={"MEWDEX_WATCH_DIRS": f"{folder}, {theirs}={email}"},
    )
    try:
        yield server, folder, scope, theirs, account_scope
    finally:
        server.stop()
        delete_users(sessions, made)
        drop_scope(sessions, scope)


def test_a_watched_folder_imports_new_files_keeps_renamed_ones_and_marks_removed_ones_missing(watched, sessions):
    server, folder, scope, theirs, account_scope = watched
    # what lay there before the server started: the start-up rescan
    wait_until(lambda: memes_with(sessions, png(9001, 16)), 60, 0.2, "the rescan to import before.png")

    data = png(9002, 16)
    (folder / "sub").mkdir()
    (folder / "sub" / "new.png").write_bytes(data)
    wait_until(lambda: memes_with(sessions, data), 60, 0.2, "the new file to be imported")
    (meme,) = memes_with(sessions, data)
    assert meme.scope_id == scope.scope_id and watch_of(meme)["path"] == "sub/new.png"

    (folder / "sub" / "new.png").rename(folder / "renamed.png")
    wait_until(
        lambda: watch_of(memes_with(sessions, data)[0]).get("path") == "renamed.png", 60, 0.2, "the rename to be seen"
    )
    (again,) = memes_with(sessions, data)  # the same meme, no second one
    assert again.id == meme.id and watch_of(again)["missing_since"] is None

    (folder / "renamed.png").unlink()
    wait_until(lambda: watch_of(memes_with(sessions, data)[0]).get("missing_since"), 60, 0.2, "the removal")
    assert [m.id for m in memes_with(sessions, data)] == [meme.id]  # marked, never deleted
    page = server.get(f"/memes/{meme.id}")
    assert page.status_code == 200 and "data-missing" in page.text and "missing from the folder" in page.text
    shape = server.get(f"/api/v1/memes/{meme.id}").json()["watched_file"]
    assert shape["path"] == "renamed.png" and shape["missing_since"] and shape["folder"] == str(folder.resolve())

    # a folder assigned to an account: its library
    mine = png(9003, 16)
    (theirs / "mine.png").write_bytes(mine)
    wait_until(lambda: memes_with(sessions, mine), 60, 0.2, "the account's file to be imported")
    assert [m.scope_id for m in memes_with(sessions, mine)] == [account_scope]


def test_mewdex_watch_in_the_foreground(mewdex_env, sessions, scope, tmp_path):
    folder = tmp_path / "fg"
    folder.mkdir()
    env = {**os.environ, **mewdex_env.env, "MEWDEX_DEFAULT_SCOPE": scope.scope_id, "NO_COLOR": "1"}
    log = (tmp_path / "watch.log").open("w")
    process = subprocess.Popen(
        [str(MEWDEX_BIN), "watch", str(folder)],
        env=env,
        stdout=log,
        stderr=log,
        # Ctrl-C as a terminal sends it: a runner started in the background (no job control) ignores
        # SIGINT, its children inherit that, and Python then never turns SIGINT into KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        wait_until(lambda: "watching" in (tmp_path / "watch.log").read_text(), 60, 0.1, "mewdex watch to start")
        data = png(9004, 16)
        (folder / "fg.png").write_bytes(data)
        wait_until(lambda: memes_with(sessions, data), 60, 0.2, "mewdex watch to import the file")
        assert memes_with(sessions, data)[0].scope_id == scope.scope_id
        # it says so once the import has committed: Ctrl-C right after the commit could come first
        said = f"created {folder / 'fg.png'}"
        wait_until(lambda: said in (tmp_path / "watch.log").read_text(), 30, 0.1, "mewdex watch to say what it created")
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode == 0, (tmp_path / "watch.log").read_text()
    bad = subprocess.run(
        [str(MEWDEX_BIN), "watch", str(tmp_path / "nowhere")], env=env, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "is not a folder" in bad.stderr and "Traceback" not in bad.stderr


def test_a_folder_of_a_disabled_account_imports_nothing(sessions, store, tmp_path):
    """``DIR=email`` of a disabled account (``MEWDEX_WATCH_DIRS`` as ``serve`` resolves it): the start-up
    rescan and a burst of events import nothing for it and mark nothing missing; enabled again, the next
    rescan imports what lies there."""
    from mewdex.library import watch
    from mewdex.platform.users import set_disabled

    folder = tmp_path / "off"
    folder.mkdir()
    data = png(9005, 16)
    (folder / "while-off.png").write_bytes(data)
    with sessions.begin() as session:
        (user,), made = own_scope_users(session, ["disabled-watcher"], role="user")
        (entry,) = watch.resolve(session, [f"{folder}={user.email}"])
        set_disabled(session, user, True)
    try:
        assert watch.rescan(sessions, store, entry) == {"checked": 0, "imported": 0, "missing": 0}
        assert watch.apply_changes(sessions, store, entry, [folder / "while-off.png"], []) == []
        assert watch.sync_file(sessions, store, entry, folder / "while-off.png") is None
        assert memes_with(sessions, data) == []
        with sessions.begin() as session:
            set_disabled(session, session.merge(user), False)
        assert watch.rescan(sessions, store, entry)["imported"] == 1  # the same folder, enabled: it imports
        assert [m.scope_id for m in memes_with(sessions, data)] == [entry.scope.scope_id]
    finally:
        delete_users(sessions, made)
