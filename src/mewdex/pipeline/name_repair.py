"""The ``meme_name_repair`` task type: give memes named by a generic file stem (``default``, ``IMG_2034``,
a UUID…) a name from meaning — the folder they were imported from, else their context title — and memes
named by a serial or template id (``KumamotoBear00025``, ``oag``) a name from their caption, unique in
their folder (:func:`mewdex.pipeline.auto_rename.readable_name`, as new memes get from the context stage).

For libraries imported before names came from meaning (:func:`mewdex.library.names.name_for_file`). Never
touches a name a person gave (``name_source = manual``, checked under each meme's row lock) nor a name
that already means something; each change is an automatic name, bumps the revision and is journaled
like the ``auto_rename`` stage's. Submit it with :func:`submit_name_repair` (``mewdex repair-names [--all]``);
every start queues it for every library when :data:`NAME_RULES` differs from the one recorded
(``mewdex.runtime.check_name_rules``).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session, sessionmaker

from mewdex.db.models import Meme
from mewdex.library.names import import_path, is_generic_stem, normalize_display_name
from mewdex.pipeline.auto_rename import AutoRenameStage, readable_name
from mewdex.queue.registry import RetryPolicy, TaskContext, submit, task_type

TASK_TYPE = "meme_name_repair"
# The naming rules' version (library.names' generic stems and name kinds, auto_rename.readable_name, this
# module's repair): bump it when they change, and the next start renames every existing library by them.
NAME_RULES = "3"  # 3: a caption names a meme only when it says enough (issue 46, "CONI")


def meaningful_name(meme: Meme) -> str | None:
    """The name a meme with a generic name should have: its import folder's name when that is not
    generic, else its context title; None when neither gives one."""
    relative = import_path(meme.provenance)
    if "/" in relative:
        folder = PurePosixPath(relative).parent.name
        if folder and not is_generic_stem(folder):
            try:
                return normalize_display_name(folder)
            except ValueError:
                pass
    name = AutoRenameStage().run(meme)["name"]
    return name if name and not is_generic_stem(name) else None


def repair_names(sessions: sessionmaker[Session], scope_id: str, *, batch: int = 200) -> dict[str, int]:
    """Rename the scope's generically named, not manually named memes (see module doc), ``batch`` memes
    per transaction, oldest first: first every name that meaning or a caption gives, then the numbers
    that keep the rest apart in their folders. Returns
    ``{"checked": n, "renamed": n}``."""
    checked, renamed = 0, set()
    for numbering in (False, True):
        after = None
        while True:
            with sessions.begin() as session:
                query = select(Meme).where(Meme.scope_id == scope_id, Meme.name_source != "manual")
                if after is not None:
                    query = query.where(tuple_(Meme.created_at, Meme.id) > after)
                # FOR NO KEY UPDATE, as the stages' meme lock: a near-duplicate pair being written (a key-share
                # lock on its older meme) must not wait for this batch, nor this batch for it
                memes = (
                    session.execute(
                        query.order_by(Meme.created_at, Meme.id).limit(batch).with_for_update(key_share=True)
                    )
                    .scalars()
                    .all()
                )
                if not memes:
                    break
                for meme in memes:
                    before = meme.display_name
                    if not numbering:
                        checked += 1
                        if is_generic_stem(meme.display_name):
                            name = meaningful_name(meme)
                            if name is not None and name != meme.display_name:
                                AutoRenameStage().apply(session, meme, {"name": name})
                    # A serial or id name from its caption; then namesakes in one folder numbered.
                    if meme.context_status == "ready" and (
                        name := readable_name(session, meme, captioned_only=not numbering)
                    ):
                        AutoRenameStage().apply(session, meme, {"name": name})
                    if meme.display_name != before:
                        renamed.add(meme.id)
                after = (memes[-1].created_at, memes[-1].id)
    return {"checked": checked, "renamed": len(renamed)}


@task_type(TASK_TYPE, retry=RetryPolicy(max_attempts=3))
def meme_name_repair(ctx: TaskContext) -> dict[str, Any]:
    """Repair the names of the task's scope. ``{"checked": n, "renamed": n}``."""
    return repair_names(ctx.sessions, ctx.claim.scope_id)


def submit_name_repair(session: Session, scope_id: str):
    """Enqueue the scope's name repair (one active at a time); returns the task row."""
    return submit(session, scope_id=scope_id, task_type=TASK_TYPE, payload={}, dedupe_key="meme_name_repair")
