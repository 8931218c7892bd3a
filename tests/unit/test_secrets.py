"""Secrets at rest: AES-GCM with a key id per ciphertext, a 0600 key ring, rotation, hints."""

from __future__ import annotations

import os
import stat

import pytest

from mewdex.config import get_settings
from mewdex.providers import secrets


@pytest.fixture
def ring(tmp_path, monkeypatch):
    monkeypatch.delenv("MEWDEX_SECRET_KEY", raising=False)
    get_settings.cache_clear()
    monkeypatch.setattr(secrets, "keyring_path", lambda: tmp_path / "secret.keys")
    yield tmp_path / "secret.keys"
    get_settings.cache_clear()


def test_seal_round_trip_key_file_0600_and_tampering_fails(ring):
    sealed = secrets.seal("sk-live-abcdef123456", aad="row:1")
    assert "sk-live" not in str(sealed) and sealed["kid"] == secrets.active_key_id()
    assert stat.S_IMODE(os.stat(ring).st_mode) == 0o600
    assert secrets.open_sealed(sealed, aad="row:1") == "sk-live-abcdef123456"
    with pytest.raises(secrets.SecretError) as err:
        secrets.open_sealed(sealed, aad="row:2")  # bound to its row
    assert err.value.code == "secret_undecryptable" and "sk-live" not in str(err.value)
    broken = {**sealed, "ct": sealed["ct"][:-4] + "AAAA"}
    with pytest.raises(secrets.SecretError):
        secrets.open_sealed(broken, aad="row:1")


def test_rotation_keeps_old_values_readable_until_dropped(ring):
    old = secrets.seal("one")
    new_kid = secrets.rotate_key()
    assert new_kid != old["kid"]
    assert secrets.open_sealed(old) == "one"
    assert secrets.seal("two")["kid"] == new_kid
    assert secrets.drop_unused_keys({new_kid}) == [old["kid"]]
    with pytest.raises(secrets.SecretError):
        secrets.open_sealed(old)


def test_environment_key_wins_and_must_be_32_bytes(ring, monkeypatch):
    monkeypatch.setenv("MEWDEX_SECRET_KEY", "ab" * 32)
    get_settings.cache_clear()
    assert secrets.seal("x")["kid"] == secrets.key_id(bytes.fromhex("ab" * 32))
    assert not ring.exists()
    monkeypatch.setenv("MEWDEX_SECRET_KEY", "short")
    get_settings.cache_clear()
    with pytest.raises(secrets.SecretError):
        secrets.seal("x")


@pytest.mark.parametrize(
    "value,expected",
    [("sk-proj-1234567890a1b2", "sk-…a1b2"), ("abcdefghijklmnop", "…mnop"), ("sk-short", "sk-…"), ("", "")],
)
def test_hint_shows_only_prefix_and_last_four(value, expected):
    assert secrets.hint(value) == expected


# Making a key is slowed to 0.3 s (a busy machine), so the racers overlap between reading the missing
# ring and writing it.
_RACER = """
import json, sys, time
from mewdex.providers import secrets
_generate = secrets.AESGCM.generate_key
def slow_generate(bit_length):
    time.sleep(0.3)
    return _generate(bit_length)
secrets.AESGCM.generate_key = staticmethod(slow_generate)
time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
print(json.dumps(secrets.seal("value-" + sys.argv[2], aad="race")))
"""


def test_processes_starting_at_once_agree_on_one_key(tmp_path, monkeypatch):
    """Six processes seal their first secret at the same instant on a data dir without a key ring:
    one key is made, every value opens with the ring left behind (no process's key is lost)."""
    import json
    import subprocess
    import sys
    import time

    monkeypatch.delenv("MEWDEX_SECRET_KEY", raising=False)
    env = {k: v for k, v in os.environ.items() if k != "MEWDEX_SECRET_KEY"}
    env["MEWDEX_DATA_DIR"] = str(tmp_path)
    start = time.time() + 2.0
    racers = [
        subprocess.Popen([sys.executable, "-c", _RACER, str(start), str(n)], env=env, stdout=subprocess.PIPE, text=True)
        for n in range(6)
    ]
    sealed = [json.loads(p.communicate(timeout=60)[0]) for p in racers]
    assert all(p.returncode == 0 for p in racers)
    assert len({s["kid"] for s in sealed}) == 1
    monkeypatch.setenv("MEWDEX_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    try:
        assert [secrets.open_sealed(s, aad="race") for s in sealed] == [f"value-{n}" for n in range(6)]
        assert list(json.loads((tmp_path / "secret.keys").read_text())["keys"]) == [sealed[0]["kid"]]
        assert not [p.name for p in tmp_path.iterdir() if p.name not in ("secret.keys", "secret.keys.lock")]
    finally:
        get_settings.cache_clear()
