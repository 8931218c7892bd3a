"""Rendering the UI's pages: the Jinja2 templates of ``web/templates/`` and of every capability
package that declares ``templates`` (under its name: :class:`CapabilityTemplates`) with their
filters, and :func:`render`, which every page router and every capability's routes call.

:func:`render` adds what every page shows (the request's language and its catalogue for the
scripts, the header's server state, who is signed in, the header's nav links: :func:`nav`) and sends
``Cache-Control: no-store``; it also renders the browsers' error pages
(:func:`mewdex.web.errors.error_page`, registered on import).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from uuid import UUID

from fastapi import Request
from fastapi.templating import Jinja2Templates
from jinja2 import BaseLoader, ChoiceLoader, FileSystemLoader, PrefixLoader
from markupsafe import Markup

from mewdex import hooks
from mewdex.capability import NavEntry
from mewdex.db.engine import get_sessionmaker
from mewdex.dto.media import media_kind
from mewdex.library.images import page_element
from mewdex.library.names import saved_name
from mewdex.web import base_path, deps, errors, i18n
from mewdex.web.base_path import route_path
from mewdex.web.server_state import page_state


def package_folder(name: str) -> Path:
    """The package folder of the capability ``name``: the folder of the module that provided its
    declaration to the hook ``capabilities`` (its package's ``__init__``; ``hooks.provider_of``).
    ``LookupError`` when no loaded module provided it."""
    module = sys.modules.get(hooks.provider_of("capabilities", name))
    if module is None or module.__file__ is None:
        raise LookupError(f"the capability {name!r} was not provided by a loaded module")
    return Path(module.__file__).resolve().parent


def template_folders() -> dict[str, Path]:
    """Each capability that declares ``templates``: its name (the templates' prefix) → its package
    folder, in declaration order."""
    declared = hooks.implementations("capabilities")
    return {name: package_folder(name) for name, capability in declared.items() if capability.templates}


class CapabilityTemplates(PrefixLoader):
    """The capability packages' templates, each package folder under its name (``schedules/page.html``
    is ``mewdex/schedules/page.html``): read from the declarations (:func:`template_folders`) at each
    lookup of a template not yet compiled, so the web layer names no package."""

    def __init__(self) -> None:
        self.delimiter = "/"

    @property
    def mapping(self) -> dict[str, BaseLoader]:  # type: ignore[override]  # PrefixLoader's attribute, derived
        return {name: FileSystemLoader(folder) for name, folder in template_folders().items()}


templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
# The shell's own templates first, then each capability package's under its name (the admin page's
# backups card "backups/card.html" is src/mewdex/backups/card.html; the Channels page
# "channels/page.html" src/mewdex/channels/page.html).
templates.env.loader = ChoiceLoader([FileSystemLoader(Path(__file__).parent / "templates"), CapabilityTemplates()])


def filesize(n: float | None) -> str:
    """Bytes as ``512 B``, ``1.5 KB`` … ``2.0 GB``; empty for None."""
    if n is None:
        return ""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def when(value: datetime | str | None) -> Markup:
    """An instant as ``<time datetime="…Z" data-when>2026-12-03 18:33 UTC</time>``: the page's
    times.js rewrites the text in the reader's time zone (the account's, else the browser's) and the
    page's language with ``Intl.DateTimeFormat``; the UTC text is what a script-less reader sees."""
    if value is None or value == "":
        return Markup("")
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    utc = value.astimezone(UTC)
    return Markup('<time datetime="{}" data-when>{}</time>').format(
        utc.strftime("%Y-%m-%dT%H:%M:%SZ"), utc.strftime("%Y-%m-%d %H:%M UTC")
    )


templates.env.filters["filesize"] = filesize
templates.env.filters["when"] = when
templates.env.filters["page_element"] = page_element  # "video" | "image" | "thumbnail" of an extension
templates.env.filters["saved_name"] = saved_name  # display_name | saved_name(extension): "dance.webm"
templates.env.filters["media_kind"] = media_kind  # extension | media_kind(animated): "gif" | "clip" | "sticker" | None


#: The shell's own links of the header's nav; a capability's come with its declaration (``nav`` of
#: the hook ``capabilities``: chat 60, schedules 70, channels 90, connectors 100).
CORE_NAV: tuple[NavEntry, ...] = (
    NavEntry(page="search", path="/", label="nav.search", order=10),
    NavEntry(page="library", path="/library", label="nav.library", order=20, current_on=("meme", "trash")),
    NavEntry(page="upload", path="/upload", label="nav.upload", order=30),
    NavEntry(page="collections", path="/collections", label="nav.collections", order=40),
    NavEntry(page="tags", path="/tags", label="nav.tags", order=50),
    NavEntry(page="tasks", path="/tasks", label="nav.tasks", order=80),
)


def nav(admin: bool) -> list[NavEntry]:
    """The header's nav links in ``order``: :data:`CORE_NAV` and every capability's ``nav``, those
    ``admin_only`` only for an ``admin``."""
    declared = [entry for capability in hooks.implementations("capabilities").values() for entry in capability.nav]
    return sorted((e for e in (*CORE_NAV, *declared) if admin or not e.admin_only), key=lambda e: e.order)


def _error_page_principal(request: Request):
    """Who is signed in, for an error page no route resolved it for (an unknown path); None when it
    cannot be told (no credential, a bad one, the database gone)."""
    try:
        with get_sessionmaker()() as session:
            return deps.resolve_principal(request, session)
    except Exception:  # noqa: BLE001 — the error page is shown anyway, without the account
        return None


def render(request: Request, name: str, context: dict | None = None, status_code: int = 200):
    """Render ``name`` in the request's language (``_`` translates, ``messages`` feeds the scripts);
    ``Cache-Control: no-store``."""
    locale = i18n.request_locale(request)
    base = {
        "_": partial(i18n.translate, locale),
        "error_text": partial(i18n.error_text, locale),
        "lang": locale,
        "html_lang": i18n.HTML_LANG[locale],
        "messages": i18n.client_messages(locale),
        "base": base_path.root(request),  # every local href/src/action starts with it (MEWDEX_BASE_PATH)
        "path": route_path(request.scope),  # the page's path under the base path (``next=`` values)
        "query_string": request.url.query,
        "server_state": page_state(request),  # the header's badge: ok / degraded / unavailable
    }
    principal = getattr(request.state, "principal", None)
    if principal is None and status_code >= 400:
        principal = _error_page_principal(request)  # an error page keeps the header of the signed-in pages
    if principal is not None and principal.user is not None:  # accounts exist: who is signed in
        base["signed_in"] = {
            "id": str(principal.user.user_id),
            "email": principal.user.email,
            "admin": principal.is_admin,
        }
        base["time_zone"] = principal.user.time_zone  # times.js shows times in it (else the browser's)
    base["nav"] = nav(principal is not None and principal.is_admin)
    response = templates.TemplateResponse(request, name, {**base, **(context or {})}, status_code=status_code)
    # Pages show one account's data: never kept for the Back button after signing out, nor by a proxy.
    response.headers["Cache-Control"] = "no-store"
    return response


errors.set_page_renderer(render)  # error pages for browsers (mewdex.web.errors.error_page)


def not_found(request: Request):
    """The 404 page (a page's id that names nothing of the caller's)."""
    return render(request, "not_found.html", {"page": "none"}, status_code=404)


def parse_uuid(value: str) -> UUID | None:
    """``value`` as a UUID; None when empty or not one (a page filter or path id that names nothing)."""
    try:
        return UUID(value) if value else None
    except ValueError:
        return None
