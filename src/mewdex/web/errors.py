"""API errors: stable snake_case codes in ``{"error": {"code", "message", "details"}}`` with the right status.

A browser opening a page (a GET that accepts ``text/html``, outside ``/api/``, ``/ui/``, ``/media/`` and
``/static/``) gets the same status as an HTML page in its language instead (``error.html``,
``not_found.html``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from mewdex import hooks
from mewdex.dto.errors import DomainError, ErrorBody, ErrorDetail, error_body  # noqa: F401 (re-exported)
from mewdex.web.base_path import prefix, route_path


class ApiError(DomainError):
    """An error the web layer itself raises (request shape, missing route targets) with its status."""

    def __init__(self, status: int, code: str, message: str, details: Any = None):
        super().__init__(code, message, details)
        self.status = status


# The core's map from a domain error's code to the HTTP status the API answers with; a capability
# package declares its own codes (``Capability.errors``, hook ``capabilities``: the schedules', the
# connectors', the assistant's, the channel framework's and each channel's), which :func:`all_statuses`
# gathers; codes listed nowhere are request faults (422).
STATUS_BY_CODE: dict[str, int] = {
    "not_found": 404,
    "invalid_credentials": 401,
    "auth_required": 401,
    "invalid_token": 401,
    "signature_invalid": 401,
    "admin_required": 403,
    "signup_disabled": 403,
    "password_login_disabled": 403,
    "account_disabled": 403,
    "oidc_state_invalid": 400,
    "oidc_denied": 403,
    "oidc_email_unverified": 403,
    "oidc_account_linked": 409,
    "oidc_unavailable": 502,
    "oidc_failed": 502,
    "oidc_token_invalid": 502,
    "csrf_failed": 403,
    "insufficient_scope": 403,
    "host_not_allowed": 421,
    "revision_conflict": 412,  # If-Match named an older revision (HTTP's "precondition failed")
    "operation_in_progress": 409,
    "text_not_ready": 409,
    "collection_name_taken": 409,
    "email_taken": 409,
    "ambiguous_id": 409,
    "signup_failed": 409,
    "grant_not_acquired": 409,
    "last_admin": 409,
    "cannot_delete_self": 409,
    "account_busy": 409,
    "too_many_tokens": 409,
    "too_many_links": 409,
    "too_many_members": 409,
    "blob_missing": 409,
    "task_not_retryable": 409,
    "task_not_cancellable": 409,
    "task_active": 409,
    "visual_not_ready": 409,
    "no_accounts": 409,
    "timezone_invalid": 422,
    "language_invalid": 422,
    "reset_link_invalid": 410,
    "user_disabled": 409,
    "public_url_missing": 409,
    "provider_failed": 502,
    "provider_invalid_output": 502,
    "provider_refused": 502,
    "provider_rate_limited": 503,
    "secret_undecryptable": 503,
    "quota_exceeded": 413,
    "upload_too_large": 413,
    "package_too_large": 413,
    "entry_too_large": 413,
    "compression_ratio_exceeded": 413,
    "too_many_items": 413,
    "image_too_large": 413,
    "too_many_entries": 413,
    "request_too_large": 413,
    "unsupported_media_type": 415,
    "invalid_cursor": 422,
    "invalid_request": 422,
    "rate_limited": 429,
    "queue_full": 429,
    "too_many_uploads": 429,
    "backend_unavailable": 503,
    "overloaded": 503,
    # re-captioning (issue 44)
    "caption_empty": 422,
    "caption_too_long": 422,
    "no_text_boxes": 422,
    "boxes_invalid": 422,
    "style_invalid": 422,
    "recaption_too_large": 413,
    "caption_font_missing": 503,
}


def all_statuses() -> dict[str, int]:
    """Every error code with its HTTP status: the core's (:data:`STATUS_BY_CODE`) and those each
    capability declares (``errors`` of the hook ``capabilities``' implementations, imported on first
    use: :class:`mewdex.capability.Capability`, a channel's ``CHANNEL``)."""
    found = dict(STATUS_BY_CODE)
    for declared in hooks.implementations("capabilities").values():
        found.update(declared.errors)
    return found


def http_status(code: str) -> int:
    """The HTTP status of a domain error code (:func:`all_statuses`; 422 when not listed)."""
    if code in STATUS_BY_CODE:
        return STATUS_BY_CODE[code]
    return all_statuses().get(code, 422)


def error_responses(*statuses: int) -> dict:
    """OpenAPI ``responses`` entries documenting the JSON error body for ``statuses``."""
    return {status: {"model": ErrorBody} for status in statuses}


# Paths whose answers are never whole pages (JSON, fragments the page scripts swap in, files).
_NOT_PAGES = ("/api/", "/ui/", "/media/", "/static/", "/mcp")
# The error page's wording by status (``errorpage.<kind>.title`` / ``.body``); 404 has a page of its own.
_PAGE_KINDS = {401: "forbidden", 403: "forbidden", 429: "busy", 503: "unavailable"}


def wants_page(request: Request) -> bool:
    """Whether the request is a browser opening a page (so an error answers as an HTML page)."""
    return (
        request.method in ("GET", "HEAD")
        and "text/html" in request.headers.get("accept", "")
        and not route_path(request.scope).startswith(_NOT_PAGES)
    )


# The pages' renderer (``web.templating.render``: template name, context, status → response), which
# registers itself when it is loaded; the templating module imports this one, not the other way.
PageRenderer = Callable[..., Response]
_render_page: PageRenderer | None = None


def set_page_renderer(render: PageRenderer) -> None:
    global _render_page
    _render_page = render


def error_page(
    request: Request, status: int, code: str | None = None, headers: dict[str, str] | None = None
) -> Response | None:
    """The HTML error page for ``status`` in the request's language; None when it cannot be rendered
    (the caller then answers with JSON)."""
    if _render_page is None:
        return None
    try:
        if status == 404:
            response = _render_page(request, "not_found.html", {"page": "none"}, status_code=404)
        else:
            kind = _PAGE_KINDS.get(status, "server" if status >= 500 else "bad_request")
            context = {"page": "none", "status": status, "kind": kind, "code": code}
            response = _render_page(request, "error.html", context, status_code=status)
    except Exception:  # noqa: BLE001 — a page that cannot render (database gone) falls back to JSON
        return None
    response.headers.update(headers or {})
    return response


def install(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain_error(request: Request, exc: DomainError):
        if isinstance(exc, ApiError):
            return _api_error(request, exc)
        status = http_status(exc.code)
        if wants_page(request) and (page := error_page(request, status, exc.code, exc.headers)) is not None:
            return page
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=status, headers=exc.headers)

    from mewdex.library.packages import (
        PackageError,  # not a DomainError yet (library/packages.py is being split)
    )

    @app.exception_handler(PackageError)
    async def _package_error(_request: Request, exc: PackageError):
        return JSONResponse(
            error_body(exc.code, exc.message, exc.details), status_code=all_statuses().get(exc.code, exc.status)
        )

    def _api_error(request: Request, exc: ApiError):
        if (
            exc.code == "auth_required"
            and request.method == "GET"
            and "text/html" in request.headers.get("accept", "")
            and not route_path(request.scope).startswith("/api/")
        ):
            # A browser opening a page without a session: the sign-in page, then back here, query included
            # (``/upload?shared=N`` is how the installed app's shared pictures find the upload page).
            # ``next`` is a path under the base path (MEWDEX_BASE_PATH), as every page's own links are.
            here = route_path(request.scope) + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(prefix(request, f"/login?next={quote(here, safe='/')}"), status_code=303)
        if wants_page(request) and (page := error_page(request, exc.status, exc.code, exc.headers)) is not None:
            return page
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=exc.status)

    from mewdex.queue.backpressure import QueueFull

    @app.exception_handler(QueueFull)
    async def _queue_full(_request: Request, exc: QueueFull):
        return JSONResponse(
            error_body(exc.code, str(exc), exc.details), status_code=429, headers={"Retry-After": str(exc.retry_after)}
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        if wants_page(request) and (page := error_page(request, 422, "invalid_request")) is not None:
            return page
        details = [{"loc": list(e.get("loc", ())), "msg": e.get("msg")} for e in exc.errors()]
        return JSONResponse(error_body("invalid_request", "the request is not valid", details), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        if wants_page(request) and (page := error_page(request, exc.status_code, code)) is not None:
            return page
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)
