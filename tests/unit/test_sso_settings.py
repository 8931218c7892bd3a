"""Issue 46, item 1: the single sign-on settings — every secret setting read from a file
(``MEWDEX_<NAME>_FILE``), password sign-in off only with a provider, and the provider's own host
reachable by egress although private (and no other host with it)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from mewdex import egress, hooks
from mewdex.config import ConfigError, Settings, get_settings, is_secret_setting


@pytest.fixture
def env(monkeypatch):
    """``env(MEWDEX_X="…")``: set variables for this test; the settings cache is cleared around it."""

    def apply(**values: str) -> None:
        for key, value in values.items():
            monkeypatch.setenv(key, value)
        get_settings.cache_clear()

    yield apply
    monkeypatch.undo()
    get_settings.cache_clear()


def test_every_secret_setting_can_come_from_a_file(env, tmp_path):
    models = (Settings, *hooks.implementations("settings").values())  # a channel's own settings too
    owner = {name: model for model in models for name in model.model_fields}
    secrets = [name for name in owner if is_secret_setting(name)]
    assert {
        "oidc_client_secret",
        "openai_api_key",
        "telegram_bot_token",
        "database_url",
        "secret_key",
        "backup_passphrase",
    } <= set(secrets)
    for name in secrets:
        (tmp_path / name).write_text(f"from-a-file-{name}\n", encoding="utf-8")  # the line break is not part of it
        env(**{f"MEWDEX_{name.upper()}_FILE": str(tmp_path / name)})
    env(MEWDEX_OIDC_ISSUER="https://auth.example.org", MEWDEX_OIDC_CLIENT_ID="mewdex")
    settings = get_settings()
    for name in secrets:
        value = getattr(settings if owner[name] is Settings else settings.group(owner[name]), name)
        value = value.get_secret_value() if isinstance(value, SecretStr) else value
        assert value == f"from-a-file-{name}", name
    assert not is_secret_setting("oidc_client_id") and not is_secret_setting("backup_keep")


def test_a_secret_given_twice_or_unreadable_is_a_clear_error_that_shows_no_secret(env, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("the-file-secret")
    env(MEWDEX_OIDC_CLIENT_SECRET="the-env-secret", MEWDEX_OIDC_CLIENT_SECRET_FILE=str(secret))
    with pytest.raises(ConfigError) as info:
        get_settings()
    message = str(info.value)
    assert "MEWDEX_OIDC_CLIENT_SECRET or MEWDEX_OIDC_CLIENT_SECRET_FILE, not both" in message
    assert "the-env-secret" not in message and "the-file-secret" not in message

    env(MEWDEX_OIDC_CLIENT_SECRET="", MEWDEX_OIDC_CLIENT_SECRET_FILE=str(tmp_path / "missing"))
    with pytest.raises(ConfigError) as info:
        get_settings()
    assert f"MEWDEX_OIDC_CLIENT_SECRET_FILE={tmp_path / 'missing'} cannot be read" in str(info.value)


def test_password_sign_in_can_be_off_only_with_a_provider(env):
    env(MEWDEX_PASSWORD_LOGIN="false")
    with pytest.raises(ConfigError) as info:
        get_settings()
    assert "MEWDEX_PASSWORD_LOGIN=false needs MEWDEX_OIDC_ISSUER" in str(info.value)
    env(MEWDEX_OIDC_ISSUER="https://auth.example.org")
    with pytest.raises(ConfigError) as info:
        get_settings()
    assert "MEWDEX_OIDC_CLIENT_ID is not" in str(info.value)
    env(MEWDEX_OIDC_CLIENT_ID="mewdex")
    assert get_settings().password_login is False
    env(MEWDEX_OIDC_ISSUER="auth.example.org")
    with pytest.raises(ConfigError) as info:
        get_settings()
    assert "MEWDEX_OIDC_ISSUER='auth.example.org' is not valid" in str(info.value)


def test_egress_reaches_the_issuers_host_although_private_and_no_other(env):
    assert egress.forbidden_address(__import__("ipaddress").ip_address("127.0.0.1"))
    with pytest.raises(egress.EgressError):
        egress.check_url("http://127.0.0.1:9443/.well-known/openid-configuration")
    env(MEWDEX_OIDC_ISSUER="http://127.0.0.1:9443/realms/home", MEWDEX_OIDC_CLIENT_ID="mewdex")
    target = egress.check_url("http://127.0.0.1:9443/realms/home/.well-known/openid-configuration")
    assert (target.host, target.port, target.address) == ("127.0.0.1", 9443, "127.0.0.1")
    for other in ("http://127.0.0.1:9444/x", "http://10.0.0.1:9443/x", "https://127.0.0.1/x"):
        with pytest.raises(egress.EgressError) as info:
            egress.check_url(other)
        assert info.value.code in ("egress_scheme_refused", "egress_address_refused"), other
