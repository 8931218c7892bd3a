"""``POST /api/v1/search``: hybrid natural-language search."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import BaseModel
from sqlalchemy.orm import Session

from mewdex.db.models import ScopeContext
from mewdex.search import generations, service
from mewdex.web.deps import current_scope, db_session
from mewdex.web.errors import ApiError

router = APIRouter(prefix="/api/v1", tags=["search"])


class SearchRequest(BaseModel):
    query: str
    n_results: int = 10


def validate(request: SearchRequest) -> str:
    query = request.query.strip()
    if not query:
        raise ApiError(422, "query_empty", "the query is empty")
    if len(query) > service.MAX_QUERY_CHARS:
        raise ApiError(422, "query_too_long", f"the query is over {service.MAX_QUERY_CHARS} characters")
    if not 1 <= request.n_results <= 50:
        raise ApiError(422, "n_results_out_of_range", "n_results must be between 1 and 50")
    return query


@router.post("/search")
def search(request: SearchRequest, session: Session = Depends(db_session),
           scope: ScopeContext = Depends(current_scope)) -> dict:
    """``{"results": [{"id", "display_name", "sha256", "score", "media_url", "snippet"}], "took_ms"}``."""
    query = validate(request)
    return service.search(session, scope, query, request.n_results).as_dict()


@router.get("/search/status")
def search_status(session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)) -> dict:
    """Per vector leg: the active generation, the one being built (progress, task) and the
    configured model; plus meme counts (shape: :func:`mewdex.search.generations.status`)."""
    return generations.status(session, scope.scope_id)
