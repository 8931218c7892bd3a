"""Account pages of the web UI.

* ``/login`` — sign in, sign up (when open), and on a new install the setup page that creates the
  admin with the one-time setup code; with a provider configured, its single sign-on button (a link
  to ``/auth/oidc/login``, :mod:`mewdex.web.routers.sso`), the only way in with
  ``MEWDEX_PASSWORD_LOGIN=false``;
* ``/settings`` — the account page: language and time zone, API tokens (made with scopes and an
  expiry, shown once, revoked), password change, sign out everywhere (single-user mode: language only),
  and what mewdex learned (the newest choices, each with "forget this");
* ``/reset`` — set a new password with an admin's one-time link (``/reset#mdr_…``);
* ``/admin`` — instance usage, the sign-up switch, users (disk use, quota bars, this month's analysis
  cost; disable/enable, quotas, reset links) and new accounts; 404 for non-admins.

Each page is a template of sections, one partial per section (``templates/account/``,
``templates/admin/``); the token and user lists are also fragments (``/ui/account/tokens``,
``/ui/admin/users``) the page reloads after a change. Changes go through the JSON API. Browsers that
open a page without a session while login is required are sent to ``/login`` (see
:mod:`mewdex.web.errors`).
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session

from mewdex.backups import service as backups
from mewdex.config import get_settings
from mewdex.dto.scopes import ScopeContext
from mewdex.platform import oidc, sessions, tokens, usage, users
from mewdex.platform.auth import Principal
from mewdex.platform.instance import get_setting
from mewdex.platform.users import User
from mewdex.search import feedback
from mewdex.search.generations import builds
from mewdex.web.deps import (
    current_principal,
    current_scope,
    current_user,
    db_session,
    require_admin,
    session_cookie_names,
)
from mewdex.web.routers.admin import admin_user_dict
from mewdex.web.templating import render

router = APIRouter(include_in_schema=False)
#: The newest things learned the account page lists, each with its "forget this" button.
FEEDBACK_ENTRIES = 50


def same_site_path(target: str) -> bool:
    """A path on this site: starts with one ``/``; browsers read ``\\`` as ``/``, so ``/\\evil`` is not one."""
    target = target.replace("\\", "/")
    return target.startswith("/") and not target.startswith("//") and not any(ord(c) < 32 for c in target)


@router.get("/login")
def login_page(request: Request, next: str = "/", session: Session = Depends(db_session)):
    if not same_site_path(next):
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
            # single sign-on: the button (a plain link) with the provider's name; password sign-in may be off
            "oidc": {"name": get_settings().oidc_name} if oidc.configured() else None,
            "password_login": get_settings().password_login,
        },
    )


# ------------------------------------------------------------------ the account page


def _token_rows(session: Session, user: User) -> list[dict]:
    """The user's tokens, live ones first (newest first), each with ``state`` live|expired|revoked."""
    now = datetime.now(UTC)
    rows = []
    for row in tokens.list_tokens(session, user):
        state = "revoked" if row.revoked_at else "expired" if row.expires_at and row.expires_at <= now else "live"
        rows.append({**tokens.token_dict(row), "state": state})
    rows.reverse()
    rows.sort(key=lambda r: r["state"] != "live")
    return rows


@router.get("/settings")
def account_page(
    request: Request,
    principal: Principal = Depends(current_principal),
    scope: ScopeContext = Depends(current_scope),
    session: Session = Depends(db_session),
):
    user = principal.user
    return render(
        request,
        "account.html",
        {
            "page": "account",
            "account": users.user_dict(user) if user is not None else None,
            "is_admin": principal.is_admin,
            "tokens": _token_rows(session, user) if user is not None else [],
            "now_iso": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "feedback": feedback.summary(session, scope),
            "feedback_entries": [
                feedback.event_dict(e, name)
                for e, name in feedback.list_entries(session, scope, limit=FEEDBACK_ENTRIES)[0]
            ],
        },
    )


@router.get("/ui/account/tokens")
def token_rows_fragment(request: Request, user: User = Depends(current_user), session: Session = Depends(db_session)):
    return render(request, "account/token_rows.html", {"tokens": _token_rows(session, user)})


@router.get("/reset")
def reset_page(request: Request):
    """The reset form; the link's token is after ``#`` (the script reads it; the server never sees it here)."""
    return render(request, "reset.html", {"page": "reset"})


# ------------------------------------------------------------------ the admin page


def _user_rows(session: Session) -> list[dict]:
    """Every account as the admin API shows it, plus ``override``: its own quota fields (None: the default)."""
    return [
        {
            **admin_user_dict(session, u),
            "override": {
                "storage_bytes": u.quota_storage_bytes,
                "memes": u.quota_memes,
                "analysis_cost_per_month": (
                    float(u.quota_analysis_cost_per_month) if u.quota_analysis_cost_per_month is not None else None
                ),
            },
        }
        for u in users.list_users(session)
    ]


def _me_id(principal: Principal) -> str | None:
    return str(principal.user.user_id) if principal.user is not None else None


@router.get("/admin")
def admin_page(request: Request, principal: Principal = Depends(require_admin), session: Session = Depends(db_session)):
    return render(
        request,
        "admin.html",
        {
            "page": "admin",
            "users": _user_rows(session),
            "me_id": _me_id(principal),
            "signup_enabled": bool(get_setting(session, "signup_enabled", False)),
            "instance": usage.instance_usage(session),
            "backups": backups.overview(session),  # the backups package's card (backups/card.html)
            "rebuilds": builds(session),
        },
    )


@router.get("/ui/admin/users")
def user_rows_fragment(
    request: Request, principal: Principal = Depends(require_admin), session: Session = Depends(db_session)
):
    return render(request, "admin/user_rows.html", {"users": _user_rows(session), "me_id": _me_id(principal)})
