"""The process's one table of routes, shared by every app it creates.

FastAPI (≥ 0.137) keeps an included router as a node and builds its routes' request state (response
fields, dependants) for each app at that app's first requests: 0.75 s of CPU per app for mewdex's
~300 routes, paid by every server's first request and by every app a test builds. :func:`table`
includes the routers once per process into one
:class:`~fastapi.APIRouter` whose nodes keep what they built; :func:`create_app
<mewdex.web.app.create_app>` puts that table's nodes in each app's routes.

An app's ``dependency_overrides`` (FastAPI's, which tests use) still apply: the table's provider of
overrides is :data:`SERVING_APP`, which reads those of the app serving the current request (set by
:class:`ServingApp`, the outermost middleware, from the ASGI ``scope["app"]``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any

from fastapi import APIRouter
from starlette.types import ASGIApp, Receive, Scope, Send

_serving: ContextVar[Any] = ContextVar("mewdex_serving_app", default=None)


class _ServingAppOverrides:
    """The ``dependency_overrides_provider`` of the shared table: FastAPI reads its
    ``dependency_overrides`` when it solves a request's dependencies; they are the serving app's."""

    @property
    def dependency_overrides(self) -> dict[Callable[..., Any], Callable[..., Any]]:
        app = _serving.get()
        return app.dependency_overrides if app is not None else {}


SERVING_APP = _ServingAppOverrides()


class ServingApp:
    """ASGI middleware (outermost): records the app serving the request (``scope["app"]``, set by
    Starlette) for :data:`SERVING_APP`, for the request's whole handling."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = _serving.set(scope.get("app"))
        try:
            await self.app(scope, receive, send)
        finally:
            _serving.reset(token)


_tables: dict[tuple[int, ...], APIRouter] = {}
_lock = threading.Lock()


def table(routers: Sequence[APIRouter], responses: dict[int | str, dict[str, Any]]) -> APIRouter:
    """One router including ``routers`` in order, with ``responses`` (the app-wide error answers, as
    ``FastAPI(responses=…)`` gives them), built once per process for the same routers (another set,
    e.g. after a capability package was added, gets a table of its own)."""
    key = tuple(id(r) for r in routers)
    with _lock:
        found = _tables.get(key)
        if found is None:
            found = APIRouter(responses=responses, dependency_overrides_provider=SERVING_APP)
            for router in routers:
                found.include_router(router)
            _tables[key] = found
    return found
