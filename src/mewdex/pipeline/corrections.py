"""Correcting a meme's text (issue 43): ``PATCH /api/v1/memes/{id}`` with ``{"text": …}`` replaces
what OCR read, keeping the OCR original for the undo (``{"text": null}``), and re-indexes the meme at
once with the pipeline's own writers — the keyword document and postings
(:func:`~mewdex.pipeline.stages.write_keyword_document`), the text vectors of every leg
(:class:`~mewdex.pipeline.stages.TextEmbeddingStage`, run in the request) and a name that came from
the text (:func:`~mewdex.pipeline.auto_rename.readable_name`, the auto-name title) — so the new text
finds the meme at the next search and the old one no longer does. When a text model is unavailable
the vectors are left to a processing job (its ``text_embedding`` stage); the keyword leg is current
either way. A later re-analysis keeps the correction (:class:`~mewdex.pipeline.stages.ContextStage`).
"""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from mewdex.db.models import Meme, ScopeContext, utcnow
from mewdex.dto.memes import MAX_TEXT_CHARS
from mewdex.library import memes
from mewdex.library.memes import MemeError
from mewdex.library.tags import normalize_tags
from mewdex.pipeline.auto_rename import AutoRenameStage, readable_name
from mewdex.pipeline.base import StageError, context_hash
from mewdex.pipeline.context import apply_text_correction
from mewdex.pipeline.stages import TextEmbeddingStage, write_keyword_document
from mewdex.search.tags import set_tags
from mewdex.storage import journal


