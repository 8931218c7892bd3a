"""The channels of this installation, declared in one place: :data:`BUILTIN`.

How a channel package plugs in
------------------------------
A channel is a package ``mewdex.channels.<name>`` (``telegram``, ``onebot``, …) and one line in
:data:`BUILTIN`. Its ``__init__.py`` imports nothing heavy and declares the channel::

    from mewdex.channels.registry import Channel

    CHANNEL = Channel(
        name="discord",                                   # channel_bindings.channel; the package's name
        modules=("mewdex.channels.discord.adapter",),     # imported in every process: the module that
                                                          # calls base.register_adapter(...), task types,
                                                          # a module-level schedules() (a poller)
        routes="mewdex.channels.discord.routes",          # optional: HTTP routes (below), web process only
        # errors={...}: optional, the package's own error codes → HTTP status
        #   (OneBot declares {"onebot_not_connected": 503})
        locales=Path(__file__).parent / "locales",        # optional: its words, {en,zh}.json
    )

* **Adapter**: one of ``modules`` registers an instance of the adapter contract
  (:class:`mewdex.channels.base.ChannelAdapter`) with :func:`mewdex.channels.base.register_adapter`
  under ``CHANNEL.name``. Platform calls use :mod:`mewdex.channels.platform` (``call_json``,
  :class:`~mewdex.channels.platform.PlatformError`, ``failure`` → ``DeliveryFailed``, ``multipart``,
  ``fetch_image``).
* **Set-up routes**: ``routes`` names a module with ``def router(web: WebKit) -> fastapi.APIRouter``.
  The web app imports it (only the web app: a worker never loads FastAPI) and mounts the router as
  it is, so the module chooses its paths: set-up under ``/api/v1/channels/<name>/…`` (session
  required), platform callbacks under ``/channels/<name>/…`` (no session: the route checks the
  platform's own signature or secret). The module may import ``fastapi``/``starlette`` (the one
  exception of the ``no-web-below-interfaces`` contract, for ``mewdex.channels.*.routes``) but never
  ``mewdex.web``: what it needs of the web layer comes in the :class:`WebKit`. Errors are raised as
  :class:`mewdex.channels.errors.ChannelError` (or any ``DomainError``) with a code; the web layer
  answers with that code's status.
* **Error codes**: ``errors`` maps the package's own codes (``wecom_ip_not_trusted``) to their HTTP
  status; :func:`error_statuses` gives every channel's (and the framework's
  :data:`mewdex.channels.errors.STATUSES`) to ``mewdex.web.errors``.
* **Binding by a code**: an adapter with ``binds_by_code = True`` needs no card or route of its own:
  the Channels page shows the generic card, ``POST /api/v1/channels/<name>/code`` gives a one-time
  code, and the chat message that carries it sets ``Inbound.bind_code`` (the framework binds).
* **Texts and guide**: ``locales`` names the package's own catalogues (``en.json``, ``zh.json``:
  ``channels.name.<name>`` names it on the Channels page, ``bot.bind_help.<name>``, its card's and
  replies' words), added to the core ones when it loads (:func:`mewdex.dto.i18n.add_messages`; a key
  may not repeat one of the core's); ``mewdex/channels/guides/<name>.md`` is its set-up guide
  (``/help/channels/<name>``).

:func:`load` imports every built-in channel once per process (the runtime's task-type loading, the
web app at start-up); a built-in channel that cannot be found is :class:`ChannelMissing`, never
skipped.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

from mewdex.channels.base import ChannelAdapter
from mewdex.channels.errors import ChannelError
from mewdex.dto import i18n

#: The built-in channel packages, in the order the Channels page lists them. A new channel adds one line.
BUILTIN: tuple[str, ...] = (
    "mewdex.channels.telegram",
    "mewdex.channels.webhook",
    "mewdex.channels.onebot",
    "mewdex.channels.wecom",
    "mewdex.channels.clawbot",
    "mewdex.channels.discord",
)


#: The framework's own words (saving from a chat: ``bot.save.*``), added to the catalogues on :func:`load`.
FRAMEWORK_LOCALES = Path(__file__).parent / "locales"


@dataclass(frozen=True)
class Channel:
    """A channel package's declaration (module doc): ``name``, ``modules`` imported in every process
    (adapter, task types, ``schedules()``), ``routes`` (a module with ``router(web) -> APIRouter``,
    imported by the web app only; None: no routes of its own), ``errors`` (its own code → HTTP status),
    ``locales`` (a directory of its own ``{en,zh}.json`` catalogues; None: its words are in the core's)."""

    name: str
    modules: tuple[str, ...]
    routes: str | None = None
    errors: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    locales: Path | None = None


@dataclass(frozen=True)
class WebKit:
    """What the web layer lends a channel's routes (so that no channel package imports ``mewdex.web``).

    - ``db_session``: a FastAPI dependency, the request's ``Session`` in a transaction (committed
      after the handler returns);
    - ``current_scope``: a dependency, the caller's ``ScopeContext`` (401 ``auth_required`` without
      a session);
    - ``require_admin``: a dependency, 403 ``admin_required`` unless the caller is an admin;
    - ``public_base_url``: ``request → "https://host[:port]"`` this installation is reached at (the
      callback URLs a platform is given).

    The API's view of a binding is :func:`mewdex.channels.bindings.api_view`.
    """

    db_session: Callable[..., Any]
    current_scope: Callable[..., Any]
    require_admin: Callable[..., Any]
    public_base_url: Callable[[Any], str]


class ChannelMissing(RuntimeError):
    """A built-in channel's package is not there or does not declare ``CHANNEL`` (a broken install)."""


#: The registered adapters by name (:func:`register_adapter`).
ADAPTERS: dict[str, ChannelAdapter] = {}
_loaded: dict[str, Channel] = {}
_lock = threading.RLock()


def _declaration(package: str) -> Channel:
    try:
        module: ModuleType = importlib.import_module(package)
    except ModuleNotFoundError as exc:
        if exc.name is not None and package.startswith(exc.name):
            raise ChannelMissing(f"the built-in channel {package} is missing from this installation") from exc
        raise
    declared = getattr(module, "CHANNEL", None)
    if not isinstance(declared, Channel) or declared.name != package.rsplit(".", 1)[-1]:
        raise ChannelMissing(f"{package} does not declare CHANNEL = Channel(name={package.rsplit('.', 1)[-1]!r}, …)")
    return declared


def load() -> dict[str, Channel]:
    """Import every built-in channel (its ``modules``) once; ``{name: Channel}`` in :data:`BUILTIN`
    order. Raises :class:`ChannelMissing` for a built-in channel that is not there, or whose modules
    do not register its adapter."""
    with _lock:
        if len(_loaded) == len(BUILTIN):
            return dict(_loaded)
        i18n.add_messages(FRAMEWORK_LOCALES)
        for package in BUILTIN:
            declared = _declaration(package)
            if declared.locales is not None:
                i18n.add_messages(declared.locales)
            for name in declared.modules:
                importlib.import_module(name)
            if declared.name not in ADAPTERS:
                raise ChannelMissing(f"{package}: no module of CHANNEL.modules registers the {declared.name!r} adapter")
            _loaded[declared.name] = declared
        return dict(_loaded)


def register_adapter(instance: ChannelAdapter) -> ChannelAdapter:
    """Register ``instance`` under ``instance.name`` (a channel's adapter module does this once, at import)."""
    ADAPTERS[instance.name] = instance
    return instance


def adapter(name: str) -> ChannelAdapter:
    """The adapter of ``name`` (the channels are loaded first); ``ChannelError("channel_unknown")`` (404) otherwise."""
    if name not in ADAPTERS:
        load()
    found = ADAPTERS.get(name)
    if found is None:
        raise ChannelError("channel_unknown", f"no channel named {name!r}")
    return found


def channels() -> list[Channel]:
    """Every built-in channel (:func:`load`), in :data:`BUILTIN` order."""
    return list(load().values())


def error_statuses() -> dict[str, int]:
    """The channel error codes and their HTTP statuses: the framework's
    (:data:`mewdex.channels.errors.STATUSES`) and each channel's ``errors``."""
    from mewdex.channels.errors import STATUSES

    found = dict(STATUSES)
    for declared in channels():
        found.update(declared.errors)
    return found
