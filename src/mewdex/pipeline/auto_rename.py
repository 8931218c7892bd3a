"""The ``auto_rename`` stage: names a meme from its context title when its job asked for it; and
:func:`readable_name`, the name a meme with a serial or id name gets from its caption (the context stage
and the name repair apply it).

Planned only for jobs with ``auto_name`` (upload option ``auto_name``). It never overwrites a
name a person gave (``name_source = manual``, checked under the meme's row lock at write-back, so
a rename that lands while the stage runs wins), never stores a name that breaks the name rules
(the title is normalized by :func:`~mewdex.library.names.normalize_display_name`; a title with
nothing usable left changes nothing), and allows collisions (names are not identities). The change
bumps the meme's revision and is journaled as a completed ``rename`` storage operation.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import regex
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from mewdex.db.models import Meme, StorageOperation, utcnow
from mewdex.library.names import (
    import_path,
    is_readable_name,
    is_valid_display_name,
    name_for_file,
    name_kind,
    normalize_display_name,
    says_enough,
)
from mewdex.search.near_duplicates import near_duplicates
from mewdex.storage.journal import name_fingerprint

#: A name from a caption keeps this many characters (a long caption is cut on a word/character boundary).
CAPTION_NAME_CHARS = 40
#: OCR lines below this recognition score never name a meme (the context keeps lines from 0.6 for
#: search; a name is shown everywhere, so it takes surer text).
CAPTION_MIN_SCORE = 0.85
#: Namesakes in one folder are numbered ``name 2`` … up to this; past it the name is shared.
MAX_NAMESAKES = 100
_GRAPHEME = regex.compile(r"\X")


class AutoRenameStage:
    """``run``: the normalized context title (or None); ``apply``: set it as an automatic name."""

    name = "auto_rename"

    def run(self, meme) -> dict[str, Any]:
        context = meme.meme_context or {}
        title = context.get("title")
        if isinstance(title, str) and not _named_by_sure_text(title, context):
            return {"name": None}
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


def caption_name(context: dict[str, Any]) -> str | None:
    """A name from what the meme says or shows: its caption (the OCR lines kept by the context with a
    score of :data:`CAPTION_MIN_SCORE` or more, in reading order) when it says enough
    (:func:`~mewdex.library.names.says_enough`: not OCR noise such as ``CONI``), else the vision
    model's title in the meme's language; cut to :data:`CAPTION_NAME_CHARS` and normalized; None when
    neither gives a name made of words."""
    lines = [
        str(line.get("text") or "").strip()
        for line in context.get("ocr_lines") or []
        if isinstance(line, dict) and _score(line) >= CAPTION_MIN_SCORE
    ]
    caption = " ".join(line for line in lines if line)
    vision = context.get("vision") or {}
    titles = ("title_zh", "title_en") if context.get("language") == "zh" else ("title_en", "title_zh")
    candidates = [caption] if says_enough(caption) else []
    for candidate in [*candidates, *(vision.get(k) for k in titles)]:
        if not isinstance(candidate, str) or not candidate.strip():
            continue
        try:
            name = normalize_display_name(_shorten(" ".join(candidate.split())))
        except ValueError:
            continue
        if is_readable_name(name) and sum(ch.isalnum() for ch in name) >= 2:
            return name
    return None


def _named_by_sure_text(title: str, context: dict[str, Any]) -> bool:
    """False when ``title`` is an OCR line (a context without name or folder words takes its longest
    line as title) that is not sure enough to name by: below :data:`CAPTION_MIN_SCORE`, or not saying
    enough (:func:`~mewdex.library.names.says_enough`)."""
    for line in context.get("ocr_lines") or []:
        if isinstance(line, dict) and str(line.get("text") or "").strip() == title.strip():
            return _score(line) >= CAPTION_MIN_SCORE and says_enough(title)
    return True


def _score(line: dict[str, Any]) -> float:
    score = line.get("score", 1.0)  # a line with no score is one a person or a test wrote
    return float(score) if isinstance(score, int | float) else 0.0


def _shorten(text: str) -> str:
    """``text`` cut to :data:`CAPTION_NAME_CHARS` characters: at the last space when there is one in its
    second half (words stay whole), else on a grapheme boundary; ``…`` marks the cut."""
    if len(text) <= CAPTION_NAME_CHARS:
        return text
    kept, size = [], 0
    for cluster in _GRAPHEME.findall(text):
        if size + len(cluster) > CAPTION_NAME_CHARS - 1:
            break
        kept.append(cluster)
        size += len(cluster)
    cut = "".join(kept)
    space = cut.rfind(" ")
    if not text[len(cut)].isspace() and space >= CAPTION_NAME_CHARS // 2:  # a word was cut: drop it
        cut = cut[:space]
    return cut.rstrip(" ,，、.。;；:：-") + "…"


def folder_of(provenance: dict[str, Any] | None) -> str:
    """The folder a meme was imported from (:func:`~mewdex.library.names.import_path`'s parent; ``""`` for
    uploads and files of unknown origin): names are unique within it."""
    parent = PurePosixPath(import_path(provenance)).parent.as_posix()
    return "" if parent == "." else parent


def unique_in_folder(session: Session, meme: Meme, name: str) -> str:
    """``name``, or ``name 2``, ``name 3``… the first that no other meme of the meme's folder has (memes
    that are near-duplicates of it, variants of one template, may share it). Serialised per folder by a
    transaction-scoped advisory lock, so two memes renamed at once never pick the same number."""
    folder = folder_of(meme.provenance)
    session.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(f"names:{meme.scope_id}:{folder}", 0))))
    candidates = [name] + [f"{name} {i}" for i in range(2, MAX_NAMESAKES + 1)]
    candidates = [c for c in candidates if is_valid_display_name(c)]
    rows = session.execute(
        select(Meme.id, Meme.display_name, Meme.provenance).where(
            Meme.scope_id == meme.scope_id, Meme.display_name.in_(candidates), Meme.id != meme.id
        )
    ).all()
    taken = {n for mid, n, provenance in rows if folder_of(provenance) == folder}
    if not taken:
        return name
    t = near_duplicates
    pairs = session.execute(
        select(t.c.meme_id, t.c.duplicate_of).where(
            t.c.scope_id == meme.scope_id, or_(t.c.meme_id == meme.id, t.c.duplicate_of == meme.id)
        )
    ).all()
    variants = {a for pair in pairs for a in pair} - {meme.id}
    taken = {n for mid, n, provenance in rows if folder_of(provenance) == folder and mid not in variants}
    return next((c for c in candidates if c not in taken), name)


def readable_name(session: Session, meme: Meme, *, captioned_only: bool = False) -> str | None:
    """The name ``meme`` should have instead of its current one, or None to keep it: a serial, id or
    generic name (:func:`~mewdex.library.names.name_kind`) becomes its :func:`caption_name` when it has
    one; any name not given by a person is made unique in its folder (:func:`unique_in_folder`). A
    manual name, and a file name made of words, never change (``captioned_only``: only a name from a
    caption, no numbering). An automatic name given in place of a serial or id file name is derived
    again under today's rules (a caption that no longer says enough gives the file's name back), so a
    change of the rules reaches names given before it. Call with the meme's row locked."""
    if meme.name_source == "manual":
        return None
    if not is_readable_name(meme.display_name):
        caption = caption_name(meme.meme_context or {})
        if caption is None and captioned_only:
            return None
        unique = unique_in_folder(session, meme, caption or meme.display_name)
    elif meme.name_source == "automatic" and (original := _serial_file_name(meme)) is not None:
        unique = unique_in_folder(session, meme, caption_name(meme.meme_context or {}) or original)
    elif meme.name_source == "automatic" and not captioned_only:
        unique = unique_in_folder(session, meme, meme.display_name)
        if unique != meme.display_name and (caption := caption_name(meme.meme_context or {})) is not None:
            unique = unique_in_folder(session, meme, caption)  # a namesake: its caption tells it apart
    else:
        return None
    return unique if unique != meme.display_name else None


def _serial_file_name(meme: Meme) -> str | None:
    """The name importing gave the meme (:func:`~mewdex.library.names.name_for_file` of its file and
    folder) when that is a serial or template id (``KumamotoBear00025``, ``037_LuXun``, ``oag``): the
    name an automatic caption name stands in for; None otherwise."""
    path = PurePosixPath(import_path(meme.provenance))
    if not path.name:
        return None
    name, _ = name_for_file(path.name, path.parent.name or None)
    return name if name_kind(name) in ("serial", "id") else None
