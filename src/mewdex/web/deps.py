"""Request dependencies: a database session, the authenticated principal and its scope.

The scope comes ONLY from the principal (session cookie, ``Authorization: Bearer mdx_…`` token,
a signed media URL, or — in single-user mode, for requests from this machine only (see
:mod:`mewdex.web.security`) — the default local scope); never from a body or
query. Cookie-authenticated state-changing requests must echo the session's CSRF token in
``X-CSRF-Token`` (bearer-token requests are exempt: browsers never send them on their own).
"""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

from fastapi import Depends, Request, Security
from fastapi.security import HTTPBearer
from sqlalchemy.orm import Session, sessionmaker
from starlette.requests import HTTPConnection

from mewdex.config import get_settings
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import User
from mewdex.dto.scopes import ScopeContext
from mewdex.library.scopes import default_scope
from mewdex.platform import media_urls, sessions, tokens
from mewdex.platform.auth import Principal, auth_mode
from mewdex.web.base_path import route_path
from mewdex.web.errors import ApiError
from mewdex.web.security import cookies_secure, is_local

STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}

#: The OpenAPI security scheme ``bearer`` of every route with a caller (Swagger UI's Authorize button
#: on ``/docs``). Documentation only: :func:`resolve_principal` reads the header itself, and a
#: missing or malformed one is its 401, not this scheme's.
BEARER = HTTPBearer(
    scheme_name="bearer",
    bearerFormat="mdx_…",
    description="An API token (`mdx_…`) made on the account page or with `mewdex login`; "
    "calls with it need no CSRF token.",
    auto_error=False,
)


def session_cookie_names(request: Request) -> tuple[str, str]:
    """This request's ``(session, csrf)`` cookie names (``__Host-`` prefixed when its cookies are Secure:
    see :func:`mewdex.web.security.cookies_secure` and :func:`mewdex.platform.sessions.cookie_names`)."""
    return sessions.cookie_names(cookies_secure(request.url.scheme, request.url.hostname))


def _transaction() -> Iterator[Session]:
    with get_sessionmaker().begin() as session:
        yield session


def app_sessions(connection: HTTPConnection) -> sessionmaker[Session]:
    """The ``sessionmaker`` of the request's (or WebSocket's) app: the one it was given
    (``app.state.sessions``), else the process's (:func:`mewdex.db.engine.get_sessionmaker`)."""
    return getattr(connection.app.state, "sessions", None) or get_sessionmaker()


async def db_session(session: Session = Depends(_transaction, scope="function")) -> Session:
    """The request's session; its transaction commits when the route returns, BEFORE the response is
    sent (FastAPI's default for ``yield`` dependencies is after it: a client that got its 2xx could
    read the old state, and a failed commit would go unreported). A coroutine, as the other
    dependencies that only pass a value on: FastAPI runs a plain function dependency in a worker
    thread (a thread hop each, costly for the event loop under load)."""
    return session


def bind_host(request: Request) -> str:
    return getattr(request.app.state, "bind_host", None) or get_settings().host


def current_principal(
    request: Request, session: Session = Depends(db_session), _bearer: object = Security(BEARER)
) -> Principal:
    """The caller; 401 ``auth_required`` / ``invalid_token`` / ``signature_invalid``, 403 ``csrf_failed``.
    Also kept in ``request.state.principal`` (pages show who is signed in)."""
    principal = resolve_principal(request, session)
    request.state.principal = principal
    return principal


