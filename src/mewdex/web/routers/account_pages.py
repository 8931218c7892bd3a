"""``/login``: the sign-in / sign-up page (and sign-out when signed in). Browsers that open a page
without a session while login is required are sent here (see :mod:`mewdex.web.errors`)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, Request
from fastapi.templating import Jinja2Templates
from sqlalchemy.orm import Session

from mewdex.platform import sessions
from mewdex.platform.instance import get_setting
from mewdex.web.deps import db_session

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent.parent / "templates")


@router.get("/login")
def login_page(request: Request, next: str = "/", session: Session = Depends(db_session)):
    if not next.startswith("/") or next.startswith("//"):
        next = "/"  # only same-site paths: no open redirect
    found = sessions.resolve_session(session, request.cookies.get(sessions.COOKIE_NAME, ""))
    return templates.TemplateResponse(request, "login.html", {
        "user": found[1] if found else None, "next": next,
        "signup_enabled": bool(get_setting(session, "signup_enabled", True)),
    })
