"""The contract of mewdex's one way to extend (:mod:`mewdex.hooks`): every hook and what implements it.

:data:`EXPECTED` lists each hook with each built-in implementation and the module that provides it.
A hook or an implementation that appears, disappears or moves fails :func:`test_every_hook_and_what_implements_it`
until this table says so too; :func:`test_the_declarations_name_what_the_plugins_provide` keeps
:data:`mewdex.hooks.BUILTIN_PLUGINS` (what the registry knows without importing) true to what the
modules really provide; the laziness test keeps a light command light."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mewdex import hooks
from mewdex.runtime import load_plugins

EXPECTED: dict[str, dict[str, str]] = {
    "account_hooks": {
        "channels": "mewdex.channels.tasks",
        "schedules": "mewdex.schedules.dispatch",
    },
    "capabilities": {
        "assistant": "mewdex.assistant",
        "backups": "mewdex.backups",
        "channels": "mewdex.channels",
        "clawbot": "mewdex.channels.clawbot",
        "connectors": "mewdex.providers.connectors",
        "discord": "mewdex.channels.discord",
        "onebot": "mewdex.channels.onebot",
        "schedules": "mewdex.schedules",
        "telegram": "mewdex.channels.telegram",
        "webhook": "mewdex.channels.webhook",
        "wecom": "mewdex.channels.wecom",
    },
    "channel_adapters": {
        "clawbot": "mewdex.channels.clawbot.adapter",
        "discord": "mewdex.channels.discord.adapter",
        "onebot": "mewdex.channels.onebot.adapter",
        "telegram": "mewdex.channels.telegram.adapter",
        "webhook": "mewdex.channels.webhook.adapter",
        "wecom": "mewdex.channels.wecom.adapter",
    },
    "cost_budgets": {
        "analysis_policy": "mewdex.pipeline.jobs",
    },
    "eval_gates": {
        "eval_gate": "mewdex.search.eval_gate",
    },
    "lanes": {
        "agent": "mewdex.pipeline.tasks",
        "channel": "mewdex.channels.delivery",
        "clawbot_poll": "mewdex.channels.polling",
        "default": "mewdex.queue.tasks",
        "embedding": "mewdex.pipeline.tasks",
        "maintenance": "mewdex.queue.maintenance",
        "schedules": "mewdex.schedules.runner",
        "telegram_poll": "mewdex.channels.polling",
        "visual": "mewdex.pipeline.tasks",
    },
    "metric_collectors": {
        "deliveries": "mewdex.channels.metrics",
        "providers": "mewdex.providers.metrics",
        "queue": "mewdex.queue.metrics",
        "tasks": "mewdex.queue.metrics",
    },
    "processing_submitters": {
        "create_job": "mewdex.pipeline.jobs",
    },
    "providers": {
        "openai_compatible": "mewdex.providers.openai_compat",
        "serpapi_google_lens": "mewdex.providers.reverse_image",
        "webhook": "mewdex.providers.webhook",
        "yandex_image_search": "mewdex.providers.reverse_image",
    },
    "sealed_settings": {
        "channel_telegram_bot": "mewdex.channels.telegram.api",
        "channel_wecom_app": "mewdex.channels.wecom.setup",
    },
    "sealed_task_payloads": {
        "channel_delivery": "mewdex.channels.delivery",
        "discord_interaction": "mewdex.channels.discord.interactions",
    },
    "search_enhancers": {
        "llm_enhance": "mewdex.providers.search_steps",
    },
    "search_legs": {
        "remote": "mewdex.providers.search_steps",
    },
    "search_rerankers": {
        "llm_rerank": "mewdex.providers.search_steps",
    },
    "settings": {
        "assistant": "mewdex.assistant.settings",
        "backups": "mewdex.backups.settings",
        "clawbot": "mewdex.channels.clawbot.settings",
        "connectors": "mewdex.providers.connectors.settings",
        "discord": "mewdex.channels.discord.settings",
        "schedules": "mewdex.schedules.settings",
        "telegram": "mewdex.channels.telegram.settings",
    },
    "task_rows": {
        "image_stages": "mewdex.pipeline.tasks",
    },
    "task_types": {
        "backup": "mewdex.backups.tasks",
        "backup_check": "mewdex.backups.tasks",
        "batch_feeding": "mewdex.queue.maintenance",
        "channel_delivery": "mewdex.channels.delivery",
        "channel_inbound": "mewdex.channels.inbound",
        "clawbot_polling": "mewdex.channels.polling",
        "conversation_run_reaping": "mewdex.assistant.runs",
        "discord_interaction": "mewdex.channels.discord.interactions",
        "disk_rescan": "mewdex.runtime.maintenance",
        "image_auto_rename": "mewdex.pipeline.tasks",
        "keyword_rebuild": "mewdex.pipeline.keyword_rebuild",
        "lease_reaping": "mewdex.queue.maintenance",
        "meme_context_generation": "mewdex.pipeline.tasks",
        "meme_name_repair": "mewdex.pipeline.name_repair",
        "noop": "mewdex.queue.noop",
        "remote_embedding_sync": "mewdex.providers.search_steps",
        "retention": "mewdex.runtime.maintenance",
        "scheduled_job_dispatch": "mewdex.schedules.dispatch",
        "scheduled_job_run": "mewdex.schedules.runner",
        "search_reindex": "mewdex.search.generations",
        "storage_recovery": "mewdex.runtime.maintenance",
        "telegram_inline": "mewdex.channels.telegram.inbound",
        "telegram_polling": "mewdex.channels.polling",
        "text_embedding_generation": "mewdex.pipeline.tasks",
        "thumbnail_reconcile": "mewdex.runtime.maintenance",
        "visual_embedding_generation": "mewdex.pipeline.tasks",
    },
    "text_embedders": {
        "e5": "mewdex.inference.models",
        "use": "mewdex.inference.models",
    },
}


def _built_in_table() -> dict[str, dict[str, str]]:
    """What is loaded, without what tests provide (their modules are not ``mewdex.*``)."""
    load_plugins()
    return {
        hook: {name: module for name, module in found.items() if module.startswith("mewdex.")}
        for hook, found in hooks.table().items()
    }


def test_every_hook_and_what_implements_it():
    assert sorted(hooks.HOOKS) == sorted(EXPECTED)
    assert _built_in_table() == EXPECTED


def test_the_declarations_name_what_the_plugins_provide():
    for hook, found in _built_in_table().items():
        assert sorted(hooks.declared(hook)) == sorted(found), hook
    modules = [p.module for p in hooks.BUILTIN_PLUGINS]
    assert len(modules) == len(set(modules))


LAZY = """
import json, sys
import mewdex.cli, mewdex.runtime
from mewdex import hooks
plugins = [p.module for p in hooks.BUILTIN_PLUGINS]
before = [m for m in plugins if m in sys.modules]
found = hooks.get("task_types", "backup")
after = [m for m in plugins if m in sys.modules]
print(json.dumps({"before": before, "after": after, "found": found.name, "missing": hooks.get("lanes", "nope")}))
"""


def test_a_plugin_is_imported_only_when_what_it_provides_is_used():
    """The command line and the runtime import no plugin; looking a task type up imports its plugin
    (and what that module imports), not the others."""
    out = subprocess.run([sys.executable, "-c", LAZY], capture_output=True, text=True, check=True, timeout=120)
    seen = json.loads(out.stdout)
    assert seen["before"] == []
    assert seen["found"] == "backup" and "mewdex.backups" in seen["after"]
    assert "mewdex.channels.tasks" not in seen["after"] and "mewdex.pipeline.tasks" not in seen["after"]
    assert seen["missing"] is None


def test_provide_get_single_and_withdraw():
    fn = object()
    try:
        hooks.provide("search_legs", "t-contract", (fn, 0.5))
        assert hooks.get("search_legs", "t-contract") == (fn, 0.5)
        assert hooks.table()["search_legs"]["t-contract"] == __name__
    finally:
        hooks.withdraw("search_legs", "t-contract")
    assert hooks.get("search_legs", "t-contract") is None
    with pytest.raises(KeyError, match="no hook named"):
        hooks.provide("no_such_hook", "x", 1)
    with pytest.raises(ValueError):
        hooks.single("search_legs")
