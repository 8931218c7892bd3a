"""``GET /docs`` (Swagger UI) and ``GET /redoc`` (ReDoc) of ``/openapi.json``, working offline.

FastAPI's own pages load their scripts from a CDN, which the page CSP (``default-src 'self'``)
blocks and an offline machine cannot reach, and start Swagger UI with an inline script, which the
CSP blocks too. These pages load the assets that the ``fastapi-offline`` package ships (Swagger UI
and ReDoc bundles, mounted at :data:`ASSETS`) and start Swagger UI from ``/static/api-docs.js``.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from mewdex.web.base_path import root

router = APIRouter(include_in_schema=False)
ASSETS = "/docs-assets"
ASSET_DIR = Path(fastapi_offline.__file__).parent / "static"


def _page(title: str, head: str, body: str, base: str) -> HTMLResponse:
    return HTMLResponse(
        "<!doctype html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="{base}{ASSETS}/favicon.png">{head}</head><body>{body}</body></html>'
    )


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI over ``/openapi.json`` (assets from this server only; under ``MEWDEX_BASE_PATH``)."""
    base = escape(root(request))
    return _page(
        "mewdex API",
        f'<link rel="stylesheet" href="{base}{ASSETS}/swagger-ui.css">',
        f'<div id="swagger-ui" data-openapi-url="{base}/openapi.json"></div>'
        f'<script src="{base}{ASSETS}/swagger-ui-bundle.js"></script>'
        f'<script src="{base}/static/api-docs.js"></script>',
        base,
    )


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    """ReDoc over ``/openapi.json`` (assets from this server only; no web fonts)."""
    base = escape(root(request))
    return _page(
        "mewdex API (ReDoc)",
        "",
        f'<redoc spec-url="{base}/openapi.json"></redoc><script src="{base}{ASSETS}/redoc.standalone.js"></script>',
        base,
    )


def install(app: FastAPI) -> None:
    """Serve the pages and the packaged assets (the app is created with ``docs_url=None, redoc_url=None``)."""
    app.mount(ASSETS, StaticFiles(directory=ASSET_DIR), name="docs-assets")
    app.include_router(router)
