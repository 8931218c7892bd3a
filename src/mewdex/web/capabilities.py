"""The web layer as a shell that mounts the capability packages (docs/architecture.md "A capability
is a package"): it lends them its dependencies once per process (:data:`WEB_KIT`,
:func:`mewdex.capability.lend`) before any of their ``routes`` modules is imported, and names each
package only where it mounts it — its routes here (:func:`routers`), its templates in
:mod:`mewdex.web.templating` (under the package's name), its scripts and styles under ``/static/``
(:data:`STATIC_PACKAGES`, :mod:`mewdex.web.app`).
"""

from __future__ import annotations

import importlib

from fastapi import APIRouter

from mewdex import capability
from mewdex.capability import WebKit
from mewdex.web.deps import (
    app_sessions,
    current_principal,
    current_scope,
    db_session,
    parse_id,
    public_base_url,
    require_admin,
    streaming_scope,
)
from mewdex.web.i18n import page_language
from mewdex.web.templating import render
from mewdex.web.uploads import read_query_image, upload_slot

#: What a capability's routes get of the web layer (:class:`mewdex.capability.WebKit`).
WEB_KIT = WebKit(
    db_session=db_session,
    current_scope=current_scope,
    require_admin=require_admin,
    public_base_url=public_base_url,
    sessions=app_sessions,
    current_principal=current_principal,
    render=render,
    parse_id=parse_id,
    streaming_scope=streaming_scope,
    page_language=page_language,
    read_query_image=read_query_image,
    upload_slot=upload_slot,
)
capability.lend(WEB_KIT)

#: The capability packages with routes of their own (a module-level ``router``), in mounting order.
ROUTES = ("mewdex.providers.connectors.routes", "mewdex.assistant.routes", "mewdex.schedules.routes")

#: The packages whose ``static/`` folder is served under ``/static/`` beside the shell's own.
STATIC_PACKAGES = ("mewdex.providers.connectors", "mewdex.assistant", "mewdex.schedules")


def routers() -> list[APIRouter]:
    """Each capability's router (:data:`ROUTES`), built once per process when its module is first
    imported; every app mounts the same one and hands it its own state through the lent dependencies."""
    return [importlib.import_module(name).router for name in ROUTES]
