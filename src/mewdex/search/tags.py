"""Tags in search (issue 43): the one parser of ``tag:NAME`` / ``-tag:NAME`` in a search text, and the
tag writes, which re-index the memes' keyword documents in the same transaction (a tag is a word of
the keyword leg: :func:`mewdex.search.documents.keyword_document`).

* :func:`parse_query` — every search surface gets it through :func:`mewdex.search.service.search`.
* :func:`set_tags` (``PATCH /api/v1/memes/{id}``, the detail page), :func:`bulk_edit`
  (``POST /api/v1/memes/tags``), :func:`rename_tag` (rename, or merge into an existing tag).
* :func:`suggestions` — tags a meme could have from what the pipeline already knows: the folder it was
  imported from, the visual model's labels, words of its text (the keyword leg's tokeniser), each
  once and none it has (``GET /api/v1/memes/{id}/tag-suggestions``, the detail page's chips).

The name rule and the reads are :mod:`mewdex.library.tags`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from uuid import UUID

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.db.models import Meme, MemeTag, ScopeContext
from mewdex.inference import visual_model
from mewdex.library import tags as library_tags
from mewdex.library.generic_words import GENERIC_NAMES
from mewdex.library.listing import live
from mewdex.library.tags import MAX_TAGS_PER_MEME, TagError, fold_tag, normalize_tag, normalize_tags
from mewdex.search import keyword
from mewdex.search import text as search_text
from mewdex.search.documents import context_hash, keyword_document

__all__ = [
    "TagError",
    "TagQuery",
    "Suggestion",
    "fold_tag",
    "parse_query",
    "set_tags",
    "bulk_edit",
    "rename_tag",
    "reindex",
    "suggestions",
]

#: ``tag:NAME``, ``-tag:NAME``, ``tag:"two words"`` (also ``标签:`` and a full-width colon or curly
#: quotes), standing as a word of its own.
_TAG_TOKEN = re.compile(
    r'(?<!\S)(?P<neg>[-－]?)(?:tag|标签)[:：](?:"(?P<q>[^"]*)"|“(?P<cq>[^”]*)”|(?P<bare>[^\s"“]+))',
    re.IGNORECASE,
)
MAX_QUERY_TAGS = 10


@dataclass(frozen=True)
class TagQuery:
    """A search text read for tags: ``text`` (the other words, to rank by), ``tags`` (every one
    required) and ``not_tags`` (none allowed), folded as tags are stored."""

    text: str
    tags: tuple[str, ...] = ()
    not_tags: tuple[str, ...] = ()

    @property
    def has_tags(self) -> bool:
        return bool(self.tags or self.not_tags)

    def tag_words(self) -> str:
        """The tag words alone, written back as a search reads them (``tag:"a b" -tag:c``): for a
        caller that rewrites the other words (the chat's phrasing stripped) and keeps the tags."""
        return " ".join([*(f'tag:"{t}"' for t in self.tags), *(f'-tag:"{t}"' for t in self.not_tags)])


def parse_query(query: str) -> TagQuery:
    """Read ``tag:NAME`` / ``-tag:NAME`` (quoted names too) out of a search text; the rest, its white
    space collapsed, is ``text``. A name is folded (:func:`mewdex.library.tags.fold_tag`) and never an
    error: one no tag can have matches nothing. ``tag:`` with no name stays a word of the text. At most
    :data:`MAX_QUERY_TAGS` of each kind count (the rest are dropped)."""
    tags: list[str] = []
    not_tags: list[str] = []

    def take(match: re.Match[str]) -> str:
        raw = next((g for g in (match["q"], match["cq"], match["bare"]) if g is not None), "")
        name = fold_tag(raw)
        if name:
            (not_tags if match["neg"] else tags).append(name)
        return " "

    rest = _TAG_TOKEN.sub(take, query)
    return TagQuery(
        text=" ".join(rest.split()),
        tags=tuple(dict.fromkeys(tags))[:MAX_QUERY_TAGS],
        not_tags=tuple(dict.fromkeys(not_tags))[:MAX_QUERY_TAGS],
    )


# ------------------------------------------------------------------------------------- suggestions

#: At most this many suggestions of each source (folder, labels, caption words).
SUGGESTIONS_PER_SOURCE = 4
#: Caption words that say nothing as a tag (after folding): pronouns, particles, the commonest words.
_FILLER = frozenset(
    """
    the and you your yours are was were for not but with this that what when who how why have has had
    just all can will its it's i'm don't dont get got too very from they them their our out about then
    我们 你们 他们 她们 自己 什么 怎么 这个 那个 这样 那样 就是 还是 不是 没有 一个 一下 可以 因为 所以
    但是 如果 然后 已经 现在 真的 知道 觉得 这么 那么 为什么
    """.split()
)


@dataclass(frozen=True)
class Suggestion:
    """A tag a meme could have: ``name`` (normalised as tags are) and where it came from: ``folder``,
    ``label`` (the visual model) or ``caption`` (a word of its text)."""

    name: str
    source: str


def source_folder(meme: Meme) -> str | None:
    """The name of the folder the meme's file came from — a folder import's or upload's
    ``provenance.relative_path`` (its parent, else the import root's name), a watched folder's
    ``extensions.watch`` — when it says something (:func:`mewdex.search.text.is_generic_segment`)."""
    places: list[dict[str, Any]] = [meme.provenance or {}, ((meme.extensions or {}).get("watch") or {})]
    for place in places:
        relative = place.get("relative_path") or place.get("path")
        if not isinstance(relative, str) or not relative:
            continue
        parent = PurePosixPath(relative.replace("\\", "/")).parent.name
        root = place.get("root")
        name = parent or (PurePosixPath(str(root).replace("\\", "/")).name if isinstance(root, str) else "")
        if name and not search_text.is_generic_segment(name):
            return name
    return None


def _caption_words(caption: str) -> list[str]:
    """Words of ``caption`` worth a tag, in order: the keyword leg's tokens (:func:`search_text.tokenize`,
    jieba for Chinese), Chinese ones of two characters or more, others of three letters or more, no
    number or filler word, none inside a longer one kept."""
    words = [
        w
        for w in search_text.tokenize(caption)
        if not w.isdigit()
        and w not in _FILLER
        and w not in GENERIC_NAMES
        and (len(w) >= 2 if search_text.has_han(w) else len(w) >= 3)
    ]
    return [w for w in words if not any(w != other and w in other for other in words)]


def suggestions(session: Session, scope: ScopeContext, meme: Meme, lang: str = "en") -> list[Suggestion]:
    """Tags ``meme`` could have, none it has: its folder's name (:func:`source_folder`), the visual
    model's labels in ``lang`` (``en``/``zh``), words of its text (corrected or as OCR read); at most
    :data:`SUGGESTIONS_PER_SOURCE` of each, in that order, a caption word that is already one of the
    scope's tags first. Names that break the tag rule are skipped, never an error."""
    context = meme.meme_context or {}
    have = set(library_tags.of_memes(session, scope.scope_id, [meme.id]).get(meme.id, []))
    found: dict[str, str] = {}

    def offer(values: Iterable[str], source: str) -> None:
        n = 0
        for value in values:
            try:
                name = normalize_tag(value)
            except TagError:
                continue
            if name in have or name in found:
                continue
            found[name] = source
            n += 1
            if n >= SUGGESTIONS_PER_SOURCE:
                return

    folder = source_folder(meme)
    offer([folder, *search_text.readable_words(folder)] if folder else [], "folder")
    visual_labels = ((meme.extensions or {}).get("visual") or {}).get("labels") or []
    offer(visual_model.labels_in(visual_labels, "zh" if lang == "zh" else "en"), "label")
    words = _caption_words(str(context.get("ocr_text") or ""))
    if words:
        known = set(
            session.execute(
                select(MemeTag.tag).where(MemeTag.scope_id == scope.scope_id, MemeTag.tag.in_(words)).distinct()
            ).scalars()
        )
        offer(sorted(words, key=lambda w: w not in known), "caption")
    return [Suggestion(name, source) for name, source in found.items()]


# ------------------------------------------------------------------------------------------- writes


def reindex(session: Session, scope_id: str, memes: Sequence[Meme]) -> None:
    """Rewrite the keyword documents of ``memes`` (their context with their current tags)."""
    tagged = library_tags.of_memes(session, scope_id, [m.id for m in memes])
    keyword.index_documents(
        session,
        scope_id,
        [
            (
                m.id,
                m.search_metadata_hash or context_hash(m.meme_context),
                keyword_document(m.meme_context, tagged.get(m.id, ())),
            )
            for m in memes
        ],
    )


def _lock(session: Session, scope: ScopeContext, ids: Iterable[UUID], *, include_trashed: bool = False) -> list[Meme]:
    """The scope's live memes of ``ids`` (with ``include_trashed``, those in the trash too) locked in id
    order (``FOR NO KEY UPDATE``, as the stages lock them); ``not_found`` (details: ``missing``) unless
    every one is there."""
    wanted = sorted(set(ids))
    query = select(Meme).where(Meme.scope_id == scope.scope_id, Meme.id.in_(wanted))
    if not include_trashed:
        query = query.where(live())
    memes = list(session.execute(query.order_by(Meme.id).with_for_update(key_share=True)).scalars())
    if len(memes) != len(wanted):
        found = {m.id for m in memes}
        missing = [str(i) for i in wanted if i not in found]
        raise TagError("not_found", "meme not found", {"missing": missing[:20]})
    return memes


def set_tags(
    session: Session,
    scope: ScopeContext,
    meme_id: UUID,
    values: Iterable[object],
    *,
    expected_revision: int | None = None,
) -> list[str]:
    """Make ``values`` (normalised: :func:`mewdex.library.tags.normalize_tags`) the meme's tags and
    re-index it; returns them sorted. Raises :class:`TagError` ``not_found``, ``revision_conflict``
    (``expected_revision`` is not the meme's), and the name rule's codes (nothing written then)."""
    tags = normalize_tags(values)
    (meme,) = _lock(session, scope, [meme_id])
    if expected_revision is not None and meme.revision != expected_revision:
        raise TagError(
            "revision_conflict",
            "the meme was changed meanwhile",
            {"expected_revision": expected_revision, "current_revision": meme.revision},
        )
    session.execute(
        delete(MemeTag).where(MemeTag.scope_id == scope.scope_id, MemeTag.meme_id == meme.id, MemeTag.tag.not_in(tags))
    )
    _insert(session, scope.scope_id, [(meme.id, t) for t in tags])
    reindex(session, scope.scope_id, [meme])
    return sorted(tags)


def bulk_edit(
    session: Session, scope: ScopeContext, meme_ids: Sequence[UUID], add: Iterable[object], remove: Iterable[object]
) -> dict[UUID, list[str]]:
    """Add ``add`` to and take ``remove`` from every meme of ``meme_ids``, all or nothing; re-indexes
    them. Returns ``{meme_id: its tags, sorted}``. Raises :class:`TagError` ``not_found`` (any id not the
    scope's meme; details ``missing``), ``too_many_tags`` (a meme would hold more than
    :data:`~mewdex.library.tags.MAX_TAGS_PER_MEME`; details ``meme_id``) and the name rule's codes."""
    adding = normalize_tags(add)
    removing = normalize_tags(remove, limit=None)
    memes = _lock(session, scope, meme_ids)
    ids = [m.id for m in memes]
    if removing:
        session.execute(
            delete(MemeTag).where(
                MemeTag.scope_id == scope.scope_id, MemeTag.meme_id.in_(ids), MemeTag.tag.in_(removing)
            )
        )
    _insert(session, scope.scope_id, [(m, t) for m in ids for t in adding if t not in removing])
    over = session.execute(
        select(MemeTag.meme_id)
        .where(MemeTag.scope_id == scope.scope_id, MemeTag.meme_id.in_(ids))
        .group_by(MemeTag.meme_id)
        .having(func.count() > MAX_TAGS_PER_MEME)
        .limit(1)
    ).scalar_one_or_none()
    if over is not None:  # the caller's transaction rolls back: nothing of the edit stays
        raise TagError(
            "too_many_tags",
            f"a meme has at most {MAX_TAGS_PER_MEME} tags",
            {"limit": MAX_TAGS_PER_MEME, "meme_id": str(over)},
        )
    reindex(session, scope.scope_id, memes)
    tagged = library_tags.of_memes(session, scope.scope_id, ids)
    return {m: tagged.get(m, []) for m in ids}


@dataclass(frozen=True)
class Renamed:
    """A rename's outcome: the tag's ``name`` now, how many memes hold it (``count``), and whether it
    was ``merged`` into a tag that existed."""

    name: str
    count: int
    merged: bool


def rename_tag(session: Session, scope: ScopeContext, old: str, new: object) -> Renamed:
    """Rename the scope's tag ``old`` to ``new`` (normalised); when ``new`` exists already the two are
    merged (a meme with both keeps one). The memes in the trash that have it are renamed too (a restore
    brings back the tag as it is named now); ``count`` and ``merged`` are of live memes. Re-indexes the
    memes. Raises :class:`TagError` ``not_found`` (no live meme has ``old``) and the name rule's codes."""
    source = fold_tag(old)
    target = normalize_tag(new)
    if not source or not library_tags.memes_tagged(session, scope.scope_id, source):
        raise TagError("not_found", "no meme has this tag")
    ids = library_tags.memes_tagged(session, scope.scope_id, source, include_trashed=True)
    merged = target != source and bool(library_tags.memes_tagged(session, scope.scope_id, target))
    if target != source:
        memes = _lock(session, scope, ids, include_trashed=True)
        _insert(session, scope.scope_id, [(m, target) for m in ids])
        session.execute(delete(MemeTag).where(MemeTag.scope_id == scope.scope_id, MemeTag.tag == source))
        reindex(session, scope.scope_id, memes)
    count = len(library_tags.memes_tagged(session, scope.scope_id, target))
    return Renamed(name=target, count=count, merged=merged)


def _insert(session: Session, scope_id: str, pairs: list[tuple[UUID, str]]) -> None:
    if pairs:
        session.execute(
            insert(MemeTag)
            .values([{"scope_id": scope_id, "meme_id": m, "tag": t} for m, t in pairs])
            .on_conflict_do_nothing()
        )
