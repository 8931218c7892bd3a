"""The README's configuration table lists exactly the settings that ``mewdex.config.Settings`` and the
capabilities' own settings groups (hook ``settings``) define.

A row's first cell names one or more variables in backticks, separated by `` / ``. A name that
starts with ``_`` is short for the previous full name with its last words replaced:
``MEWDEX_LANE_CONCURRENCY_DEFAULT`` / ``_VISUAL`` is ``MEWDEX_LANE_CONCURRENCY_VISUAL``,
``MEWDEX_LOGIN_MAX_FAILURES_PER_ACCOUNT`` / ``_PER_IP`` is ``MEWDEX_LOGIN_MAX_FAILURES_PER_IP``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mewdex import hooks
from mewdex.config import Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def expand(cell: str) -> list[str]:
    """Variable names of one table cell, shorthand (``_VISUAL``) expanded against the previous name."""
    names: list[str] = []
    for name in re.findall(r"`([A-Z_][A-Z0-9_]*)`", cell):
        if name.startswith("_"):
            if not names:
                raise ValueError(f"shorthand {name} without a full name before it: {cell!r}")
            suffix = name[1:].split("_")
            name = "_".join(names[-1].split("_")[: -len(suffix)] + suffix)
        names.append(name)
    return names


def readme_settings(markdown: str) -> list[str]:
    """Variable names of the table in the README's ``## Configuration`` section, in order."""
    section = markdown.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header, rule, *body = rows
    assert header.split("|")[1].strip() == "variable" and set(rule) <= set("|-: "), rows[:2]
    names: list[str] = []
    for row in body:
        names += expand(row.split("|")[1])
    return names


def settings_env_names() -> set[str]:
    """The environment variable of every setting: the core's ``Settings`` fields and every declared
    capability's own (hook ``settings``: a channel package's ``SettingsGroup``), prefix + name or alias."""
    names = set()
    for model in (Settings, *hooks.implementations("settings").values()):
        prefix = model.model_config.get("env_prefix", "")
        for field_name, info in model.model_fields.items():
            alias = info.validation_alias or info.alias
            names.add(str(alias).upper() if isinstance(alias, str) else f"{prefix}{field_name}".upper())
    return names


def test_shorthand_names_expand_against_the_previous_name():
    assert expand("`MEWDEX_LANE_CONCURRENCY_DEFAULT` / `_VISUAL` / `_AGENT`") == [
        "MEWDEX_LANE_CONCURRENCY_DEFAULT",
        "MEWDEX_LANE_CONCURRENCY_VISUAL",
        "MEWDEX_LANE_CONCURRENCY_AGENT",
    ]
    assert expand("`MEWDEX_LOGIN_MAX_FAILURES_PER_ACCOUNT` / `_PER_IP` / `MEWDEX_LOGIN_FAILURE_WINDOW_SECONDS`") == [
        "MEWDEX_LOGIN_MAX_FAILURES_PER_ACCOUNT",
        "MEWDEX_LOGIN_MAX_FAILURES_PER_IP",
        "MEWDEX_LOGIN_FAILURE_WINDOW_SECONDS",
    ]
    with pytest.raises(ValueError):
        expand("`_VISUAL`")


def test_readme_table_lists_exactly_the_settings():
    documented = readme_settings(README.read_text(encoding="utf-8"))
    defined = settings_env_names()
    twice = sorted({n for n in documented if documented.count(n) > 1})
    assert not twice, f"listed more than once in the README: {twice}"
    assert not defined - set(documented), f"settings missing from the README table: {sorted(defined - set(documented))}"
    assert not set(documented) - defined, (
        f"README rows for settings config.py does not define: {sorted(set(documented) - defined)}"
    )
