"""What mewdex learned from the account's choices (issue 33; services in :mod:`mewdex.search.feedback`):

* ``POST /api/v1/feedback`` ``{query, meme_id, kind, source?}`` → 201 ``{recorded, event}`` (the
  buttons of a result — copy, share, send — call it; ``recorded`` false with learning off)
* ``GET /api/v1/feedback?limit=&cursor=`` → the summary and the newest events (with each meme's name
  and thumbnail; ``next_cursor``)
* ``GET /api/v1/feedback/export`` → every event as a JSON attachment
* ``DELETE /api/v1/feedback`` → ``{deleted}``: all of it, from the next search on
* ``DELETE /api/v1/feedback/{id}`` → 204: forget that one entry (the account page's "forget this");
  404 ``not_found`` for an id that is not the caller's
* ``GET`` / ``PUT /api/v1/feedback/settings`` ``{learning_enabled}``: learning on or off

Errors: 404 ``not_found`` (a meme or event not in the caller's library), 422 ``query_empty`` /
``query_too_long`` / ``invalid_request``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from mewdex.dto import feedback as dto
from mewdex.dto.scopes import ScopeContext
from mewdex.search import feedback
from mewdex.web.deps import current_scope, db_session, parse_id
from mewdex.web.errors import ApiError, error_responses

router = APIRouter(prefix="/api/v1/feedback", tags=["feedback"], responses=error_responses(401, 404, 422))


@router.post("", response_model=dto.FeedbackRecorded, status_code=201)
def record_feedback(
    body: dto.FeedbackCreate, scope: ScopeContext = Depends(current_scope), session: Session = Depends(db_session)
):
    """Record one choice made on a result of ``query``; 404 for a meme not in the caller's library."""
    event = feedback.record(session, scope, body.query, parse_id(body.meme_id), body.kind, body.source)
    return {"recorded": event is not None, "event": feedback.event_dict(event) if event is not None else None}


@router.get("", response_model=dto.FeedbackList)
def list_feedback(
    limit: int = Query(100, ge=1, le=500),
    cursor: str | None = Query(None, max_length=2048, description="``next_cursor`` of the previous page"),
    scope: ScopeContext = Depends(current_scope),
    session: Session = Depends(db_session),
):
    """The summary and the events, newest first, each with its meme's ``display_name`` and
    ``thumbnail_url`` (the account page's list; ``DELETE /api/v1/feedback/{id}`` forgets one); pass
    ``next_cursor`` back as ``cursor`` for older ones (422 ``invalid_cursor``)."""
    entries, next_cursor = feedback.list_entries(session, scope, limit=limit, cursor=cursor)
    return {
        "summary": feedback.summary(session, scope),
        "events": [feedback.event_dict(e, name) for e, name in entries],
        "next_cursor": next_cursor,
    }


@router.get("/export", response_model=dto.FeedbackExport)
def export_feedback(scope: ScopeContext = Depends(current_scope), session: Session = Depends(db_session)):
    """Every event of the account, oldest first, as ``mewdex-feedback.json``."""
    body = {
        "exported_at": datetime.now(UTC).isoformat(),
        "learning_enabled": feedback.learning_enabled(session, scope.scope_id),
        "events": list(feedback.export(session, scope)),
    }
    return JSONResponse(body, headers={"Content-Disposition": 'attachment; filename="mewdex-feedback.json"'})


@router.delete("", response_model=dto.FeedbackCleared)
def clear_feedback(scope: ScopeContext = Depends(current_scope), session: Session = Depends(db_session)):
    """Forget everything learned for this account (its events and their query embeddings)."""
    return {"deleted": feedback.clear(session, scope)}


@router.get("/settings", response_model=dto.FeedbackSettings)
def feedback_settings(scope: ScopeContext = Depends(current_scope), session: Session = Depends(db_session)):
    return {"learning_enabled": feedback.learning_enabled(session, scope.scope_id)}


@router.put("/settings", response_model=dto.FeedbackSettings)
def update_feedback_settings(
    body: dto.FeedbackSettings, scope: ScopeContext = Depends(current_scope), session: Session = Depends(db_session)
):
    """Turn learning on or off: off, nothing is recorded and search uses none of it (kept until cleared)."""
    return {"learning_enabled": feedback.set_learning(session, scope, body.learning_enabled)}


@router.delete("/{event_id}", status_code=204, response_class=Response)
def delete_feedback_event(
    event_id: str, scope: ScopeContext = Depends(current_scope), session: Session = Depends(db_session)
):
    """Forget one thing learned (from the next search on); only the caller's own: 404 for another's."""
    if not feedback.delete_event(session, scope, parse_id(event_id, "feedback event")):
        raise ApiError(404, "not_found", "feedback event not found")
    return Response(status_code=204)
