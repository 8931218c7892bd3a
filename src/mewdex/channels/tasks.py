"""The channels' task types and schedules, for the runtime: importing this module registers
``channel_delivery``, ``channel_inbound`` and every adapter module's own (e.g. ``telegram_polling``)."""

from __future__ import annotations

import importlib

from mewdex.channels import delivery, inbound  # noqa: F401 - registers their task types
from mewdex.channels.base import ADAPTER_MODULES, load_adapters
from mewdex.queue.scheduler import Schedule

load_adapters()


def schedules() -> list[Schedule]:
    """The periodic work of the loaded adapter modules (a module's ``schedules()``, if it has one)."""
    found: list[Schedule] = []
    for name in ADAPTER_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        if hasattr(module, "schedules"):
            found += module.schedules()
    return found
