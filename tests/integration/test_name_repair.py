"""The ``meme_name_repair`` task type (issue 19, point 1): memes imported with generic names get names from
meaning; manual names and meaningful names are never touched."""

from __future__ import annotations

import re
from uuid import UUID

import pytest
from sqlalchemy import delete, select

from it_helpers import meme
from mewdex.db.models import Meme, PlatformSetting, Task
from mewdex.library import memes as memes_service
from mewdex.pipeline import name_repair
from mewdex.queue import registry


def _add(sessions, store, scope, data: bytes, filename: str, relative_path: str) -> str:
    result = memes_service.add_image(
        sessions,
        store,
        scope,
        data,
        filename=filename,
        process=False,
        provenance={"source": "folder_import", "relative_path": relative_path},
    )
    assert result.status == "created", result
    return result.meme_id


def test_repair_renames_generic_names_but_never_manual_ones(sessions, store, scope):
    from conftest import case_file

    source = case_file("img04_palette_trns.png").read_bytes()
    # Named as before issue 19 (stem only): simulate by adding without a folder, then set the old name.
    old = _add(sessions, store, scope, source + b"1", "default.jpg", "memegen/images/drake/default.jpg")
    manual = _add(sessions, store, scope, source + b"2", "default.jpg", "memegen/images/ackbar/default.jpg")
    titled = _add(sessions, store, scope, source + b"3", "IMG_2034.jpg", "IMG_2034.jpg")
    meaningful = _add(sessions, store, scope, source + b"4", "yes.jpg", "memegen/images/drake/yes.jpg")
    memes_service.rename(sessions, scope, manual, "default")  # a person chose this name
    with sessions.begin() as session:
        for meme_id in (old, titled):
            row = session.get(Meme, UUID(meme_id))
            row.name_source = "uploaded"
        session.get(Meme, UUID(titled)).meme_context = {"title": "cat judging you"}

    result = name_repair.repair_names(sessions, scope.scope_id)

    assert result == {"checked": 3, "renamed": 2}  # the manual one is not even checked
    assert (meme(sessions, scope, old).display_name, meme(sessions, scope, old).name_source) == ("drake", "automatic")
    assert meme(sessions, scope, titled).display_name == "cat judging you"
    assert (meme(sessions, scope, manual).display_name, meme(sessions, scope, manual).name_source) == (
        "default",
        "manual",
    )
    assert meme(sessions, scope, meaningful).display_name == "yes"
    assert name_repair.repair_names(sessions, scope.scope_id) == {"checked": 3, "renamed": 0}  # idempotent


def test_repair_is_a_registered_task_type(sessions, scope):
    assert name_repair.TASK_TYPE in registry.TASK_TYPES
    with sessions.begin() as session:
        first = name_repair.submit_name_repair(session, scope.scope_id)
        again = name_repair.submit_name_repair(session, scope.scope_id)
        assert first.id == again.id  # one active repair per scope
        tasks = (
            session.execute(
                select(Task).where(Task.scope_id == scope.scope_id, Task.task_type == name_repair.TASK_TYPE)
            )
            .scalars()
            .all()
        )
        assert len(tasks) == 1
        session.delete(tasks[0])


# --- names people can read (issue 35, item 4) ---------------------------------------------------

LUXUN = "chinesebqb/images/037_LuXun"


def _captioned(sessions, store, scope, seed: bytes, relative_path: str, name: str, caption: str | None, **row):
    """A processed meme (context ready) imported from ``relative_path``, named ``name``, whose OCR read ``caption``."""
    from conftest import case_file

    meme_id = _add(
        sessions, store, scope, case_file("img04_palette_trns.png").read_bytes() + seed, "x.png", relative_path
    )
    lines = [{"text": caption, "score": 0.95}] if caption else []
    with sessions.begin() as session:
        m = session.get(Meme, UUID(meme_id))
        m.display_name, m.name_source, m.context_status = name, row.get("name_source", "automatic"), "ready"
        m.meme_context = {"ocr_lines": lines, "ocr_text": caption or "", "language": "zh"}
    return meme_id


