""" "This is the meme I wanted" marks (issue 15, point 7; services in :mod:`mewdex.search.marks`):

* ``POST /api/v1/search/marks`` ``{query, meme_id}`` → 201 the mark (marking again returns it)
* ``GET /api/v1/search/marks`` → the scope's marks, newest first (``mewdex eval --marks`` measures them)
* ``DELETE /api/v1/search/marks/{id}`` → 204
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from sqlalchemy.orm import Session

from mewdex.dto.scopes import ScopeContext
from mewdex.dto.search_marks import SearchMark, SearchMarkCreate, SearchMarkList
from mewdex.search import marks
from mewdex.web.deps import current_scope, db_session, parse_id
from mewdex.web.errors import ApiError, error_responses

router = APIRouter(prefix="/api/v1/search", tags=["search"], responses=error_responses(401, 404, 422))


def mark_dict(m) -> dict:
    return {"id": str(m.mark_id), "query": m.query, "meme_id": str(m.meme_id), "created_at": m.created_at.isoformat()}


@router.post("/marks", response_model=SearchMark, status_code=201)
def add_mark(
    body: SearchMarkCreate, scope: ScopeContext = Depends(current_scope), session: Session = Depends(db_session)
):
    """Mark a result as the meme the query was for; 404 for a meme not in the caller's library,
    422 ``query_empty`` / ``query_too_long``."""
    mark = marks.add(session, scope, body.query, parse_id(body.meme_id))
    return mark_dict(mark)


@router.get("/marks", response_model=SearchMarkList)
def list_marks(scope: ScopeContext = Depends(current_scope), session: Session = Depends(db_session)):
    return {"marks": [mark_dict(m) for m in marks.list_marks(session, scope)]}


@router.delete("/marks/{mark_id}", status_code=204, response_class=Response)
def delete_mark(mark_id: str, scope: ScopeContext = Depends(current_scope), session: Session = Depends(db_session)):
    if not marks.remove(session, scope, parse_id(mark_id, "mark")):
        raise ApiError(404, "not_found", "mark not found")
    return Response(status_code=204)
