"""The one way to extend mewdex: named hooks, the built-in plugins that implement them, and third-party
plugins found through Python entry points (as Datasette's plugin hooks are).

A **hook** (:data:`HOOKS`) is a named extension point: its implementations are values by name (a task
type by its name, a search leg by its leg name, …); a ``single`` hook keeps one implementation (the
search reranker, the eval gate). A **plugin** is a module that provides implementations when it is
imported, each with ``provide(hook, name, value)`` (or a hook's typed front door, e.g.
:func:`mewdex.queue.registry.register_task_type`, which calls it).

Built-in plugins are declared in :data:`BUILTIN_PLUGINS` with the names they provide, so the
registry knows what exists without importing anything: a plugin module is imported only when one
of its implementations is used (:func:`get`: a worker claiming a task of that type, a submit of
it; :func:`implementations`: every search leg for a search) — ``mewdex --help`` or ``mewdex
status`` never load the capabilities they do not use. ``mewdex worker`` and ``serve`` load every
plugin (:func:`load_all`).

Third-party plugins: a distribution declares its module in the entry-point group
:data:`ENTRY_POINT_GROUP` (``[project.entry-points."mewdex.plugins"] name = "package.module"``);
those, and the modules of ``MEWDEX_TASK_MODULES``, are undeclared: they are imported when every
implementation of a hook is asked for, when a name nobody declared is looked up, and by
:func:`load_all` (see ``examples/wordleg``).

Layer: beside ``dto``; imports nothing of mewdex but ``config`` (lazily); every layer may use it,
and it names the modules above only as strings.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The entry-point group of third-party plugins (each entry point names a module).
ENTRY_POINT_GROUP = "mewdex.plugins"


@dataclass(frozen=True)
class Hook:
    """A named extension point: ``value`` says what an implementation is; ``single``: one at a time
    (providing another replaces it)."""

    name: str
    value: str
    single: bool = False


HOOKS: dict[str, Hook] = {
    h.name: h
    for h in (
        Hook("task_types", "queue.registry.TaskType, by its name (tasks.task_type)"),
        Hook("lanes", "queue.tasks.Lane, by its name"),
        Hook("cost_budgets", "queue.registry.CostBudget: budget(session, task) -> why it is over, by budget name"),
        Hook("task_rows", "queue.registry.TaskRows: what a plugin's task types add to their tasks' rows, by plugin"),
        Hook("providers", "providers.connectors.ProviderSpec, by provider name"),
        Hook("search_legs", "(search.steps.ExtraLeg, weight), by leg name: fused with the built-in legs"),
        Hook("search_enhancers", "search.steps.Enhancer: rewrites the query before the legs", single=True),
        Hook("search_rerankers", "search.steps.Reranker: reorders the fused top results", single=True),
        Hook("eval_gates", "the check every generation switch passes (search.eval_gate.check)", single=True),
        Hook("text_embedders", "a factory of a TextEmbedder, by the name MEWDEX_TEXT_MODELS uses"),
        Hook("processing_submitters", "submit(session, meme, *, auto_name, batch_id, new_meme)", single=True),
        Hook("account_hooks", "hook(session, user, event) on an account's disabled/enabled/deleted"),
        Hook("sealed_settings", "the sealed members of an instance setting, by its key"),
        Hook("sealed_task_payloads", "the sealed members of a task type's payload, by task type"),
        Hook("channel_adapters", "channels.base.Adapter, by channel name (its package declares CHANNEL)"),
        Hook("settings", "a config.SettingsGroup class: a capability's own MEWDEX_* settings, by its name"),
        Hook("metric_collectors", "series(execute) -> Iterator[prometheus Metric]: read at each /metrics scrape"),
        Hook(
            "capabilities",
            "capability.Capability: a capability package's declaration (its error codes, nav links, and the"
            " routes, templates and static folder the web layer mounts), by name",
        ),
    )
}


@dataclass(frozen=True)
class Plugin:
    """A built-in plugin: the ``module`` imported when one of the names it ``provides`` (hook → names)
    is used."""

    module: str
    provides: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def _channel(name: str, **provides: tuple[str, ...]) -> Plugin:
    """The plugin of the channel package ``mewdex.channels.<name>``: its adapter (hook ``channel_adapters``),
    its declaration (hook ``capabilities``) and what else it provides (``sealed_settings=(…)``, …)."""
    return Plugin(f"mewdex.channels.{name}", {"channel_adapters": (name,), "capabilities": (name,), **provides})


_CHANNEL_TASK_TYPES = (
    "channel_delivery",
    "channel_inbound",
    "clawbot_polling",
    "discord_interaction",
    "telegram_inline",
    "telegram_polling",
)

#: Every built-in plugin, in the order :func:`load_all` imports them (lanes list in this order).
BUILTIN_PLUGINS: tuple[Plugin, ...] = (
    Plugin("mewdex.queue.tasks", {"lanes": ("default",)}),
    Plugin("mewdex.queue.noop", {"task_types": ("noop",)}),
    Plugin("mewdex.queue.metrics", {"metric_collectors": ("queue", "tasks")}),
    Plugin("mewdex.queue.maintenance", {"lanes": ("maintenance",), "task_types": ("lease_reaping", "batch_feeding")}),
    Plugin("mewdex.inference.models", {"text_embedders": ("e5", "use")}),
    Plugin("mewdex.pipeline.jobs", {"processing_submitters": ("create_job",), "cost_budgets": ("analysis_policy",)}),
    Plugin(
        "mewdex.pipeline.tasks",
        {
            "lanes": ("visual", "agent", "embedding"),
            "task_rows": ("image_stages",),
            "task_types": (
                "visual_embedding_generation",
                "meme_context_generation",
                "image_auto_rename",
                "text_embedding_generation",
            ),
        },
    ),
    Plugin("mewdex.pipeline.name_repair", {"task_types": ("meme_name_repair",)}),
    Plugin("mewdex.pipeline.keyword_rebuild", {"task_types": ("keyword_rebuild",)}),
    Plugin("mewdex.search.generations", {"task_types": ("search_reindex",)}),
    Plugin("mewdex.search.eval_gate", {"eval_gates": ("eval_gate",)}),
    Plugin("mewdex.providers.openai_compat", {"providers": ("openai_compatible",)}),
    Plugin("mewdex.providers.reverse_image", {"providers": ("yandex_image_search", "serpapi_google_lens")}),
    Plugin("mewdex.providers.webhook", {"providers": ("webhook",)}),
    Plugin("mewdex.providers.metrics", {"metric_collectors": ("providers",)}),
    Plugin("mewdex.providers.connectors", {"capabilities": ("connectors",)}),
    Plugin("mewdex.providers.connectors.settings", {"settings": ("connectors",)}),
    Plugin(
        "mewdex.providers.search_steps",
        {
            "task_types": ("remote_embedding_sync",),
            "search_legs": ("remote",),
            "search_enhancers": ("llm_enhance",),
            "search_rerankers": ("llm_rerank",),
        },
    ),
    Plugin("mewdex.assistant", {"capabilities": ("assistant",)}),
    Plugin("mewdex.assistant.runs", {"task_types": ("conversation_run_reaping",)}),
    Plugin("mewdex.assistant.settings", {"settings": ("assistant",)}),
    # The channel framework's declaration (its shared routes and the Channels page: mounted before the
    # channels', which follow in this order).
    Plugin("mewdex.channels", {"capabilities": ("channels",)}),
    # The channel packages, in the order the Channels page lists them (channels.registry.load()).
    _channel("telegram", sealed_settings=("channel_telegram_bot",), settings=("telegram",)),
    _channel("webhook"),
    _channel("onebot"),
    _channel("wecom", sealed_settings=("channel_wecom_app",)),
    _channel("clawbot", settings=("clawbot",)),
    _channel("discord", sealed_task_payloads=("discord_interaction",), settings=("discord",)),
    # The channel framework and every channel package (channels.registry.load()); its lanes are
    # "channel" (deliveries, inbound) and one polling lane per polling channel.
    Plugin(
        "mewdex.channels.tasks",
        {
            "lanes": ("channel", "telegram_poll", "clawbot_poll"),
            "task_types": _CHANNEL_TASK_TYPES,
            "account_hooks": ("channels",),
            "sealed_task_payloads": ("channel_delivery",),
        },
    ),
    Plugin("mewdex.channels.metrics", {"metric_collectors": ("deliveries",)}),
    Plugin("mewdex.schedules", {"capabilities": ("schedules",)}),
    Plugin("mewdex.schedules.dispatch", {"task_types": ("scheduled_job_dispatch",), "account_hooks": ("schedules",)}),
    Plugin("mewdex.schedules.runner", {"lanes": ("schedules",), "task_types": ("scheduled_job_run",)}),
    Plugin("mewdex.schedules.settings", {"settings": ("schedules",)}),
    Plugin(
        "mewdex.runtime.maintenance",
        {"task_types": ("storage_recovery", "disk_rescan", "thumbnail_reconcile", "retention")},
    ),
    # Backups, a capability package (issue 41): its task types and its settings (mewdex/backups/__init__.py).
    Plugin(
        "mewdex.backups",
        {"task_types": ("backup_check", "backup"), "settings": ("backups",), "capabilities": ("backups",)},
    ),
)

_provided: dict[str, dict[str, Any]] = {name: {} for name in HOOKS}
_provider_module: dict[tuple[str, str], str] = {}
_loaded: set[str] = set()
_lock = threading.Lock()
_entry_points_loaded = False


def _spec(hook: str) -> Hook:
    try:
        return HOOKS[hook]
    except KeyError:
        raise KeyError(f"no hook named {hook!r}; hooks: {sorted(HOOKS)}") from None


def _hook(hook: str) -> str:
    return _spec(hook).name


def provide(hook: str, name: str, value: T, *, stacklevel: int = 1, module: str | None = None) -> T:
    """Make ``value`` the implementation ``name`` of ``hook`` (a later one of the same name replaces
    it; on a single hook, any other). ``stacklevel``: how many frames above the caller is the module
    that provides it (a typed front door passes 2), recorded for :func:`table`; ``module``: that
    module by name instead. Returns ``value``."""
    spec = _spec(hook)
    caller = module or sys._getframe(stacklevel).f_globals.get("__name__", "?")
    with _lock:
        if spec.single:
            _provided[hook].clear()
        _provided[hook][name] = value
        _provider_module[(hook, name)] = caller
    return value


def withdraw(hook: str, name: str | None = None) -> None:
    """Remove the implementation ``name`` of ``hook`` (None: all of them); tests, and switching a
    single hook off."""
    with _lock:
        for key in [name] if name is not None else list(_provided[_hook(hook)]):
            _provided[hook].pop(key, None)


def provided(hook: str) -> dict[str, Any]:
    """The implementations of ``hook`` loaded so far (the live mapping; nothing is imported)."""
    return _provided[_hook(hook)]


def declared(hook: str) -> dict[str, str]:
    """The names the built-in plugins declare for ``hook`` → their plugin module (nothing imported)."""
    return _declarations()[_hook(hook)]


@functools.cache
def _declarations() -> dict[str, dict[str, str]]:
    return {hook: {name: p.module for p in BUILTIN_PLUGINS for name in p.provides.get(hook, ())} for hook in HOOKS}


def _import(module: str) -> None:
    if module not in _loaded:
        importlib.import_module(module)  # outside the lock: the module's provide() calls take it
        _loaded.add(module)


def _extra_modules() -> list[str]:
    from mewdex.config import get_settings

    return list(get_settings().task_modules)


def _load_extras() -> None:
    """Import the undeclared plugins: ``MEWDEX_TASK_MODULES`` and the entry points (once each)."""
    global _entry_points_loaded
    for module in _extra_modules():
        _import(module)  # a setting of this instance: a module that cannot be imported stops the caller
    if not _entry_points_loaded:
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.value in _loaded:
                continue
            _loaded.add(ep.value)  # tried once: a broken package is logged, never retried at every search
            try:
                ep.load()
            except Exception:
                log.exception("the plugin %s (%s) could not be loaded; mewdex runs without it", ep.name, ep.value)
            else:
                log.info("loaded the plugin %s (%s)", ep.name, ep.value)
        _entry_points_loaded = True


def load(modules: list[str] | tuple[str, ...]) -> None:
    """Import ``modules`` (plugins named at run time; once each)."""
    for module in modules:
        _import(module)


def get(hook: str, name: str, default: Any = None) -> Any:
    """The implementation ``name`` of ``hook``, importing the plugin that declares it on first use
    (a name no built-in declares: the undeclared plugins are imported first); ``default`` when none."""
    found = _provided[_hook(hook)]
    if name not in found:
        module = declared(hook).get(name)
        if module is not None:
            _import(module)
        if name not in found:
            _load_extras()
    return found.get(name, default)


def single(hook: str) -> Any:
    """The one implementation of a single hook (its declaring plugin imported on first use), or None."""
    spec = _spec(hook)
    if not spec.single:
        raise ValueError(f"hook {hook!r} takes many implementations: use implementations()")
    for module in dict.fromkeys(declared(hook).values()):
        _import(module)
    _load_extras()  # a third-party plugin may replace it
    return next(iter(_provided[hook].values()), None)


def implementations(hook: str) -> dict[str, Any]:
    """Every implementation of ``hook``: the built-in plugins that declare it and the undeclared ones
    are imported first (once). Ordered as declared (:data:`BUILTIN_PLUGINS`), then as provided."""
    names = declared(hook)
    for module in dict.fromkeys(names.values()):
        _import(module)
    _load_extras()
    found = dict(_provided[hook])
    return {**{n: found[n] for n in names if n in found}, **found}


def load_all() -> None:
    """Import every plugin: the built-ins in order, then ``MEWDEX_TASK_MODULES`` and the entry points
    (``mewdex worker`` and ``serve``: a worker runs any task type)."""
    for plugin in BUILTIN_PLUGINS:
        _import(plugin.module)
    _load_extras()


def provider_of(hook: str, name: str) -> str:
    """The module that provided implementation ``name`` of ``hook`` ("?" when none has)."""
    return _provider_module.get((_hook(hook), name), "?")


def table() -> dict[str, dict[str, str]]:
    """Hook → implementation name → the module that provided it, for what is loaded (the contract
    test's view; call :func:`load_all` first for everything)."""
    return {hook: {name: _provider_module.get((hook, name), "?") for name in _provided[hook]} for hook in sorted(HOOKS)}