def resolve_principal(request: Request, session: Session) -> Principal:
    """The caller of ``request`` (:func:`current_principal` without keeping it); raises as it does."""
    params = request.query_params
    path = route_path(request.scope)  # signed as the path under the base path (MEWDEX_BASE_PATH)
    if path.startswith("/media/") and any(k in params for k in ("sig", "exp", "kid", "u")):
        valid, link_user = media_urls.verify(session, path, params)
        if not valid:
            raise ApiError(401, "signature_invalid", "the media link is invalid or has expired")
        scope = ScopeContext(link_user.scope_id) if link_user is not None else default_scope()
        return Principal(scope, None, "signed_url")
    authorization = request.headers.get("authorization")
    if authorization is not None:
        scheme, _, value = authorization.partition(" ")
        found = tokens.resolve_token(session, value.strip()) if scheme.lower() == "bearer" else None
        if found is None:
            raise ApiError(401, "invalid_token", "the API token is invalid, expired or revoked")
        principal = Principal(
            ScopeContext(found[1].scope_id),
            found[1],
            "token",
            token_scopes=frozenset(found[0].scopes or ()),
            token_expires_at=found[0].expires_at,
        )
        needed = "write" if request.method in STATE_CHANGING else "read"
        if not principal.may(needed):
            raise ApiError(403, "insufficient_scope", f"this API token lacks the {needed!r} scope", {"needed": needed})
        return principal
    cookie = request.cookies.get(session_cookie_names(request)[0])
    if cookie:
        signed_in = sessions.resolve_session(session, cookie)
        if signed_in is not None:
            user_session, user = signed_in
            if request.method in STATE_CHANGING and not sessions.csrf_ok(
                user_session.csrf_token, request.headers.get(sessions.CSRF_HEADER)
            ):
                raise ApiError(403, "csrf_failed", f"missing or wrong {sessions.CSRF_HEADER} header")
            return _user_principal(user, "session", cookie)
    if auth_mode(session, bind_host(request)) == "none":
        if not is_local(request):  # a proxy, tunnel or another machine: never the local admin
            raise ApiError(401, "auth_required", "no-login mode serves only this machine; sign in or send an API token")
        return Principal(default_scope(), None, "none")
    raise ApiError(401, "auth_required", "sign in or send an API token")


def _user_principal(user: User, via: str, session_value: str | None = None) -> Principal:
    return Principal(ScopeContext(user.scope_id), user, via, session_value)


async def current_scope(principal: Principal = Depends(current_principal)) -> ScopeContext:
    """The request's scope: the authenticated principal's (single-user mode: the local scope)."""
    return principal.scope


def streaming_scope(request: Request, _bearer: object = Security(BEARER)) -> ScopeContext:
    """:func:`current_scope` for routes that stream a request body (uploads, imports, search by
    image): authenticated in a transaction of its own that ends before the route reads the body,
    so no database connection is held while a slow client sends (the route opens its own
    transactions afterwards)."""
    with get_sessionmaker().begin() as session:
        return current_principal(request, session).scope


async def current_user_id(request: Request, scope: ScopeContext = Depends(current_scope)) -> UUID | None:
    """The signed-in account's id beside :func:`current_scope` (what a shared collection is shared
    with); None in single-user mode, for a signed media URL and when no account stands behind the scope."""
    principal = getattr(request.state, "principal", None)
    if principal is None or principal.user is None or principal.scope.scope_id != scope.scope_id:
        return None
    return principal.user.user_id


def current_user(principal: Principal = Depends(current_principal)) -> User:
    """The signed-in user; 409 ``no_accounts`` in single-user mode (no account to act as)."""
    if principal.user is None:
        if principal.via == "none":
            raise ApiError(409, "no_accounts", "single-user mode has no accounts; create one to use this")
        raise ApiError(401, "auth_required", "sign in or send an API token")
    return principal.user


def require_admin(principal: Principal = Depends(current_principal)) -> Principal:
    """An admin (or the local admin of single-user mode); everyone else gets 404 like a missing route."""
    if not principal.is_admin:
        raise ApiError(404, "not_found", "Not Found")
    return principal


def parse_id(value: str, what: str = "meme") -> UUID:
    """A path id as UUID; anything else answers 404 exactly like a missing id."""
    try:
        return UUID(value)
    except ValueError:
        raise ApiError(404, "not_found", f"{what} not found") from None


def public_base_url(request: Request) -> str:
    """The base links handed to people start with: ``MEWDEX_PUBLIC_URL`` when set, else the request's
    own base URL (no trailing slash)."""
    return (get_settings().public_base() or str(request.base_url)).rstrip("/")
