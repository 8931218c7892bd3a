"""Accounts over HTTP: sign-up, sign-in/out, password change, ``/me``, API tokens, signed media URLs.

* ``POST /api/v1/auth/signup`` ``{email, password, name?}`` → 201 ``{"user", "csrf_token"}`` (signed in)
* ``POST /api/v1/auth/login`` ``{email, password}`` → 200 ``{"user", "csrf_token"}`` + session cookie
* ``POST /api/v1/auth/logout`` → 204
* ``POST /api/v1/auth/logout-everywhere`` → 204 (every session of the caller ends)
* ``POST /api/v1/auth/password`` ``{current_password, new_password}`` → 204 (other sessions end)
* ``POST /api/v1/auth/reset`` ``{token, new_password}`` → 204 (an admin's one-time reset link)
* ``GET /api/v1/me`` → ``{"user", "auth", "quota", "disk", "analysis_cost_this_month"}``
* ``PATCH /api/v1/me`` ``{time_zone?, language?}`` → the user (null: back to the browser's)
* ``POST /api/v1/tokens`` ``{name, scopes?, expires_in_days?}`` → 201 ``{"id", "name", "token", …}`` (shown once)
* ``GET /api/v1/tokens``, ``DELETE /api/v1/tokens/{id}``
* ``GET /api/v1/memes/{id}/signed-url?ttl_seconds=&thumbnail=`` → ``{"url", "expires_at"}``
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel
from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.dto.users import Me, NewToken, SignedIn, SignedUrl, TokenList
from mewdex.dto.users import User as UserDto
from mewdex.library import memes
from mewdex.platform import media_urls, password_reset, quotas, sessions, tokens, usage, users
from mewdex.platform.auth import Principal, auth_mode
from mewdex.platform.users import User
from mewdex.web import i18n
from mewdex.web.base_path import cookie_path
from mewdex.web.deps import (
    bind_host,
    current_principal,
    current_user,
    db_session,
    parse_id,
    session_cookie_names,
)
from mewdex.web.errors import ApiError, error_responses
from mewdex.web.security import client_ip, cookies_secure

router = APIRouter(prefix="/api/v1", tags=["auth"], responses=error_responses(401, 403, 409, 422, 429))


class SignupRequest(BaseModel):
    email: str
    password: str
    name: str | None = None
    setup_code: str | None = None
    time_zone: str | None = None  # the browser's IANA zone


class LoginRequest(BaseModel):
    email: str
    password: str
    time_zone: str | None = None  # the browser's IANA zone: the account's when it has none yet


class ResetRequest(BaseModel):
    token: str
    new_password: str


class PreferencesPatch(BaseModel):
    time_zone: str | None = None  # IANA name; null: the browser's
    language: str | None = None  # en | zh; null: the browser's


class PasswordRequest(BaseModel):
    current_password: str
    new_password: str


class TokenRequest(BaseModel):
    name: str
    scopes: list[str] | None = None  # read, write, admin (admins only); default read+write
    expires_in_days: int | None = None  # 1..3650; default never


def _client_ip(request: Request) -> str:
    return client_ip(request)


def sign_in(request: Request, response: Response, session: Session, user: User) -> str:
    """THE sign-in of a browser (password, sign-up, single sign-on): a new session for ``user`` in
    ``response``'s cookies (session HttpOnly, CSRF readable by the page's scripts; SameSite=Lax,
    Secure and ``__Host-`` where :func:`~mewdex.web.security.cookies_secure` says so) and the account's
    page language; returns the CSRF token."""
    value, csrf = sessions.start_session(session, user)
    max_age = get_settings().session_days * 86400
    secure = cookies_secure(request.url.scheme, request.url.hostname)
    session_name, csrf_name = sessions.cookie_names(secure)
    response.set_cookie(
        session_name, value, max_age=max_age, httponly=True, samesite="lax", secure=secure, path=cookie_path(request)
    )
    response.set_cookie(
        csrf_name, csrf, max_age=max_age, httponly=False, samesite="lax", secure=secure, path=cookie_path(request)
    )
    if user.language:  # the account's page language follows it to this browser
        response.set_cookie(
            i18n.COOKIE, user.language, max_age=365 * 24 * 3600, samesite="lax", path=cookie_path(request)
        )
    return csrf


def _sign_out(request: Request, response: Response) -> None:
    """Expire the session and CSRF cookies (a ``__Host-`` cookie is only replaced by a Secure one)."""
    secure = cookies_secure(request.url.scheme, request.url.hostname)
    for name in sessions.cookie_names(secure):
        response.delete_cookie(name, path=cookie_path(request), secure=secure, samesite="lax")


@router.post("/auth/signup", status_code=201, response_model=SignedIn)
def signup(body: SignupRequest, request: Request, response: Response, session: Session = Depends(db_session)):
    """Create an account and sign it in. The installation's first account (the admin) needs the
    one-time ``setup_code`` that ``mewdex serve`` printed (else 403 ``admin_required``; or create it
    with ``mewdex user create EMAIL --admin``); later ones need sign-up opened by the admin (403
    ``signup_disabled``). 409 ``signup_failed`` (the email cannot be used; no hint whether it has an
    account); 422 ``email_invalid``, ``password_too_short``, ``password_too_long`` (over 72 UTF-8
    bytes), ``password_invalid``, ``name_too_long``; 429 ``rate_limited`` (sign-ups per address); 403
    ``password_login_disabled`` (single sign-on only: accounts come from the provider)."""
    sessions.check_signup_rate(client_ip(request))
    user = users.create_user(
        session, body.email, body.password, name=body.name, check_signup=True, setup_code=body.setup_code
    )
    users.default_time_zone(user, body.time_zone)
    csrf = sign_in(request, response, session, user)
    return {"user": users.user_dict(user), "csrf_token": csrf}


@router.post("/auth/login", response_model=SignedIn)
def login(body: LoginRequest, request: Request, response: Response, session: Session = Depends(db_session)):
    """Sign in: the ``__Host-mewdex_session`` cookie (HttpOnly, SameSite=Lax, Secure) and the
    ``__Host-mewdex_csrf`` cookie whose value state-changing requests echo in ``X-CSRF-Token``
    (unprefixed and not Secure on plain http to a non-loopback address, where browsers would drop
    Secure cookies). 401
    ``invalid_credentials`` for any failure; 429 ``rate_limited`` with ``Retry-After``; 403
    ``password_login_disabled`` when the server signs in through single sign-on only."""
    user = sessions.authenticate(session, body.email, body.password, _client_ip(request))
    users.default_time_zone(user, body.time_zone)
    csrf = sign_in(request, response, session, user)
    return {"user": users.user_dict(user), "csrf_token": csrf}


@router.post("/auth/logout", status_code=204)
def logout(request: Request, session: Session = Depends(db_session)) -> Response:
    """End this browser session (a no-op without one)."""
    sessions.end_session(session, request.cookies.get(session_cookie_names(request)[0], ""))
    response = Response(status_code=204)
    _sign_out(request, response)
    return response


@router.post("/auth/logout-everywhere", status_code=204)
def logout_everywhere(
    request: Request, user: User = Depends(current_user), session: Session = Depends(db_session)
) -> Response:
    """End every browser session of the caller, this one included (API tokens stay; revoke them apart)."""
    sessions.end_all_sessions(session, user)
    response = Response(status_code=204)
    _sign_out(request, response)
    return response


@router.post("/auth/password", status_code=204)
def change_password(
    body: PasswordRequest,
    request: Request,
    principal: Principal = Depends(current_principal),
    user: User = Depends(current_user),
    session: Session = Depends(db_session),
) -> Response:
    """Change the password; every other session of the user ends, every API token is revoked and
    every signed link dies. 401 ``invalid_credentials`` (the current password is wrong: counted like a
    failed sign-in), 429 ``rate_limited`` (with ``Retry-After``, as sign-in), 422 the password rules."""
    sessions.confirm_password(session, user, body.current_password, _client_ip(request))
    users.set_password(session, user, body.new_password)
    sessions.end_all_sessions(session, user, keep=principal.session_value)
    return Response(status_code=204)


@router.post("/auth/reset", status_code=204, responses=error_responses(410))
def reset_password(body: ResetRequest, request: Request, session: Session = Depends(db_session)) -> Response:
    """Set a new password with a one-time reset link's token (``/reset#mdr_…``, made by an admin);
    the link is used up, every session and API token of the account ends. Not signed in afterwards:
    sign in with the new password. 410 ``reset_link_invalid`` (used, expired, unknown, or the account
    is disabled); 422 ``password_too_short``/``password_too_long``/``password_invalid`` (the link
    stays usable)."""
    password_reset.reset_password(session, body.token, body.new_password)
    response = Response(status_code=204)
    _sign_out(request, response)
    return response


@router.patch("/me", response_model=UserDto)
def update_me(body: PreferencesPatch, user: User = Depends(current_user), session: Session = Depends(db_session)):
    """The account's preferences: ``time_zone`` (IANA name, e.g. ``Asia/Shanghai``: the zone pages show
    times in) and ``language`` (``en``/``zh``); a field sent as null goes back to the browser's
    choice, a field left out stays. 422 ``timezone_invalid``, ``language_invalid``; 409
    ``no_accounts`` in single-user mode."""
    users.set_preferences(user, time_zone=body.time_zone, language=body.language, fields=body.model_fields_set)
    session.flush()
    return users.user_dict(user)


@router.get("/me", response_model=Me)
def me(request: Request, principal: Principal = Depends(current_principal), session: Session = Depends(db_session)):
    """The caller: ``{"user": {...} | null, "auth": {"mode", "via"}, "scope_id", "quota", "disk",
    "analysis_cost_this_month"}`` (``user`` null in single-user mode)."""
    out = {
        "user": None,
        "auth": {"mode": auth_mode(session, bind_host(request)), "via": principal.via},
        "scope_id": principal.scope.scope_id,
        "quota": None,
        "disk": None,
        "analysis_cost_this_month": float(usage.month_cost(session, principal.scope.scope_id)),
    }
    if principal.user is not None:
        out["user"] = users.user_dict(principal.user)
        out["quota"] = quotas.limits_for(principal.user).as_dict()
        out["disk"] = quotas.disk_usage(session, principal.user)
    return out


@router.post("/tokens", status_code=201, response_model=NewToken)
def create_token(
    body: TokenRequest,
    principal: Principal = Depends(current_principal),
    user: User = Depends(current_user),
    session: Session = Depends(db_session),
):
    """A new API token: ``{"id", "name", "prefix", "scopes", "created_at", "expires_at", "last_used_at",
    "revoked_at", "token"}``; ``token`` (``mdx_…``) is shown only here. ``scopes``: ``read`` (GET),
    ``write`` (changes), ``admin`` (the admin API; admins only), default read+write; ``expires_in_days``
    default never; a request made with an API token gets a token with none of the scopes it lacks (403
    ``insufficient_scope``) that expires no later than it. 422
    ``name_required``/``name_too_long``/``scope_invalid``/``expiry_invalid``; 403 ``admin_required``."""
    within = (principal.token_scopes, principal.token_expires_at) if principal.token_scopes is not None else None
    row, plain = tokens.create_token(
        session, user, body.name, scopes=body.scopes, expires_in_days=body.expires_in_days, within=within
    )
    return {**tokens.token_dict(row), "token": plain}


@router.get("/tokens", response_model=TokenList)
def list_tokens(user: User = Depends(current_user), session: Session = Depends(db_session)):
    """``{"tokens": [{"id", "name", "prefix", "created_at", "last_used_at", "revoked_at"}]}``."""
    return {"tokens": [tokens.token_dict(t) for t in tokens.list_tokens(session, user)]}


@router.delete("/tokens/{token_id}", status_code=204, responses=error_responses(404))
def revoke_token(token_id: str, user: User = Depends(current_user), session: Session = Depends(db_session)) -> Response:
    """Revoke a token: requests with it fail from now on. 404 for another user's or a missing id."""
    tokens.revoke_token(session, user, parse_id(token_id, "token"))
    return Response(status_code=204)


@router.get("/memes/{meme_id}/signed-url", responses=error_responses(401, 404), response_model=SignedUrl)
def signed_url(
    meme_id: str,
    ttl_seconds: int | None = Query(None, ge=1, le=media_urls.MAX_TTL_SECONDS),
    thumbnail: bool = False,
    principal: Principal = Depends(current_principal),
    session: Session = Depends(db_session),
):
    """A link to the meme's bytes (or thumbnail) that works without signing in until it expires (at
    most a day) or the user is disabled or changes the password:
    ``{"url": "/media/{id}?exp=…&kid=…&u=…&sig=…", "expires_at"}``; default lifetime
    ``MEWDEX_MEDIA_URL_TTL_SECONDS``."""
    scope = principal.scope
    found = memes.find(session, scope, parse_id(meme_id))
    if found is None:
        raise ApiError(404, "not_found", "meme not found")
    path = f"/media/{found.id}" + ("/thumbnail" if thumbnail else "")
    url, exp = media_urls.sign(principal.user, path, ttl_seconds or get_settings().media_url_ttl_seconds)
    return {"url": url, "expires_at": datetime.fromtimestamp(exp, UTC).isoformat()}