def test_serial_names_take_their_caption_and_never_share_one_in_a_folder(sessions, store, scope):
    from mewdex.db.models import MemeNearDuplicate

    said = "我没说过这句话"
    first = _captioned(sessions, store, scope, b"1", f"{LUXUN}/download-1.jpg", "037_LuXun", said)
    second = _captioned(sessions, store, scope, b"2", f"{LUXUN}/download-4.jpg", "037_LuXun", said)
    bare = _captioned(sessions, store, scope, b"3", f"{LUXUN}/images.jpg", "037_LuXun", None)
    bare_too = _captioned(sessions, store, scope, b"4", f"{LUXUN}/0.jpg", "037_LuXun", None)
    variant = _captioned(sessions, store, scope, b"5", f"{LUXUN}/download-5.jpg", "037_LuXun", said)
    elsewhere = _captioned(
        sessions, store, scope, b"6", "other/LuXun00001.jpg", "LuXun00001", said, name_source="uploaded"
    )
    manual = _captioned(sessions, store, scope, b"7", f"{LUXUN}/KumamotoBear00025.jpg", "KumamotoBear00025", said)
    memes_service.rename(sessions, scope, manual, "KumamotoBear00025")
    words = _captioned(sessions, store, scope, b"8", f"{LUXUN}/yes.jpg", "yes", said, name_source="uploaded")
    with sessions.begin() as session:  # a variant of the first meme (same template): it may share its name
        session.add(MemeNearDuplicate(scope_id=scope.scope_id, meme_id=UUID(variant), duplicate_of=UUID(first)))

    name_repair.repair_names(sessions, scope.scope_id)

    def name(meme_id):
        return meme(sessions, scope, meme_id).display_name

    # The oldest keeps the plain name; a variant of it (same template) may share it.
    assert [name(first), name(second), name(variant)] == [said, f"{said} 2", said]
    assert {name(bare), name(bare_too)} == {"037_LuXun", "037_LuXun 2"}  # no caption: numbered, never shared
    assert name(elsewhere) == said  # another folder
    assert (name(manual), name(words)) == ("KumamotoBear00025", "yes")  # a person's name, a name of words
    assert meme(sessions, scope, first).name_source == "automatic"
    assert name_repair.repair_names(sessions, scope.scope_id)["renamed"] == 0  # idempotent


def test_the_context_stage_names_a_serial_from_its_caption_and_a_folder_imported_directly_keeps_its_name(
    sessions, store, scope, tmp_path
):
    """New memes: the context stage's write-back renames ``KumamotoBear00025`` from what it says; a folder
    imported on its own gives its files its name as importing its parent does."""
    import shutil

    from conftest import case_file
    from mewdex.library.importer import collect, import_paths
    from mewdex.pipeline.context import build_meme_context
    from mewdex.pipeline.stages import ContextStage

    bear = tmp_path / "009_KumamotoBear"
    cat = tmp_path / "memegen" / "images" / "grumpycat"
    for folder in (bear, cat):
        folder.mkdir(parents=True)
    shutil.copyfile(case_file("img05_ocr_hello_transparent.png"), bear / "KumamotoBear00025.png")
    shutil.copyfile(case_file("img04_palette_trns.png"), cat / "default.png")
    ids = {}
    for folder in (bear, cat):
        import_paths(
            sessions,
            store,
            scope,
            collect([folder]),
            on_result=lambda item, r: ids.__setitem__(item.path.name, r.meme_id),
        )
    grumpy = meme(sessions, scope, ids["default.png"])
    assert (grumpy.display_name, grumpy.name_source) == ("grumpycat", "automatic")
    assert grumpy.provenance["relative_path"] == "default.png"  # relative to the folder imported, as before

    with sessions.begin() as session:
        for meme_id, lines in ((ids["KumamotoBear00025.png"], ["hello there"]), (ids["default.png"], [])):
            row = session.get(Meme, UUID(meme_id))
            context = build_meme_context(
                relative_path=name_repair.import_path(row.provenance),
                display_name=row.display_name,
                ocr_lines=[{"text": t, "score": 0.99} for t in lines],
            )
            ContextStage().apply(session, row, context)
    named = meme(sessions, scope, ids["KumamotoBear00025.png"])
    assert (named.display_name, named.name_source) == ("hello there", "automatic")
    grumpy = meme(sessions, scope, ids["default.png"])
    assert grumpy.display_name == "grumpycat" and grumpy.meme_context["folders"] == ["grumpycat"]


# --- a change of the naming rules renames existing libraries (issue 35, item 4d) -------------------


@pytest.fixture
def two_named_libraries(sessions, store, scope, monkeypatch):
    """The test's scope and a second one, each with a meme; the repair sees only these two libraries (the
    real list must hold them), so no other test's library is queued for renaming."""
    from conftest import case_file, drop_scope, new_scope

    other = new_scope(sessions, "nr")
    source = case_file("img04_palette_trns.png").read_bytes()
    for i, each in enumerate((scope, other)):
        meme_id = _add(sessions, store, each, source + bytes([i]), "default.jpg", "memegen/images/drake/default.jpg")
        with sessions.begin() as session:  # named by its file's stem, as before the rules read folders
            row = session.get(Meme, UUID(meme_id))
            row.display_name, row.name_source = "default", "uploaded"
    ids = [scope.scope_id, other.scope_id]
    from mewdex.library import listing

    every = listing.library_scopes
    with sessions.begin() as session:
        assert set(ids) <= set(every(session))
    monkeypatch.setattr(listing, "library_scopes", lambda session: [s for s in every(session) if s in ids])
    yield ids
    drop_scope(sessions, other)


