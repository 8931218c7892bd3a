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
