"""Settings validation at load time."""

import pytest
from pydantic import Field, ValidationError

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
        "import os; from mewdex.runtime import lower_priority; "
        "before = os.nice(0); lower_priority(); print(os.nice(0) - before)"
    )
    env = {**os.environ, "MEWDEX_WORKER_NICE": nice}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert int(out) == expected


def test_worker_nice_out_of_range_is_rejected(monkeypatch):
    monkeypatch.setenv("MEWDEX_WORKER_NICE", "20")
    with pytest.raises(ValidationError):
        Settings(_env_file=None)


# --- settings that forgive (issue 35, item 11) ----------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        ("127.0.0.1:9000", ["127.0.0.1:9000"]),
        ("127.0.0.1:9000, minio.lan:9000 ,", ["127.0.0.1:9000", "minio.lan:9000"]),
        ('["127.0.0.1:9000", "minio.lan:9000"]', ["127.0.0.1:9000", "minio.lan:9000"]),
        ("", []),
    ],
)
def test_list_settings_take_commas_or_json(monkeypatch, value, expected):
    # (MEWDEX_TRUSTED_PROXIES takes the same forms but only addresses: tests/unit/test_client_address_rules.py)
    for name in ("EGRESS_ALLOW_HOSTS", "ALLOWED_HOSTS", "METRICS_ALLOW"):
        monkeypatch.setenv(f"MEWDEX_{name}", value)
    settings = Settings(_env_file=None)
    assert settings.egress_allow_hosts == settings.allowed_hosts == expected
    assert settings.metrics_allow == expected


def test_every_list_and_mapping_setting_takes_the_forgiving_form():
    """A list or mapping setting merged without ``NoDecode`` would be JSON-only again (MEWDEX_METRICS_ALLOW was)."""
    from pydantic_settings import NoDecode

    decoders = Settings.__pydantic_decorators__.field_validators
    forgiving = {name for key in ("_list_setting", "_mapping_setting") for name in decoders[key].info.fields}
    complex_fields = {
        name
        for name, field in Settings.model_fields.items()
        if getattr(field.annotation, "__origin__", None) in (list, dict)
    }
    assert complex_fields and complex_fields <= forgiving
    for name in complex_fields:
        metadata = Settings.model_fields[name].metadata
        assert any(isinstance(meta, NoDecode) or meta is NoDecode for meta in metadata), name


def test_a_value_pydantic_settings_cannot_decode_is_one_line_too(monkeypatch):
    """A setting decoded by pydantic-settings itself (no NoDecode) fails before validation: still one line."""
    import mewdex.config as config

    class Loose(config.Settings):
        metrics_allow: list[str] = Field(default_factory=list, examples=["10.0.0.5,10.1.0.0/16"])

    monkeypatch.setattr(config, "Settings", Loose)
    monkeypatch.setenv("MEWDEX_METRICS_ALLOW", "10.0.0.5")
    config.get_settings.cache_clear()
    try:
        with pytest.raises(config.ConfigError) as info:
            config.get_settings()
    finally:
        config.get_settings.cache_clear()
    assert info.value.lines == [
        "MEWDEX_METRICS_ALLOW='10.0.0.5' is not valid (Extra data: line 1 column 5 (char 4)); "
        "expected e.g. MEWDEX_METRICS_ALLOW=10.0.0.5,10.1.0.0/16"
    ]


def test_mapping_settings_take_pairs_or_json(monkeypatch):
    monkeypatch.setenv("MEWDEX_TEXT_MODELS", "e5=e5, use=use")
    monkeypatch.setenv("MEWDEX_RESOURCE_CONCURRENCY", '{"visual/openai": 2}')
    settings = Settings(_env_file=None)
    assert settings.text_models == {"e5": "e5", "use": "use"}
    assert settings.resource_concurrency == {"visual/openai": 2}
    monkeypatch.setenv("MEWDEX_RESOURCE_CONCURRENCY", "visual/openai=2,agent/openai=1")
    assert Settings(_env_file=None).resource_concurrency == {"visual/openai": 2, "agent/openai": 1}


@pytest.mark.parametrize(
    "variable, value, example",
    [
        ("MEWDEX_EGRESS_ALLOW_HOSTS", '["127.0.0.1:9000"', "MEWDEX_EGRESS_ALLOW_HOSTS=127.0.0.1:9000,minio.lan:9000"),
        ("MEWDEX_METRICS_ALLOW", '["10.0.0.5"', "MEWDEX_METRICS_ALLOW=10.0.0.5,10.1.0.0/16"),
        ("MEWDEX_PORT", "eighty", "MEWDEX_PORT=8275"),
        ("MEWDEX_AUTH", "sometimes", "MEWDEX_AUTH=auto"),
        ("MEWDEX_RESOURCE_CONCURRENCY", "visual/openai", "MEWDEX_RESOURCE_CONCURRENCY=visual/openai=2"),
        ("MEWDEX_PRICES", '{"m": {"tokens_in": "cheap"}}', 'MEWDEX_PRICES={"gpt-4o-mini"'),
    ],
)
def test_a_bad_setting_is_one_line_with_the_value_and_an_example(monkeypatch, variable, value, example):
    from mewdex.config import ConfigError, get_settings

    monkeypatch.setenv(variable, value)
    get_settings.cache_clear()
    try:
        with pytest.raises(ConfigError) as info:
            get_settings()
    finally:
        get_settings.cache_clear()
    assert len(info.value.lines) == 1 and "\n" not in info.value.lines[0]
    line = info.value.lines[0]
    assert line.startswith(f"{variable}='{value}' is not valid (") and example in line, line


def test_a_secret_setting_never_shows_its_value(monkeypatch):
    from mewdex.config import Settings as S
    from mewdex.config import describe_config_error

    class Strict(S):  # a secret-named setting that fails validation (none of the real ones can)
        openai_api_key: int | None = None

    monkeypatch.setenv("MEWDEX_OPENAI_API_KEY", "sk-do-not-print")
    with pytest.raises(ValidationError) as info:
        Strict(_env_file=None)
    lines = describe_config_error(info.value)
    assert "sk-do-not-print" not in "".join(lines) and "(hidden)" in lines[0]


def test_auto_web_processes_where_the_cpu_affinity_cannot_be_read(monkeypatch):
    """``MEWDEX_WEB_PROCESSES=auto`` counts the usable cores; without ``sched_getaffinity`` (macOS)
    every core of the machine."""
    import os

    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    assert Settings(web_processes="auto").serving_processes == min(2, os.cpu_count() or 1)
