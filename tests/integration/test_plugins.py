"""Third-party plugins installed from their own folders, found through their entry points (group
``mewdex.plugins``) with nothing of mewdex changed: ``examples/wordleg`` (the search leg ``word``)
takes part in a search, in this process and in a fresh one; ``examples/postbox`` (a channel) is
listed on the Channels page with the card its package declares."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from mewdex import hooks

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _install(tmp_path_factory, example: str) -> Path:
    """``examples/<example>`` installed with pip from (a copy of) its folder into a folder of its own
    (offline: no index, no dependencies, the setuptools already here; setuptools builds in the source
    folder), pip's temporary files in a folder of the test's."""
    root = tmp_path_factory.mktemp(example)
    source, target, tmp = root / example, root / "site", root / "tmp"
    shutil.copytree(EXAMPLES / example, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    tmp.mkdir()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-build-isolation"]
        + ["--no-cache-dir", "--target", str(target), str(source)],
        check=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmp)},
        cwd=root,
    )
    return target


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``examples/wordleg`` installed (:func:`_install`)."""
    return _install(tmp_path_factory, "wordleg")


def _png(seed: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (40, 32), (seed * 70 % 256, seed * 30 % 256, 90)).save(buffer, "PNG")
    return buffer.getvalue()


def _search(sessions, scope, query: str) -> list:
    from mewdex.search.service import search

    with sessions.begin() as session:
        return [r.id for r in search(session, scope, query, 10, legs=("keyword", "word"), learn=False).results]


def test_the_example_plugin_takes_part_in_a_search(installed, sessions, store, scope, monkeypatch):
    from mewdex.library.memes import add_image

    ids = {}
    for n, name in enumerate(("submarine volcano", "pancake giraffe"), 1):
        ids[name] = add_image(sessions, store, scope, _png(n), filename=f"{name}.png", provenance={"test": "p"}).meme_id
    # Not processed yet (no keyword document): without the plugin nothing finds them.
    assert _search(sessions, scope, "volcano") == []

    monkeypatch.syspath_prepend(str(installed))
    monkeypatch.setattr(hooks, "_entry_points_loaded", False)  # look at the entry points again
    try:
        assert _search(sessions, scope, "Volcano") == [str(ids["submarine volcano"])]
        assert _search(sessions, scope, "giraffe pancake") == [str(ids["pancake giraffe"])]
        assert hooks.table()["search_legs"]["word"] == "mewdex_wordleg"
    finally:
        hooks.withdraw("search_legs", "word")
        sys.modules.pop("mewdex_wordleg", None)


def test_a_fresh_process_finds_the_plugin_through_its_entry_point(installed):
    code = "import json; from mewdex import hooks; print(json.dumps(sorted(hooks.implementations('search_legs'))))"
    path = os.pathsep.join([str(installed), os.environ.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert json.loads(out.stdout) == ["remote", "word"]


START_UP = """
import json, sys
from mewdex import hooks
from mewdex.runtime import prepare_database
prepare_database()
print(json.dumps(sorted(p.module for p in hooks.BUILTIN_PLUGINS if p.module in sys.modules)))
"""


def test_start_up_imports_only_the_plugins_its_checks_use(mewdex_env):
    """What every command runs first (``prepare_database``) imports no channel, schedule, assistant,
    provider, backup or maintenance module: a light command stays light (a worker loads them all)."""
    out = subprocess.run(
        [sys.executable, "-c", START_UP], capture_output=True, text=True, check=True, timeout=300, env=os.environ
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [
        "mewdex.inference.models",  # the search-model check
        "mewdex.pipeline.keyword_rebuild",  # the keyword-recipe check
        "mewdex.pipeline.name_repair",  # the naming-rules check
        "mewdex.queue.tasks",
        "mewdex.search.generations",  # the search-model check
    ]


def test_the_example_channel_is_listed_with_its_declared_card(tmp_path_factory, scope, monkeypatch):
    """``examples/postbox``: one package with an entry point — its adapter, its words and its card as
    data — is a channel of the Channels page (after the built-in ones), binding by the framework's code."""
    from conftest import client_for
    from mewdex.channels import registry

    monkeypatch.syspath_prepend(str(_install(tmp_path_factory, "postbox")))
    monkeypatch.setattr(hooks, "_entry_points_loaded", False)  # look at the entry points again
    try:
        with client_for(scope) as client:
            listed = client.get("/api/v1/channels").json()["channels"]
            assert [c["name"] for c in listed][-1] == "postbox" and listed[-1]["bind_code"] is True
            page = client.get("/settings/channels", headers={"Accept-Language": "zh"}).text
            card = page[page.index('id="channel-postbox"') :]
            card = card[: card.index("</section>")]
            assert "信箱（示例插件）" in card and "data-postbox-help" in card and 'data-action="bind-code"' in card
            assert client.post("/api/v1/channels/postbox/code").status_code == 201
        assert hooks.table()["channel_adapters"]["postbox"] == "mewdex_postbox"
        assert hooks.table()["capabilities"]["postbox"] == "mewdex_postbox"  # its CHANNEL, by declare()
    finally:
        registry._plugins.pop("postbox", None)
        hooks.withdraw("channel_adapters", "postbox")
        hooks.withdraw("capabilities", "postbox")
        sys.modules.pop("mewdex_postbox", None)
