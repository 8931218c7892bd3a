"""Request guards that run before any route (one pure ASGI middleware).

* No NUL in the URL (PostgreSQL text cannot hold it, so it could only fail deeper down): a path
  with ``%00`` is 404 ``not_found`` like any unknown id, a query string with it 422 ``invalid_request``.
* Same origin for changes: a browser that submits a form or script request from another site to this server says so in
``Sec-Fetch-Site: cross-site`` or in an ``Origin`` that is not this server's. Such POST, PUT,
PATCH or DELETE requests get 403 ``cross_site_request`` before any route runs. This is what
protects single-user mode (no session, hence no CSRF token) from any web page the owner visits;
signed-in sessions have the CSRF header on top. Requests with ``Authorization`` (API tokens,
never ambient in a browser) and non-browser clients (no such headers) pass.
"""

from __future__ import annotations

import json
from urllib.parse import unquote_to_bytes, urlsplit

from mewdex.web.errors import error_body

STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}


def cross_site(headers: dict[str, str]) -> bool:
    """True when a browser marked the request as coming from another site (``headers`` lower-cased)."""
    if "authorization" in headers:
        return False
    if headers.get("sec-fetch-site") == "cross-site":
        return True
    origin = headers.get("origin")
    if not origin:
        return False
    if origin == "null":  # sandboxed frames, file: pages
        return True
    ours = {headers.get("host", "").lower(), headers.get("x-forwarded-host", "").lower()}  # behind a proxy
    return urlsplit(origin).netloc.lower() not in ours


def _nul(raw: bytes) -> bool:
    return b"\x00" in unquote_to_bytes(raw)


async def _refuse(send, status: int, code: str, message: str) -> None:
    body = json.dumps(error_body(code, message)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RequestGuards:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            if _nul(scope.get("raw_path") or scope.get("path", "").encode()):  # no id or page has one
                return await _refuse(send, 404, "not_found", "not found")
            if _nul(scope.get("query_string", b"")):
                return await _refuse(send, 422, "invalid_request", "the query string contains a NUL character")
            if scope["method"] in STATE_CHANGING:
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
                if cross_site(headers):
                    return await _refuse(
                        send, 403, "cross_site_request", "requests from another site cannot change this library"
                    )
        await self.app(scope, receive, send)
