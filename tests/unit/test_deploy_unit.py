"""The systemd unit in docs/deploy (issue 34, point 8) passes ``systemd-analyze verify``, with its
``ExecStart`` pointed at this checkout's ``mewdex`` (the installed /usr/local/bin/mewdex does not exist here)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "docs" / "deploy" / "mewdex.service"
INSTALLED = "/usr/local/bin/mewdex"  # the installed command (pipx, README "Installing"), not a checkout's .venv

pytestmark = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")


def verify(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    unit = tmp_path / "mewdex.service"
    unit.write_text(text)
    return subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )


def local_unit() -> str:
    text = UNIT.read_text()
    assert f"ExecStart={INSTALLED} serve" in text  # the pipx install in its header puts mewdex there
    mewdex = Path(sys.executable).with_name("mewdex")
    assert mewdex.exists()
    return text.replace(INSTALLED, str(mewdex))


def test_the_systemd_unit_verifies(tmp_path):
    result = verify(tmp_path, local_unit())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "mewdex.service:" not in result.stderr, result.stderr  # no warning about a line of it either


def test_the_check_catches_a_broken_unit(tmp_path):
    broken = local_unit().replace("TimeoutStopSec=90s", "TimeoutStopSec=ninety").replace("Type=exec", "Type=sometimes")
    result = verify(tmp_path, broken)
    # systemd ignores a line it cannot parse with a warning naming the line (the exit status stays 0).
    lines = broken.splitlines()
    type_line, stop_line = lines.index("Type=sometimes") + 1, lines.index("TimeoutStopSec=ninety") + 1
    assert f"mewdex.service:{type_line}: Failed to parse service type" in result.stderr, result.stderr
    assert f"mewdex.service:{stop_line}: Failed to parse time value" in result.stderr, result.stderr
