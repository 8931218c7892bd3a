"""The web layer as a shell that mounts the capability packages (docs/architecture.md "A capability
is a package"): it lends them its dependencies once per process (:data:`WEB_KIT`,
:func:`mewdex.capability.lend`) before any of their ``routes`` modules is imported, and mounts what
each declares (:class:`mewdex.capability.Capability`, hook ``capabilities``) without naming one: its
routes (:func:`routers`), its ``static/`` folder under ``/static/`` (:func:`static_packages`,
:mod:`mewdex.web.app`) and its templates under its name (:mod:`mewdex.web.templating`).

Order: as the capabilities are declared (``hooks.BUILTIN_PLUGINS``: connectors, assistant, the
channel framework, each channel package, schedules, backups), then third-party ones as they were
provided; each after the shell's own routes (no capability's path overlaps another's or the shell's:
``tests/unit/test_capabilities.py``).
"""

from __future__ import annotations

import importlib

from fastapi import APIRouter

from mewdex import capability, hooks
from mewdex.capability import Capability, WebKit
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


def declarations() -> list[Capability]:
    """Every capability's declaration, in mounting order (their plugins imported first)."""
    return list(hooks.implementations("capabilities").values())


def routers() -> list[APIRouter]:
    """Each declared ``routes`` module's ``router``, built once per process when the module is first
    imported (here: only the web app imports it); every app mounts the same one and hands it its own
    state through the lent dependencies."""
    return [importlib.import_module(c.routes).router for c in declarations() if c.routes is not None]


def static_packages() -> list[str]:
    """The modules whose folder's ``static/`` is served under ``/static/`` after the shell's own: the
    provider of each declaration with ``static`` (``hooks.provider_of``, its package's ``__init__``)."""
    return [hooks.provider_of("capabilities", c.name) for c in declarations() if c.static]
