"""The schedules page (issue 18): ``/schedules``. The page script (``static/schedules.js``) talks to
``/api/v1/schedules`` (jobs, runs, preview)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from mewdex.dto.scopes import ScopeContext
from mewdex.web.deps import current_scope
from mewdex.web.templating import render

router = APIRouter(include_in_schema=False)


@router.get("/schedules")
def schedules_page(request: Request, scope: ScopeContext = Depends(current_scope)):
    return render(request, "schedules.html", {"page": "schedules"})