def _repair_tasks(sessions, ids) -> list[str]:
    with sessions.begin() as session:
        return sorted(
            session.execute(
                select(Task.scope_id).where(
                    Task.scope_id.in_(ids), Task.task_type == name_repair.TASK_TYPE, Task.status == "queued"
                )
            ).scalars()
        )


def test_a_change_of_the_naming_rules_queues_the_repair_of_every_library_at_start(sessions, two_named_libraries):
    from mewdex.platform.instance import get_setting, set_setting
    from mewdex.runtime import NAME_RULES_SETTING, check_name_rules

    ids = two_named_libraries
    with sessions.begin() as session:
        set_setting(session, NAME_RULES_SETTING, name_repair.NAME_RULES)
    assert check_name_rules() == [] and _repair_tasks(sessions, ids) == [], "unchanged rules queue nothing"

    with sessions.begin() as session:
        set_setting(session, NAME_RULES_SETTING, "rules-of-an-older-release")
    assert sorted(check_name_rules()) == sorted(ids)
    assert _repair_tasks(sessions, ids) == sorted(ids)
    with sessions.begin() as session:
        assert get_setting(session, NAME_RULES_SETTING) == name_repair.NAME_RULES
    assert check_name_rules() == [], "recorded: the next start queues nothing"

    with sessions.begin() as session:  # a library from before the rules had a version is renamed too
        session.execute(delete(Task).where(Task.scope_id.in_(ids), Task.task_type == name_repair.TASK_TYPE))
        session.execute(delete(PlatformSetting).where(PlatformSetting.key == NAME_RULES_SETTING))
    assert sorted(check_name_rules()) == sorted(ids) and _repair_tasks(sessions, ids) == sorted(ids)
    with sessions.begin() as session:
        session.execute(delete(Task).where(Task.scope_id.in_(ids), Task.task_type == name_repair.TASK_TYPE))


def test_repair_names_all_covers_every_library(sessions, two_named_libraries):
    from typer.testing import CliRunner

    from mewdex.cli import app

    ids = two_named_libraries
    result = CliRunner().invoke(app, ["repair-names", "--all", "--background"])
    assert result.exit_code == 0, result.output
    for scope_id in ids:
        assert re.search(rf"{scope_id}: queued task\s+\S+ \(meme_name_repair\)", result.stdout), result.stdout
    assert _repair_tasks(sessions, ids) == sorted(ids)
    with sessions.begin() as session:
        session.execute(delete(Task).where(Task.scope_id.in_(ids), Task.task_type == name_repair.TASK_TYPE))

    result = CliRunner().invoke(app, ["repair-names", "--all"])  # now, in this process
    assert result.exit_code == 0, result.output
    for scope_id in ids:
        assert re.search(rf"{scope_id}: renamed 1 of\s+1 memes", result.stdout), result.stdout
    for scope_id in ids:
        with sessions.begin() as session:
            names = session.execute(select(Meme.display_name).where(Meme.scope_id == scope_id)).scalars().all()
        assert names == ["drake"]


def test_a_caption_of_ocr_noise_names_nothing_and_the_repair_takes_such_names_back(sessions, store, scope):
    """Issue 46: a template was named "CONI" from OCR noise (and then showed up in unrelated results, its
    name being searched as its own field). A caption names a meme only when it is sure text that says
    enough; the rules' version went up, so the repair gives a name from noise back to the file's name,
    or to the caption a confident reading gives."""
    assert name_repair.NAME_RULES == "3"
    noise = _captioned(sessions, store, scope, b"n1", "tpl/KumamotoBear00031.jpg", "CONI", "CONI")
    unsure = _captioned(sessions, store, scope, b"n2", "tpl/KumamotoBear00032.jpg", "hello world", "hello world")
    sure = _captioned(sessions, store, scope, b"n3", "tpl/KumamotoBear00033.jpg", "KumamotoBear00033", "我没说过")
    with sessions.begin() as session:  # "hello world" read at 0.7: kept for search, not sure enough for a name
        row = session.get(Meme, UUID(unsure))
        row.meme_context = {**row.meme_context, "ocr_lines": [{"text": "hello world", "score": 0.7}]}
    with sessions.begin() as session:
        assert session.get(Meme, UUID(unsure)).meme_context["ocr_lines"][0]["score"] == 0.7

    name_repair.repair_names(sessions, scope.scope_id)

    assert meme(sessions, scope, noise).display_name == "KumamotoBear00031"
    assert meme(sessions, scope, unsure).display_name == "KumamotoBear00032"
    assert meme(sessions, scope, sure).display_name == "我没说过"
    assert name_repair.repair_names(sessions, scope.scope_id)["renamed"] == 0  # idempotent
