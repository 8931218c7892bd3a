"""Single sign-on pages (README "Single sign-on (OpenID Connect)"): plain redirects, no script.

* ``GET /auth/oidc/login?next=/path`` → 303 to the provider's authorization page, with the pending
  sign-in (state, nonce, PKCE verifier, ``next``) in a 10-minute HttpOnly cookie
  (``__Host-mewdex_oidc`` where the session cookies are Secure, else ``mewdex_oidc``); 404 when no
  provider is configured.
* ``GET /auth/oidc/callback?code=&state=`` (the redirect URI to register at the provider:
  ``MEWDEX_PUBLIC_URL`` + ``/auth/oidc/callback``, else this request's own scheme and host) → signed
  in (the session :func:`mewdex.web.routers.auth.sign_in` makes) and 303 to ``next``; or a page that
  says why not (``sso_error.html``, in the request's language, with the error code as
  ``data-code``). The cookie is used up either way, so a replayed callback is refused.

The flow and the account rule are :mod:`mewdex.platform.oidc`'s.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy.orm import Session

from mewdex.dto.errors import DomainError
from mewdex.platform import oidc, sessions
from mewdex.web.base_path import cookie_path, prefix
from mewdex.web.deps import db_session, public_base_url
from mewdex.web.errors import ApiError, http_status
from mewdex.web.routers.account_pages import same_site_path
from mewdex.web.routers.auth import sign_in
from mewdex.web.security import cookies_secure
from mewdex.web.templating import render

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)
COOKIE = "mewdex_oidc"
CALLBACK = "/auth/oidc/callback"


def _cookie(request: Request) -> tuple[str, bool]:
    """``(name, secure)`` of the pending sign-in's cookie, prefixed like the session cookies."""
    secure = cookies_secure(request.url.scheme, request.url.hostname)
    return sessions.cookie_prefix(secure) + COOKIE, secure


def redirect_uri(request: Request) -> str:
    """Where the provider sends the browser back: under ``MEWDEX_PUBLIC_URL``, else this request's host."""
    return public_base_url(request) + CALLBACK


# What the page says where the API's words for a code do not fit a single sign-on.
_MESSAGES = {"signup_disabled": "sso.no_account", "admin_required": "sso.no_admin"}


def _failure(request: Request, exc: DomainError) -> Response:
    status = http_status(exc.code)
    if status == 422:  # an account rule's input fault (an email the provider sent that cannot be used)
        status = 400
    log.info("single sign-on refused: %s", exc.code)
    message = _MESSAGES.get(exc.code, f"error.{exc.code}")
    context = {"page": "login", "code": exc.code, "status": status, "message": message}
    response = render(request, "sso_error.html", context, status_code=status)
    name, secure = _cookie(request)
    response.delete_cookie(name, path=cookie_path(request), secure=secure, httponly=True, samesite="lax")
    return response


@router.get("/auth/oidc/login")
def oidc_login(request: Request, next: str = "/") -> Response:
    if not oidc.configured():
        raise ApiError(404, "not_found", "single sign-on is not configured")
    try:
        url, pending = oidc.begin(redirect_uri(request), next if same_site_path(next) else "/")
    except DomainError as exc:
        return _failure(request, exc)
    response = RedirectResponse(url, status_code=303)
    name, secure = _cookie(request)
    response.set_cookie(
        name,
        pending.encode(),
        max_age=oidc.PENDING_SECONDS,
        httponly=True,
        samesite="lax",
        secure=secure,
        path=cookie_path(request),
    )
    return response


@router.get(CALLBACK)
def oidc_callback(request: Request, session: Session = Depends(db_session)) -> Response:
    if not oidc.configured():
        raise ApiError(404, "not_found", "single sign-on is not configured")
    name, secure = _cookie(request)
    pending = oidc.Pending.decode(request.cookies.get(name))
    try:
        user = oidc.finish(session, pending, dict(request.query_params), redirect_uri(request))
    except DomainError as exc:
        session.rollback()
        return _failure(request, exc)
    assert pending is not None  # finish refuses a missing one
    response = RedirectResponse(prefix(request, pending.next if same_site_path(pending.next) else "/"), status_code=303)
    sign_in(request, response, session, user)
    response.delete_cookie(name, path=cookie_path(request), secure=secure, httponly=True, samesite="lax")
    return response
