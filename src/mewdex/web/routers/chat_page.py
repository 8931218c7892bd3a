"""The chat page (issue 16): ``/chat`` (``?c=<conversation id>`` opens one). The page script
(``static/chat.js``) talks to ``/api/v1/conversations``."""

from __future__ import annotations

from uuid import UUID

from fastapi import APIRouter, Depends, Request

from mewdex.dto.scopes import ScopeContext
from mewdex.web.deps import current_scope
from mewdex.web.templating import render

router = APIRouter(include_in_schema=False)


@router.get("/chat")
def chat_page(request: Request, c: str | None = None, scope: ScopeContext = Depends(current_scope)):
    try:
        conversation_id = str(UUID(c)) if c else None
    except ValueError:
        conversation_id = None
    return render(request, "chat.html", {"page": "chat", "conversation_id": conversation_id})
