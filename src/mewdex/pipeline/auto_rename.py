"""The ``auto_rename`` stage: names a meme from its context title when its job asked for it.

Planned only for jobs with ``auto_name`` (upload option ``auto_name``). It never overwrites a
name a person gave (``name_source = manual``, checked under the meme's row lock at write-back, so
a rename that lands while the stage runs wins), never stores a name that breaks the name rules
(the title is normalized by :func:`~mewdex.library.names.normalize_display_name`; a title with
nothing usable left changes nothing), and allows collisions (names are not identities). The change
bumps the meme's revision and is journaled as a completed ``rename`` storage operation.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from mewdex.db.models import Meme, StorageOperation, utcnow
from mewdex.library.names import is_valid_display_name, normalize_display_name
from mewdex.storage.journal import name_fingerprint


class AutoRenameStage:
    """``run``: the normalized context title (or None); ``apply``: set it as an automatic name."""

    name = "auto_rename"

    def run(self, meme) -> dict[str, Any]:
        title = (meme.meme_context or {}).get("title")
        try:
            name = normalize_display_name(title) if isinstance(title, str) else None
        except ValueError:
            name = None
        return {"name": name if name is not None and is_valid_display_name(name) else None}

    def apply(self, session: Session, meme: Meme, output: dict[str, Any]) -> None:
        name = output.get("name")
        if meme is None or name is None or meme.name_source == "manual" or name == meme.display_name:
            return
        session.add(
            StorageOperation(
                scope_id=meme.scope_id,
                meme_id=meme.id,
                operation_type="rename",
                source_key=meme.storage_key,
                target_key=meme.storage_key,
                expected_revision=meme.revision,
                after_sha256=meme.sha256,
                expected_title_fingerprint=name_fingerprint(name),
                status="completed",
            )
        )
        meme.display_name = name
        meme.name_source = "automatic"
        meme.revision += 1
        meme.updated_at = utcnow()
