"""The tags page, ``/tags`` (issue 43): the library's tags with how many memes have each (most used
first), each linking to its ``tag:`` search, with rename/merge (``PATCH /api/v1/tags/{name}``, tags.js).

Reads: :func:`mewdex.library.tags.counts`, as ``GET /api/v1/tags`` does.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session

from mewdex.dto.scopes import ScopeContext
from mewdex.library import tags
from mewdex.web.deps import current_scope, db_session
from mewdex.web.templating import render

router = APIRouter(include_in_schema=False)


def tag_overview(
    q: str = "", session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
) -> dict[str, Any]:
    """The scope's tags with their counts; ``q``: only those starting with it."""
    q = q.strip()[:64]
    return {"tags": tags.counts(session, scope, prefix=q), "q": q}


@router.get("/tags")
def tags_page(request: Request, overview: dict[str, Any] = Depends(tag_overview)):
    return render(request, "tags.html", {"page": "tags", **overview})
