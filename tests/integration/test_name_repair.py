"""The ``meme_name_repair`` task type (issue 19, point 1): memes imported with generic names get names from
meaning; manual names and meaningful names are never touched."""

from __future__ import annotations

from uuid import UUID

from sqlalchemy import select

from it_helpers import meme
from mewdex.db.models import Meme, Task
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
