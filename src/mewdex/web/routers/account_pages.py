"""Account pages of the web UI: ``/login`` (sign in, sign up, sign out) and ``/admin`` (users with
disk use, quota bars and this month's analysis cost; 404 for non-admins). Browsers that open a
page without a session while login is required are sent to ``/login`` (see :mod:`mewdex.web.errors`)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session

from mewdex.platform import sessions, users
from mewdex.platform.instance import get_setting
from mewdex.web.deps import db_session, require_admin, session_cookie_names
from mewdex.web.routers.admin import admin_user_dict
from mewdex.web.routers.pages import render

router = APIRouter(include_in_schema=False)


def _same_site_path(target: str) -> bool:
    """A path on this site: starts with one ``/``; browsers read ``\\`` as ``/``, so ``/\\evil`` is not one."""
    target = target.replace("\\", "/")
    return target.startswith("/") and not target.startswith("//") and not any(ord(c) < 32 for c in target)


@router.get("/login")
def login_page(request: Request, next: str = "/", session: Session = Depends(db_session)):
    if not _same_site_path(next):
        next = "/"  # no open redirect
    found = sessions.resolve_session(session, request.cookies.get(session_cookie_names(request)[0], ""))
    return render(
        request,
        "login.html",
        {
            "page": "login",
            "user": found[1] if found else None,
            "next": next,
            "signup_enabled": users.signup_enabled(session),
            "first_admin": not users.any_users(session),
        },
    )


@router.get("/admin", dependencies=[Depends(require_admin)])
def admin_page(request: Request, session: Session = Depends(db_session)):
    return render(
        request,
        "admin.html",
        {
            "page": "admin",
            "users": [admin_user_dict(session, u) for u in users.list_users(session)],
            "signup_enabled": bool(get_setting(session, "signup_enabled", False)),
        },
    )