def checked_text(text: Any) -> str | None:
    """``text`` as a correction: None (undo) or a string of at most :data:`MAX_TEXT_CHARS` characters
    without control characters other than line breaks and tabs (``\\r\\n`` read as ``\\n``).

    Raises MemeError ``text_invalid`` (not a string or null, or a NUL/control character),
    ``text_too_long`` (details ``{"max_chars", "chars"}``)."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise MemeError("text_invalid", "text must be a string, or null to restore what OCR read")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if any(ch < " " and ch not in "\n\t" or ch == "\x7f" for ch in text):
        raise MemeError("text_invalid", "the text contains control characters")
    if len(text) > MAX_TEXT_CHARS:
        raise MemeError(
            "text_too_long",
            f"the text is longer than {MAX_TEXT_CHARS} characters",
            {"max_chars": MAX_TEXT_CHARS, "chars": len(text)},
        )
    return text


def set_text(
    sessions: sessionmaker[Session],
    scope: ScopeContext,
    meme_id,
    text: Any,
    *,
    expected_revision: int | None = None,
) -> int:
    """Set what the live meme ``meme_id`` says to ``text`` (None: back to what OCR read) and re-index it
    (keyword, vectors, a name from its text) in one transaction; returns the new revision.

    Raises:
        MemeError: ``text_invalid`` / ``text_too_long`` (see :func:`checked_text`), ``not_found``,
            ``revision_conflict``, ``text_not_ready`` (the meme has not been analysed yet: there is no
            OCR text to correct), ``operation_in_progress`` (a rename or delete is open).
    """
    text = checked_text(text)
    with sessions.begin() as session:
        meme = memes._locked_meme(session, scope, meme_id)
        _check_correctable(meme, expected_revision)
        if journal.open_operation(session, meme) is not None:
            raise MemeError("operation_in_progress", "the meme is being changed right now; try again in a moment")
        before = meme.meme_context
        after = apply_text_correction(before, text)
        if after == before:
            return meme.revision
        _reindex(session, meme, before, after)
        return meme.revision


#: :func:`edit`'s "no text given" (``None`` is a text: back to what OCR read).
UNCHANGED: Any = object()


def edit(
    sessions: sessionmaker[Session],
    scope: ScopeContext,
    meme_id,
    *,
    name: str | None = None,
    text: Any = UNCHANGED,
    tags: Iterable[object] | None = None,
    expected_revision: int | None = None,
) -> int:
    """Rename, correct the text and/or set the tags of the live meme ``meme_id`` together
    (``PATCH /api/v1/memes/{id}``), all or nothing: every value is checked first (the name rules,
    :func:`checked_text`, :func:`mewdex.library.tags.normalize_tags`), then ONE transaction locks the
    meme, checks ``expected_revision`` against it once, and writes the rename
    (:func:`mewdex.library.memes.rename_locked`, journaled), the text (re-indexed as :func:`set_text`)
    and the tags (:func:`mewdex.search.tags.set_tags`). A concurrent change is a 412-style
    ``revision_conflict`` with nothing written. Returns the new revision (a rename and a changed text
    each count one, as alone).

    Raises:
        MemeError: ``display_name_invalid``, ``text_invalid`` / ``text_too_long``, ``not_found``,
            ``revision_conflict``, ``text_not_ready``, ``operation_in_progress``.
        TagError: the tag rule's codes (``tag_empty``, ``too_many_tags`` …).
    """
    new_name = None if name is None else memes.normalized_name(name)
    new_text = UNCHANGED if text is UNCHANGED else checked_text(text)
    new_tags = None if tags is None else normalize_tags(tags)
    with sessions.begin() as session:
        meme = memes._locked_meme(session, scope, meme_id)
        memes._check_revision(meme, expected_revision)
        if new_text is not UNCHANGED:
            _check_correctable(meme, None)
        if journal.open_operation(session, meme) is not None:
            raise MemeError("operation_in_progress", "the meme is being changed right now; try again in a moment")
        if new_name is not None:
            memes.rename_locked(session, meme, new_name)
        if new_text is not UNCHANGED:
            before = meme.meme_context
            after = apply_text_correction(before, new_text)
            if after != before:
                _reindex(session, meme, before, after)
        if new_tags is not None:
            set_tags(session, scope, meme.id, new_tags)
        return meme.revision


def check_correctable(
    sessions: sessionmaker[Session], scope: ScopeContext, meme_id, *, expected_revision: int | None = None
) -> None:
    """What :func:`set_text` checks before it writes (``not_found``, ``revision_conflict``,
    ``text_not_ready``), asked first by a request that also renames or tags, so that a text that cannot
    be set leaves the rest unwritten too."""
    with sessions.begin() as session:
        _check_correctable(memes._locked_meme(session, scope, meme_id), expected_revision)


def _check_correctable(meme: Meme, expected_revision: int | None) -> None:
    memes._check_revision(meme, expected_revision)
    if meme.context_status != "ready" or not meme.meme_context:
        raise MemeError("text_not_ready", "the meme has not been analysed yet; correct its text afterwards")


def _reindex(session: Session, meme: Meme, before: dict[str, Any], after: dict[str, Any]) -> None:
    """Store the corrected context and re-index the meme as the pipeline's stages do."""
    meme.meme_context = after
    meme.search_metadata_hash = context_hash(after)
    meme.revision += 1
    meme.updated_at = utcnow()
    if meme.name_source == "automatic":  # named after the old text's title (auto-name): after the new one
        stage = AutoRenameStage()
        if stage.run(SimpleNamespace(meme_context=before))["name"] == meme.display_name:
            stage.apply(session, meme, stage.run(SimpleNamespace(meme_context=after)))
    if (name := readable_name(session, meme)) is not None:  # a serial or id name follows its caption
        AutoRenameStage().apply(session, meme, {"name": name})
    write_keyword_document(session, meme)
    embedding = TextEmbeddingStage()
    try:
        output = embedding.run(SimpleNamespace(meme_context=after))  # type: ignore[arg-type]
    except StageError:  # a text model is unavailable: a processing job embeds the new text later
        memes.processing_submitter()(session, meme, auto_name=False, batch_id=None, new_meme=False)
        return
    embedding.apply(session, meme, output)
