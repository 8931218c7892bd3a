"""Tags (issue 43): bulk add/remove over a selection (``POST /api/v1/memes/tags``), the tag list with
counts (``GET /api/v1/tags``), rename and merge (``PATCH /api/v1/tags/{name}``). A meme's own tags are
set by ``PATCH /api/v1/memes/{id}`` with ``{"tags": [...]}`` (:mod:`mewdex.web.routers.memes`). The
rules are :mod:`mewdex.library.tags` (names, reads) and :mod:`mewdex.search.tags` (writes, re-index)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from sqlalchemy.orm import Session

from mewdex.dto.memes import (
    MemeTags,
    TagCount,
    TagEditRequest,
    TagEditResult,
    TagList,
    TagRenamed,
    TagRenameRequest,
    TagSuggestion,
    TagSuggestions,
)
from mewdex.dto.scopes import ScopeContext
from mewdex.library import memes
from mewdex.library import tags as library_tags
from mewdex.search import tags
from mewdex.web import i18n
from mewdex.web.deps import current_scope, db_session, parse_id
from mewdex.web.errors import ApiError, error_responses

router = APIRouter(prefix="/api/v1", tags=["tags"])


@router.post("/memes/tags", response_model=TagEditResult, responses=error_responses(404))
def edit_tags(
    body: TagEditRequest, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
):
    """Add ``add`` to and take ``remove`` from every meme of ``ids``, all or nothing (a name in both is
    removed); each meme's keyword document is re-indexed at once. ``{"items": [{"id", "tags"}]}`` in
    request order. Errors: 404 ``not_found`` (any id that is not one of the caller's memes: nothing
    changes; ``details.missing``), 422 ``tag_empty`` / ``tag_too_long`` / ``tag_invalid`` /
    ``too_many_tags`` (a meme would hold more than 50) / ``invalid_request``."""
    ids = list(dict.fromkeys(parse_id(i) for i in body.ids))
    result = tags.bulk_edit(session, scope, ids, body.add, body.remove)
    return TagEditResult(items=[MemeTags(id=str(i), tags=result[i]) for i in ids])


@router.get("/tags", response_model=TagList)
def list_tags(
    prefix: str = Query("", max_length=64, description="only tags starting with this (folded as tags are)"),
    limit: int = Query(1000, ge=1, le=1000),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """The caller's tags with how many memes have each, most used first, then by name:
    ``{"items": [{"name", "count"}]}``."""
    return TagList(
        items=[TagCount(name=n, count=c) for n, c in library_tags.counts(session, scope, prefix=prefix, limit=limit)]
    )


@router.patch("/tags/{name}", response_model=TagRenamed, responses=error_responses(404))
def rename_tag(
    name: str,
    body: TagRenameRequest,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """Rename the tag ``name`` (URL-encoded) to ``body.name`` on every meme that has it; when a tag of
    that name exists the two merge (``merged``: true). The memes are re-indexed at once.
    ``{"name", "count", "merged"}``. Errors: 404 ``not_found`` (no meme has the tag), 422 ``tag_empty``
    / ``tag_too_long`` / ``tag_invalid``."""
    renamed = tags.rename_tag(session, scope, name, body.name)
    return TagRenamed(name=renamed.name, count=renamed.count, merged=renamed.merged)


@router.get("/memes/{meme_id}/tag-suggestions", response_model=TagSuggestions, responses=error_responses(404))
def tag_suggestions(
    meme_id: str,
    request: Request,
    lang: str | None = Query(None, pattern="^(en|zh)$", description="the labels' language; default: the page's"),
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """Tags the meme could have, none it has: ``{"items": [{"name", "source"}]}`` — the folder its file
    came from (``folder``), the visual model's labels (``label``), words of its text (``caption``); at
    most 4 of each. Accept one by adding it with ``PATCH /api/v1/memes/{id}`` ``{"tags"}``.
    404 ``not_found``."""
    meme = memes.find(session, scope, parse_id(meme_id))
    if meme is None:
        raise ApiError(404, "not_found", "meme not found")
    language = lang or i18n.page_language(request) or "en"
    found = tags.suggestions(session, scope, meme, language)
    return TagSuggestions(items=[TagSuggestion(name=s.name, source=s.source) for s in found])
