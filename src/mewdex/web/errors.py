"""API errors: stable snake_case codes in ``{"error": {"code", "message", "details"}}`` with the right status."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from mewdex.platform.errors import PlatformError


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: Any = None):
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details


def error_body(code: str, message: str, details: Any = None) -> dict:
    return {"error": {"code": code, "message": message, "details": details}}


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorBody(BaseModel):
    """The body of every error response."""

    error: ErrorDetail


def error_responses(*statuses: int) -> dict:
    """OpenAPI ``responses`` entries documenting the JSON error body for ``statuses``."""
    return {status: {"model": ErrorBody} for status in statuses}


def install(app: FastAPI) -> None:
    @app.exception_handler(PlatformError)
    async def _platform_error(_request: Request, exc: PlatformError):
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=exc.status,
                            headers=exc.headers)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        if (exc.code == "auth_required" and request.method == "GET"
                and "text/html" in request.headers.get("accept", "") and not request.url.path.startswith("/api/")):
            # A browser opening a page without a session: the sign-in page, then back here.
            return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=exc.status)

    from mewdex.queue.backpressure import QueueFull

    @app.exception_handler(QueueFull)
    async def _queue_full(_request: Request, exc: QueueFull):
        return JSONResponse(error_body(exc.code, str(exc), exc.details), status_code=429,
                            headers={"Retry-After": str(exc.retry_after)})

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError):
        details = [{"loc": list(e.get("loc", ())), "msg": e.get("msg")} for e in exc.errors()]
        return JSONResponse(error_body("invalid_request", "the request is not valid", details), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException):
        code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)
