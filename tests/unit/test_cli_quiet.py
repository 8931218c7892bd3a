"""A command prints what it has to say and nothing of the libraries beneath it: without
``XDG_RUNTIME_DIR`` (root over SSH, a container) the embedded PostgreSQL wheel's import made
platformdirs warn on every ``mewdex db stop``."""

from __future__ import annotations

import os
import subprocess

from conftest import MEWDEX_BIN


def test_db_stop_without_xdg_runtime_dir_prints_no_library_warning(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env.update(MEWDEX_DATA_DIR=str(tmp_path))
    env.pop("PYTHONWARNINGS", None)  # what a person sees
    run = subprocess.run(
        [str(MEWDEX_BIN), "db", "stop"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "not running"
    assert "Warning" not in run.stderr and "XDG_RUNTIME_DIR" not in run.stderr, run.stderr
