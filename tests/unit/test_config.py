"""Settings validation at load time."""

import pytest
from pydantic import ValidationError

from mewdex.config import Settings


@pytest.mark.parametrize("heartbeat, lease", [(120, 120), (200, 120)])
def test_heartbeat_not_below_lease_is_rejected(monkeypatch, heartbeat, lease):
    monkeypatch.setenv("MEWDEX_WORKER_HEARTBEAT_SECONDS", str(heartbeat))
    monkeypatch.setenv("MEWDEX_WORKER_LEASE_SECONDS", str(lease))
    with pytest.raises(ValidationError) as info:
        Settings(_env_file=None)
    message = str(info.value)
    assert "MEWDEX_WORKER_HEARTBEAT_SECONDS" in message and "MEWDEX_WORKER_LEASE_SECONDS" in message


def test_heartbeat_below_lease_is_accepted(monkeypatch):
    monkeypatch.setenv("MEWDEX_WORKER_HEARTBEAT_SECONDS", "119")
    monkeypatch.setenv("MEWDEX_WORKER_LEASE_SECONDS", "120")
    settings = Settings(_env_file=None)
    assert (settings.worker_heartbeat_seconds, settings.worker_lease_seconds) == (119, 120)


@pytest.mark.parametrize("nice, expected", [("7", 7), ("0", 0)])
def test_a_worker_lowers_its_cpu_priority_by_worker_nice(nice, expected):
    """What ``mewdex worker`` does at start (a fresh process: niceness cannot be raised back)."""
    import os
    import subprocess
    import sys

    code = (
        "import os; from mewdex.cli.server import _lower_priority; "
        "before = os.nice(0); _lower_priority(); print(os.nice(0) - before)"
    )
    env = {**os.environ, "MEWDEX_WORKER_NICE": nice}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert int(out) == expected


def test_worker_nice_out_of_range_is_rejected(monkeypatch):
    monkeypatch.setenv("MEWDEX_WORKER_NICE", "20")
    with pytest.raises(ValidationError):
        Settings(_env_file=None)
