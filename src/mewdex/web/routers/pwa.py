"""The web UI as an installable app (README "Web UI"): the Web App Manifest with a Web Share Target,
the service worker, and the share target's server side.

* ``GET /manifest.webmanifest`` — name and description in the page's language, icons (192/512 px and
  a maskable one), ``display: standalone``, and ``share_target``: a picture shared from the phone's
  gallery is POSTed (multipart, field ``files``) to ``/share-target``.
* ``GET /sw.js`` — the service worker (``static/sw.js``), served from the root so that its scope is
  the whole site. It caches the shell only (styles, scripts, icons) and catches the share target's
  POST: the files wait in the browser's Cache Storage and ``/upload?shared=N`` shows them as a proposal
  (a page on any site can post that form): they go through the normal upload path (``POST
  /api/v1/memes``: its limits, quota and CSRF check) only when the person presses Upload there, and
  Discard drops them.
* ``POST /share-target`` — reached only when no service worker caught the share (it was removed, or
  the browser has none): nothing is stored; 303 to ``/upload?shared=unavailable``, where the page says
  to open mewdex once and share again. The body is never read.

All three are public (a manifest is fetched without credentials) and carry no user data.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from mewdex.library.listing import MEDIA_TYPES_BY_EXTENSION
from mewdex.web import i18n
from mewdex.web.base_path import prefix, root
from mewdex.web.security import SHARE_TARGET_PATH

router = APIRouter(include_in_schema=False)

STATIC = Path(__file__).resolve().parents[1] / "static"
# the formats mewdex stores, with the other names HEIC and MP4 files are shared under
SHARED_TYPES = sorted({*MEDIA_TYPES_BY_EXTENSION.values(), "image/heif", "video/quicktime"})
THEME_COLOR = "#e4572e"  # the UI accent (mewdex.css --accent), the icon's background


def manifest(locale: str, base: str = "") -> dict:
    """The Web App Manifest (W3C ``appmanifest``) in ``locale`` ("en" or "zh"); every URL under ``base``
    (the base path, ``MEWDEX_BASE_PATH``: ``/memes`` or ``""``)."""
    _ = i18n.catalogue(locale)
    return {
        "id": base + "/",
        "name": _["app.name"],
        "short_name": _["app.name"],
        "description": _["pwa.description"],
        "lang": "zh-CN" if locale == "zh" else "en",
        "start_url": base + "/",
        "scope": base + "/",
        "display": "standalone",
        "background_color": "#ffffff",
        "theme_color": THEME_COLOR,
        "icons": [
            {"src": base + "/static/icons/icon-192.png", "sizes": "192x192", "type": "image/png"},
            {"src": base + "/static/icons/icon-512.png", "sizes": "512x512", "type": "image/png"},
            {
                "src": base + "/static/icons/icon-maskable-512.png",
                "sizes": "512x512",
                "type": "image/png",
                "purpose": "maskable",
            },
            {"src": base + "/static/icons/icon.svg", "sizes": "any", "type": "image/svg+xml"},
        ],
        "share_target": {
            "action": base + SHARE_TARGET_PATH,
            "method": "POST",
            "enctype": "multipart/form-data",
            "params": {
                "title": "title",
                "text": "text",
                "files": [{"name": "files", "accept": [*SHARED_TYPES, "image/*"]}],
            },
        },
    }


@router.get("/manifest.webmanifest")
def manifest_route(request: Request) -> JSONResponse:
    return JSONResponse(
        manifest(i18n.request_locale(request), root(request)),
        media_type="application/manifest+json",
        headers={"Cache-Control": "no-cache", "Vary": "Accept-Language, Cookie"},
    )


@router.get("/sw.js")
def service_worker() -> Response:
    """The service worker script; ``no-cache`` so that a new release's worker is picked up at once."""
    return Response(
        (STATIC / "sw.js").read_bytes(),
        media_type="text/javascript",
        headers={"Cache-Control": "no-cache", "Service-Worker-Allowed": "/"},
    )


@router.post(SHARE_TARGET_PATH)
def share_target_without_worker(request: Request) -> RedirectResponse:
    return RedirectResponse(prefix(request, "/upload?shared=unavailable"), status_code=303)
