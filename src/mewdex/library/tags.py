"""Tags (issue 43): the tag-name rule and the reads of ``meme_tags``.

A tag name is normalised by :func:`normalize_tag` (the one rule every path applies: API, pages, bulk
edits, rename and merge): Unicode NFKC, format characters removed, runs of white space made one space,
trimmed, lower case (Latin and every other cased script; Han characters stay as typed), at most
:data:`MAX_TAG_CHARS` characters, no control characters, no ``"`` (the search syntax quotes names with
it: ``tag:"two words"``) and no ``,`` (the pages' list separator). A meme holds at most
:data:`MAX_TAGS_PER_MEME` tags. Writes (which re-index the keyword leg at once) are in
:mod:`mewdex.search.tags`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from uuid import UUID

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mewdex.db.models import Meme, MemeTag, ScopeContext
from mewdex.dto.errors import DomainError, strip_format_characters
from mewdex.library.live import live

MAX_TAG_CHARS = 64
MAX_TAGS_PER_MEME = 50
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_FORBIDDEN = ('"', ",")


class TagError(DomainError):
    """A refused tag or tag change: ``tag_empty``, ``tag_too_long``, ``tag_invalid`` (a control
    character, ``"`` or ``,``), ``too_many_tags`` (details: ``limit``), ``not_found``."""


def fold_tag(value: str) -> str:
    """The comparable form of a tag name without its checks (NFKC, format characters out, white space
    collapsed, trimmed, lower case): what a search's ``tag:NAME`` looks up (a name no tag can have
    then simply matches nothing)."""
    value = strip_format_characters(unicodedata.normalize("NFKC", value))
    return " ".join(value.split()).lower()


def normalize_tag(value: object) -> str:
    """The stored form of a tag name (:func:`fold_tag`), checked. Raises :class:`TagError`
    ``tag_invalid`` (not a string, a control character, ``"`` or ``,``), ``tag_empty``,
    ``tag_too_long`` (over :data:`MAX_TAG_CHARS` characters after normalising)."""
    if not isinstance(value, str):
        raise TagError("tag_invalid", "a tag is a string")
    if _CONTROL.search(value.replace("\t", " ").replace("\n", " ")):
        raise TagError("tag_invalid", "a tag cannot contain control characters", {"tag": value[:100]})
    tag = fold_tag(value)
    if not tag:
        raise TagError("tag_empty", "a tag cannot be empty")
    if any(ch in tag for ch in _FORBIDDEN):
        raise TagError("tag_invalid", 'a tag cannot contain " or ,', {"tag": tag[:100]})
    if len(tag) > MAX_TAG_CHARS:
        raise TagError("tag_too_long", f"a tag is at most {MAX_TAG_CHARS} characters", {"tag": tag[:100]})
    return tag


def normalize_tags(values: Iterable[object], *, limit: int | None = MAX_TAGS_PER_MEME) -> list[str]:
    """Each of ``values`` normalised (:func:`normalize_tag`), duplicates dropped (first kept); more than
    ``limit`` distinct tags raise ``too_many_tags``."""
    tags = list(dict.fromkeys(normalize_tag(v) for v in values))
    if limit is not None and len(tags) > limit:
        raise TagError("too_many_tags", f"a meme has at most {limit} tags", {"limit": limit})
    return tags


def of_memes(session: Session, scope_id: str, meme_ids: Iterable[UUID]) -> dict[UUID, list[str]]:
    """``{meme_id: its tags, sorted}`` for those of ``meme_ids`` that have tags (one statement)."""
    ids = list(meme_ids)
    if not ids:
        return {}
    out: dict[UUID, list[str]] = {}
    rows = session.execute(
        select(MemeTag.meme_id, MemeTag.tag)
        .where(MemeTag.scope_id == scope_id, MemeTag.meme_id.in_(ids))
        .order_by(MemeTag.meme_id, MemeTag.tag)
    )
    for meme_id, tag in rows:
        out.setdefault(meme_id, []).append(tag)
    return out


def counts(session: Session, scope: ScopeContext, *, prefix: str = "", limit: int = 1000) -> list[tuple[str, int]]:
    """``[(tag, live memes with it)]`` of the scope, most used first, then by name (a meme in the trash
    keeps its tags but is not counted: :func:`mewdex.library.live.live`); ``prefix``: only tags starting
    with it (folded as tags are)."""
    query = (
        select(MemeTag.tag, func.count())
        .join(Meme, (Meme.scope_id == MemeTag.scope_id) & (Meme.id == MemeTag.meme_id))
        .where(MemeTag.scope_id == scope.scope_id, live())
        .group_by(MemeTag.tag)
        .order_by(func.count().desc(), MemeTag.tag)
        .limit(limit)
    )
    if prefix.strip():
        folded = fold_tag(prefix)
        query = query.where(func.left(MemeTag.tag, len(folded)) == folded)
    return [(tag, int(n)) for tag, n in session.execute(query)]


def memes_tagged(session: Session, scope_id: str, tag: str, *, include_trashed: bool = False) -> list[UUID]:
    """The ids of the scope's live memes tagged ``tag`` (a stored, normalised name); with
    ``include_trashed`` those in the trash too (a tag rename moves their tags along)."""
    query = (
        select(MemeTag.meme_id)
        .join(Meme, (Meme.scope_id == MemeTag.scope_id) & (Meme.id == MemeTag.meme_id))
        .where(MemeTag.scope_id == scope_id, MemeTag.tag == tag)
        .order_by(MemeTag.meme_id)
    )
    if not include_trashed:
        query = query.where(live())
    return list(session.execute(query).scalars())
