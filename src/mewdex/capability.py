"""What a capability package declares to the web layer, and what its routes get of it
(docs/architecture.md "A capability is a package").

- :class:`Capability`: a package's declaration, provided to the hook ``capabilities`` by its
  ``__init__`` (``CAPABILITY = hooks.provide("capabilities", name, Capability(...))``; a channel
  package's :class:`mewdex.channels.registry.Channel` is one, provided by ``registry.declare``): the
  HTTP status of each of its own error codes, which the web layer gathers
  (:func:`mewdex.web.errors.all_statuses`), its page's link in the header (:class:`NavEntry`,
  rendered with the shell's own by :func:`mewdex.web.templating.nav`), and what the web layer
  mounts of it: its routes module, its templates, its ``static/`` folder;
- :class:`WebKit`: the dependencies the web layer lends once per process (:func:`lend`), before it
  imports any package's ``routes`` module, which reads it at import (:func:`web_kit`).

A capability's routes module (a channel's ``routes.py``, the channel framework's ``channels/routes.py``,
``schedules/routes.py``, ``providers/connectors/routes.py``, ``assistant/routes.py``) imports FastAPI but never
``mewdex.web``; every app that mounts its module-level router hands it its own state through these
dependencies (its sessionmaker, its ``dependency_overrides``). A low module (standard library
only), so that a package of any layer can read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class NavEntry:
    """A link of the header's nav: ``path`` under the base path (``/schedules``), ``label`` its
    catalogue key (``nav.schedules``), ``page`` the ``page`` of the templates it is current on
    (``aria-current="page"``; also on those of ``current_on``), ``order`` its place among every entry
    (the shell's: search 10, library 20, upload 30, collections 40, tags 50, tasks 80),
    ``admin_only``: shown only to an admin (who passes the web layer's ``require_admin``)."""

    page: str
    path: str
    label: str
    order: int
    admin_only: bool = False
    current_on: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Capability:
    """A capability package's declaration (hook ``capabilities``, by ``name``), all the web layer
    mounts of it (it names no package itself: :mod:`mewdex.web.capabilities`). Its *package folder*
    is the folder of the module that provides it (``hooks.provider_of("capabilities", name)``: the
    package's ``__init__``; a channel's, through ``registry.declare``).

    - ``errors`` maps its own error codes (``schedule_limit_reached``) to the HTTP status the API
      answers them with (a code neither the core nor a capability declares is a request fault, 422;
      no code is declared twice);
    - ``nav``: the header's links to its pages (:class:`NavEntry`);
    - ``routes``: a module (``"mewdex.schedules.routes"``) with a module-level ``router:
      fastapi.APIRouter``, imported by the web app only (a worker never loads it) and mounted as it
      is, in the order the capabilities are declared (``hooks.BUILTIN_PLUGINS``, then third-party
      ones); None: no routes of its own;
    - ``templates``: its package folder is mounted under its ``name`` in the web layer's templates
      (``schedules/page.html`` is ``mewdex/schedules/page.html``), rendered with the kit's ``render``;
    - ``static``: its package folder's ``static/`` is served under ``/static/`` beside the shell's
      own (``/static/schedules.js``; no file name repeats another's).
    """

    name: str
    errors: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    nav: tuple[NavEntry, ...] = ()
    routes: str | None = None
    templates: bool = False
    static: bool = False


@dataclass(frozen=True)
class WebKit:
    """What the web layer lends a capability's routes (so that no capability package imports ``mewdex.web``).

    - ``db_session``: a FastAPI dependency, the request's ``Session`` in a transaction (committed
      after the handler returns);
    - ``current_principal``: a dependency, the caller (``mewdex.platform.auth.Principal``; 401
      ``auth_required`` without a session, 403 ``csrf_failed``), also kept in ``request.state.principal``;
    - ``current_scope``: a dependency, the caller's ``ScopeContext`` (401 ``auth_required`` without
      a session);
    - ``require_admin``: a dependency, the caller's ``Principal`` when an admin, else 404 ``not_found``;
    - ``public_base_url``: a dependency, the ``"https://host[:port]"`` this installation is reached
      at (the callback URLs a platform is given);
    - ``sessions``: a dependency, the ``sessionmaker`` of the request's (or WebSocket's) app, for
      work a route does in its own transactions (platform callbacks, off the event loop);
    - ``render``: ``render(request, "<package>/<template>.html", context)``, a page in the request's
      language (the web layer's templates mount each package's under its name);
    - ``parse_id``: ``parse_id(value, what) -> UUID``, 404 ``not_found`` for anything else;
    - ``streaming_scope``: a dependency, :attr:`current_scope` for a route that streams a request body
      (authenticated in a transaction of its own that ends before the body is read);
    - ``page_language``: ``page_language(request) -> "en" | "zh" | None``, the language of the page
      that sent the request (None: a script's request names none);
    - ``read_query_image``: ``await read_query_image(request, max_bytes=…) -> (bytes, file name, fields)``,
      the image of a multipart body (field ``file``) bounded while it streams;
    - ``upload_slot``: ``async with upload_slot(scope_id)``, one of the scope's concurrent-upload slots
      (429 ``too_many_uploads``).
    """

    db_session: Callable[..., Any]
    current_scope: Callable[..., Any]
    require_admin: Callable[..., Any]
    public_base_url: Callable[..., str]
    sessions: Callable[..., Any]
    current_principal: Callable[..., Any]
    render: Callable[..., Any]
    parse_id: Callable[..., Any]
    streaming_scope: Callable[..., Any]
    page_language: Callable[..., Any]
    read_query_image: Callable[..., Any]
    upload_slot: Callable[..., Any]


_web: WebKit | None = None


def lend(kit: WebKit) -> None:
    """The web layer lends its dependencies to the capabilities' routes (once per process, before it
    imports a ``routes`` module)."""
    global _web
    _web = kit


def web_kit() -> WebKit:
    """The :class:`WebKit` the web layer lent (:func:`lend`); a ``routes`` module reads it at import.
    ``RuntimeError`` outside the web layer (a worker never imports a ``routes`` module)."""
    if _web is None:
        raise RuntimeError("a capability's routes are imported by the web layer only (mewdex.capability.lend first)")
    return _web
