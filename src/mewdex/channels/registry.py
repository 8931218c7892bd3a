"""The channels of this installation: each is a built-in plugin of the hook ``channel_adapters``
(:data:`mewdex.hooks.BUILTIN_PLUGINS`, one line per channel, in the order the Channels page lists them).

How a channel package plugs in
------------------------------
A channel is a package ``mewdex.channels.<name>`` (``telegram``, ``onebot``, …) and one line in
:data:`mewdex.hooks.BUILTIN_PLUGINS` (``Plugin("mewdex.channels.<name>", {"channel_adapters":
("<name>",), …})``, with any ``sealed_settings``/``sealed_task_payloads`` it declares). Its
``__init__.py`` declares the channel and then imports its ``modules`` (importing the package is
using it: the hook registry imports it when its adapter is first looked up)::

    from mewdex.channels.registry import Channel, declare

    CHANNEL = Channel(
        name="discord",                                   # channel_bindings.channel; the package's name
        modules=("mewdex.channels.discord.adapter",),     # imported with the package: the module that
                                                          # calls register_adapter(...), task types,
                                                          # sealed fields, a module-level schedules()
        routes="mewdex.channels.discord.routes",          # optional: HTTP routes (below), web process only
        # errors={...}: optional, the package's own error codes → HTTP status
        #   (OneBot declares {"onebot_not_connected": 503})
        locales=Path(__file__).parent / "locales",        # optional: its words, {en,zh}.json
    )
    declare(CHANNEL)

* **Adapter**: one of ``modules`` provides an instance of the adapter contract
  (:class:`mewdex.channels.base.Adapter`) with :func:`register_adapter` (the hook
  ``channel_adapters``) under ``CHANNEL.name``. Platform calls use :mod:`mewdex.channels.platform`
  (``call_json``, :class:`~mewdex.channels.platform.PlatformError`, ``failure`` → ``DeliveryFailed``,
  ``multipart``, ``fetch_image``).
* **Sealed fields**: an instance setting or a task payload with sealed members is declared by the
  module that owns it, ``hooks.provide("sealed_settings", key, members)`` (``sealed_task_payloads``:
  by task type), and named in the package's ``Plugin`` line.
* **Set-up routes**: ``routes`` names a module with a module-level ``router: fastapi.APIRouter``,
  built once per process when the web layer first imports it (every app of the process mounts the
  same router: no per-app state lives in it). The web app imports it (only the web app: a worker
  never loads FastAPI) and mounts the router as it is, so the module chooses its paths: set-up under
  ``/api/v1/channels/<name>/…`` (session required), platform callbacks under ``/channels/<name>/…``
  (no session: the route checks the platform's own signature or secret). ``routes`` is a field of
  every :class:`mewdex.capability.Capability`: the web layer mounts the routes of every declaration
  of the hook ``capabilities`` (:mod:`mewdex.web.capabilities`), the channel framework's own
  (``mewdex.channels.routes``: the shared API, the guides, the Channels page) before the channels'.
  The module may import ``fastapi``/``starlette`` (the one exception of the
  ``no-web-below-interfaces`` contract, for ``mewdex.channels.*.routes`` and ``mewdex.channels.routes``)
  but never ``mewdex.web``: what it needs of the web layer are the FastAPI dependencies of the
  :class:`WebKit` the web layer lends once per process (:func:`lend`; the module reads it with
  :func:`web_kit` at import), so each request gets its own app's state (session, caller,
  sessionmaker, public URL; an app's ``dependency_overrides`` apply). Errors are raised as
  :class:`mewdex.channels.errors.ChannelError` (or any ``DomainError``) with a code; the web layer
  answers with that code's status.
* **Error codes**: ``errors`` maps the package's own codes (``wecom_ip_not_trusted``) to their HTTP
  status. A ``Channel`` is a :class:`mewdex.capability.Capability`: :func:`declare` provides it to
  the hook ``capabilities`` (and the package's ``Plugin`` line names it there), where the web layer
  gathers every capability's codes (:func:`mewdex.web.errors.all_statuses`; the framework's own are
  ``mewdex.channels.CAPABILITY.errors``).
* **Card**: ``card`` is its card on the Channels page as data, a setup schema of
  :mod:`mewdex.channels.card` (fields, buttons, what an answer reveals, …) that the framework's one
  generic card renders (``channels/card.html``, ``static/channel_card.js``; no channel needs a
  template or script of its own), and ``info`` the fields
  its adapter's ``status()`` adds to ``GET /api/v1/channels`` (:func:`info_fields`). How the page's
  linked chats show one of its bindings is declared too: ``shown_by`` (a key of the binding's config
  shown instead of its identity) and ``outbound_only`` (no pool or auto-save to set).
* **Third-party channels**: a plugin module (an entry point of ``mewdex.plugins``, or
  ``MEWDEX_TASK_MODULES``) that registers its adapter and calls :func:`declare` is listed by
  :func:`channels` after the built-in ones, with its card.
* **Binding by a code**: an adapter with ``binds_by_code = True`` needs no card or route of its own:
  the Channels page shows the one-time-code card (:func:`mewdex.channels.card.code_card`),
  ``POST /api/v1/channels/<name>/code`` gives a one-time code, and the chat message that carries it
  sets ``Inbound.bind_code`` (the framework binds).
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

from mewdex import hooks
from mewdex.capability import Capability, WebKit, lend, web_kit  # noqa: F401 - re-exported: what a channel's routes get
from mewdex.channels import card as card_schema
from mewdex.channels.base import ChannelAdapter
from mewdex.channels.errors import ChannelError
from mewdex.dto import i18n


def packages() -> tuple[str, ...]:
    """The built-in channel packages (the plugins that declare a ``channel_adapters`` name), in the
    order the Channels page lists them (nothing imported)."""
    return tuple(dict.fromkeys(hooks.declared("channel_adapters").values()))


#: Channels declared by third-party plugins (:func:`declare` of a package no built-in plugin names),
#: listed after the built-in ones.
_plugins: dict[str, Channel] = {}


@dataclass(frozen=True, kw_only=True)
class Channel(Capability):
    """A channel package's declaration (module doc), a :class:`~mewdex.capability.Capability` (its
    ``name``, ``errors``: its own code → HTTP status, and ``routes``: a module with a module-level
    ``router: APIRouter``, imported and mounted by the web app only; None: no routes of its own):
    ``modules`` imported in every process (adapter, task types, ``schedules()``),
    ``locales`` (a directory of its own ``{en,zh}.json`` catalogues; None: its words are in the core's),
    ``card`` (its card on the Channels page as a setup schema, :mod:`mewdex.channels.card`; None: the
    one-time-code card when its adapter binds by a code, else none), ``info`` (the fields its
    adapter's ``status()`` adds to its entry of ``GET /api/v1/channels``:
    name → ``(type, pydantic.Field(...))``), ``shown_by`` (the key of a binding's ``config`` that the
    Channels page shows a linked chat by, instead of its identity; the webhook's ``"url"``),
    ``outbound_only`` (no chat talks to it: a linked one has no pool and no auto-save to set)."""

    modules: tuple[str, ...]
    locales: Path | None = None
    card: tuple[card_schema.Block, ...] | None = None
    info: Mapping[str, tuple[Any, Any]] = field(default_factory=lambda: MappingProxyType({}))
    shown_by: str | None = None
    outbound_only: bool = False


class ChannelMissing(RuntimeError):
    """A built-in channel's package is not there or does not declare ``CHANNEL`` (a broken install)."""


#: The adapters loaded so far by name: the hook ``channel_adapters``'s live mapping (:func:`register_adapter`;
#: :func:`load` first for every channel).
ADAPTERS: dict[str, ChannelAdapter] = hooks.provided("channel_adapters")
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
    """Import every built-in channel (its package and ``modules``) once; ``{name: Channel}`` in
    :func:`packages` order. Raises :class:`ChannelMissing` for a built-in channel that is not there, or whose modules
    do not register its adapter."""
    with _lock:
        built_in = packages()
        if len(_loaded) == len(built_in):
            return dict(_loaded)
        for package in built_in:
            declared = _declaration(package)
            if declared.locales is not None:
                i18n.add_messages(declared.locales)
            for name in declared.modules:
                importlib.import_module(name)
            if declared.name not in ADAPTERS:
                raise ChannelMissing(f"{package}: no module of CHANNEL.modules registers the {declared.name!r} adapter")
            _loaded[declared.name] = declared
        return dict(_loaded)


def _with_plugins() -> dict[str, Channel]:
    """The built-in channels (:func:`load`) and then the third-party ones: the entry points are
    imported (once), and every channel a plugin declared whose adapter is provided is added."""
    found = load()
    hooks.implementations("channel_adapters")  # imports the third-party plugins (once)
    with _lock:
        for name, declared in _plugins.items():
            if name not in found and name in ADAPTERS:
                if declared.locales is not None:
                    i18n.add_messages(declared.locales)
                found[name] = declared
    return found


def declare(channel: Channel) -> Channel:
    """Provide ``channel`` to the hook ``capabilities`` and import ``channel.modules`` (a channel
    package's ``__init__`` calls this after ``CHANNEL = …``, so that importing the package provides
    its adapter). A channel no built-in plugin declares is a third-party plugin's: :func:`channels`
    lists it after the built-in ones. Returns ``channel``."""
    hooks.provide("capabilities", channel.name, channel, stacklevel=2)
    for name in channel.modules:
        importlib.import_module(name)
    if channel.name not in hooks.declared("channel_adapters"):
        with _lock:
            _plugins[channel.name] = channel
    return channel


def register_adapter(instance: ChannelAdapter) -> ChannelAdapter:
    """Provide ``instance`` as the ``channel_adapters`` implementation ``instance.name`` (a channel's
    adapter module does this once, at import)."""
    return hooks.provide("channel_adapters", instance.name, instance, stacklevel=2)


def adapter(name: str) -> ChannelAdapter:
    """The adapter of ``name`` (the channels are loaded first); ``ChannelError("channel_unknown")`` (404) otherwise."""
    if name not in ADAPTERS:
        load()
    found = hooks.get("channel_adapters", name)
    if found is None:
        raise ChannelError("channel_unknown", f"no channel named {name!r}")
    return found


def channels() -> list[Channel]:
    """Every channel: the built-in ones (:func:`load`) in :func:`packages` order, then those of
    third-party plugins (entry points, ``MEWDEX_TASK_MODULES``) that :func:`declare` a channel."""
    return list(_with_plugins().values())


def card(channel: Channel) -> tuple[card_schema.Block, ...]:
    """The blocks of ``channel``'s card: its declared ``card``, else the one-time-code card when its
    adapter binds by a code (:func:`mewdex.channels.card.code_card`), else none."""
    if channel.card is not None:
        return channel.card
    return card_schema.code_card() if ADAPTERS[channel.name].binds_by_code else ()


def info_fields() -> dict[str, tuple[Any, Any]]:
    """The fields the channels add to their entries of ``GET /api/v1/channels`` (``CHANNEL.info`` of
    each), gathered for the response's shape."""
    found: dict[str, tuple[Any, Any]] = {}
    for declared in channels():
        found.update(declared.info)
    return found
