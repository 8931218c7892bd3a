"""The auto_rename stage: planned only for jobs with auto_name, names the meme from its context title
through the real pipeline, and keeps to the rules (never over a manual name, never an invalid name,
collisions allowed)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from it_helpers import stage_states
from library_helpers import png
from mewdex.db.models import Meme, StorageOperation
from mewdex.library import memes
from mewdex.library.names import is_valid_display_name
from mewdex.pipeline.auto_rename import AutoRenameStage
from mewdex.pipeline.stages import MemeSnapshot, load_meme


def add(sessions, store, scope, seed: int, filename: str, auto_name: bool) -> str:
    result = memes.add_image(
        sessions,
        store,
        scope,
        png(seed),
        filename=filename,
        provenance={"relative_path": filename},
        auto_name=auto_name,
    )
    assert result.status == "created"
    return result.meme_id


def test_auto_name_runs_the_stage_after_agent_and_names_from_the_title(sessions, store, scope, drain):
    named = add(sessions, store, scope, 1, "grumpycat.png", auto_name=True)
    plain = add(sessions, store, scope, 2, "hello_world.png", auto_name=False)
    drain(scope)
    assert stage_states(sessions, scope, named) == {
        "visual": "succeeded",
        "agent": "succeeded",
        "auto_rename": "succeeded",
        "text_embedding": "succeeded",
    }
    assert "auto_rename" not in stage_states(sessions, scope, plain)
    with sessions.begin() as session:
        meme = session.get(Meme, named)
        assert (meme.display_name, meme.name_source, meme.revision) == ("grumpy cat", "automatic", 2)
        assert meme.meme_context["title"] == "grumpy cat"
        other = session.get(Meme, plain)
        assert (other.display_name, other.name_source) == ("hello_world", "uploaded")
        op = session.execute(
            select(StorageOperation).where(
                StorageOperation.meme_id == meme.id, StorageOperation.operation_type == "rename"
            )
        ).scalar_one()
        assert op.status == "completed" and op.expected_revision == 1


def run_stage(sessions, scope, meme_id, title) -> Meme:
    """Run the stage like the worker: snapshot → run → apply under the row lock."""
    stage = AutoRenameStage()
    with sessions.begin() as session:
        meme = session.get(Meme, meme_id)
        snap = MemeSnapshot(
            meme.scope_id, meme.id, meme.sha256, meme.display_name, dict(meme.provenance), {"title": title}, lambda: b""
        )
    output = stage.run(snap)
    with sessions.begin() as session:
        stage.apply(session, load_meme(session, scope.scope_id, meme_id), output)
    with sessions.begin() as session:
        meme = session.get(Meme, meme_id)
        session.expunge(meme)
        return meme


def test_a_manual_name_is_never_overwritten(sessions, store, scope):
    meme_id = add(sessions, store, scope, 3, "x.png", auto_name=False)
    memes.rename(sessions, scope, meme_id, "my own name")
    meme = run_stage(sessions, scope, meme_id, "the analyzer's title")
    assert (meme.display_name, meme.name_source, meme.revision) == ("my own name", "manual", 2)


@pytest.mark.parametrize("title", ["", "   ", "..", ".png", " . ", "\x00\x01", None, 42])
def test_a_title_that_breaks_the_rules_changes_nothing(sessions, store, scope, title):
    meme_id = add(sessions, store, scope, 4, "keep me.png", auto_name=False)
    meme = run_stage(sessions, scope, meme_id, title)
    assert (meme.display_name, meme.name_source, meme.revision) == ("keep me", "uploaded", 1)


@pytest.mark.parametrize(
    "title,expected",
    [
        ("a/b\\c", "a_b_c"),
        ("cat.gif", "cat"),
        ("  line\nbreak  ", "line break"),
        ("长" * 300, "长" * 85),
    ],
)
def test_the_title_is_normalized_under_the_name_rules(sessions, store, scope, title, expected):
    meme_id = add(sessions, store, scope, 5, "x.png", auto_name=False)
    meme = run_stage(sessions, scope, meme_id, title)
    assert meme.display_name == expected and is_valid_display_name(meme.display_name)
    assert meme.name_source == "automatic"


def test_collisions_are_allowed(sessions, store, scope):
    ids = [add(sessions, store, scope, 10 + i, f"{i}.png", auto_name=False) for i in range(2)]
    names = {run_stage(sessions, scope, meme_id, "same title").display_name for meme_id in ids}
    assert names == {"same title"}
