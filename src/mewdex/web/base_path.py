"""Serving under a sub-path (``MEWDEX_BASE_PATH``, README "Deploying"): the proxy strips the prefix
(nginx ``location /memes/ { proxy_pass http://127.0.0.1:8275/; }``, Caddy ``handle_path /memes/*``)
and :class:`BasePath` puts it back, as the ASGI spec and ``uvicorn --root-path`` do: ``root_path`` is
the base path and ``path`` starts with it. Routing strips it again (Starlette's ``get_route_path``),
so every URL mewdex builds from the request (``request.url``, ``url_for``, ``base_url``, the OpenAPI
``servers``) carries it; pages use ``base`` (:func:`mewdex.web.templating.render`) and scripts
``document.documentElement.dataset.base``; redirects and cookies use :func:`prefix` and
:func:`cookie_path`."""

from __future__ import annotations

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from mewdex.config import get_settings


class BasePath:
    """ASGI middleware (outermost): ``root_path`` = ``MEWDEX_BASE_PATH`` and ``path`` prefixed with it,
    for HTTP and WebSocket requests; nothing changes when the setting is empty."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        base = get_settings().base_path
        if base and scope["type"] in ("http", "websocket"):
            scope = dict(scope)
            scope["root_path"] = base
            scope["path"] = base + scope["path"]
            if isinstance(scope.get("raw_path"), bytes):
                scope["raw_path"] = base.encode("ascii") + scope["raw_path"]
        await self.app(scope, receive, send)


def route_path(scope: Scope) -> str:
    """The request's path under the base path (``/memes/library`` → ``/library``): what routes, body
    limits, signed links and ``next=`` values name."""
    path, base = str(scope.get("path", "")), str(scope.get("root_path", ""))
    if base and (path == base or path.startswith(base + "/")):
        return path[len(base) :] or "/"
    return path


def root(conn: HTTPConnection) -> str:
    """The request's base path: ``/memes`` or ``""`` (no trailing slash)."""
    return str(conn.scope.get("root_path", "")).rstrip("/")


def prefix(conn: HTTPConnection, path: str) -> str:
    """A local path (``/login?next=…``) as the browser must ask for it: under the base path."""
    return root(conn) + path


def cookie_path(conn: HTTPConnection) -> str:
    """The ``Path`` of mewdex's cookies: the base path (``/`` at the root)."""
    return root(conn) or "/"
