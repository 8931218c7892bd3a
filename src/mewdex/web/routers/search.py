"""``POST /api/v1/search``: hybrid natural-language search, with filters applied inside every leg."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends
from pydantic import ValidationError
from sqlalchemy.orm import Session

from mewdex.dto.scopes import ScopeContext
from mewdex.dto.search import (
    MAX_OFFSET,
    MAX_QUERY_CHARS,
    SearchFilters,
    SearchRequest,
    SearchResults,
    SearchStatus,
)
from mewdex.library import sharing
from mewdex.search import generations, service
from mewdex.web.deps import current_scope, current_user_id, db_session
from mewdex.web.errors import ApiError
from mewdex.web.routers.collections import member_media_url

router = APIRouter(prefix="/api/v1", tags=["search"])

__all__ = ["router", "SearchRequest", "validate", "search_filters"]


def validate(request: SearchRequest) -> str:
    """The stripped query; 422 ``query_empty`` / ``query_too_long`` / ``n_results_out_of_range`` /
    ``offset_out_of_range``."""
    query = request.query.strip()
    if not query:
        raise ApiError(422, "query_empty", "the query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise ApiError(422, "query_too_long", f"the query is over {MAX_QUERY_CHARS} characters")
    if not 1 <= request.n_results <= 50:
        raise ApiError(422, "n_results_out_of_range", "n_results must be between 1 and 50")
    if not 0 <= request.offset <= MAX_OFFSET:
        raise ApiError(422, "offset_out_of_range", f"offset must be between 0 and {MAX_OFFSET}")
    return query


def search_filters(**values: Any) -> SearchFilters:
    """:class:`SearchFilters` from loose values (form fields, page query strings); 422 ``invalid_request``."""
    try:
        return SearchFilters(**{k: v for k, v in values.items() if v is not None and v != [] and v != ""})
    except ValidationError as exc:
        details = [{"loc": list(e.get("loc", ())), "msg": e.get("msg")} for e in exc.errors()]
        raise ApiError(422, "invalid_request", "the filters are not valid", details) from None


@router.post("/search", response_model=SearchResults)
def search(
    request: SearchRequest,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
    user_id: UUID | None = Depends(current_user_id),
):
    """``{"results": [{"id", "display_name", "sha256", "score", "media_url", "snippet", "confidence"}],
    "took_ms"}`` (``confidence``: ``high`` | ``medium`` | ``low``, see ``mewdex.search.confidence``).

    ``fold_variants``: only the best-ranked meme of each template group. Filters (all optional,
    combined with AND, applied inside every leg's SQL so a match ranked anywhere is found):
    ``collection_ids``, ``animated``, ``formats``, ``status``, ``created_from`` / ``created_to``;
    paging: ``n_results`` and ``offset``. ``{"filters": {"collection": id}}``: only that collection's
    memes — the caller's own collection or one shared with its account (404 ``not_found`` otherwise)."""
    query = validate(request)
    if request.within is not None:
        return _search_within(session, scope, user_id, request, query)
    return service.search(
        session,
        scope,
        query,
        request.n_results,
        filters=request.filters(),
        offset=request.offset,
        fold_variants=request.fold_variants,
        shared=True,
    ).to_dto()


def _search_within(
    session: Session, scope: ScopeContext, user_id: UUID | None, request: SearchRequest, query: str
) -> SearchResults:
    """A search inside one collection (``{"filters": {"collection": id}}``), the caller's own or shared
    with it (:func:`mewdex.library.sharing.access`, 404 ``not_found`` otherwise): the owner's library
    searched with the collection as filter, every hit checked to be one of its live memes; a member
    learns nothing into the owner's library, spends none of its providers, and gets its media URLs."""
    assert request.within is not None
    granted = sharing.access(session, scope, user_id, UUID(request.within.collection))
    own = granted.role == "owner"
    found = service.search_collection(
        session,
        granted.owner,
        granted.collection.id,
        query,
        request.n_results,
        filters=request.filters(),
        offset=request.offset,
        fold_variants=request.fold_variants,
        member=not own,
    ).to_dto()
    if not own:
        for hit in found.results:
            hit.media_url = member_media_url(granted.collection.id, hit.id)
    return found


@router.get("/search/status", response_model=SearchStatus)
def search_status(session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)):
    """Per vector leg: the active generation, the one being built (progress, task) and the
    configured model; plus meme counts (shape: :func:`mewdex.search.generations.status`)."""
    return generations.status(session, scope.scope_id)
