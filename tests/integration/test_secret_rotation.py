"""Key rotation covers every sealed field of the database (issue 31, finding 3): connector
credentials, channel binding secrets (webhook secret, OneBot access token, ClawBot bot token) and the
WeCom app's secrets still open after ``mewdex secrets rotate``; a key is dropped only when nothing
references it; an interrupted rotation resumes; ``mewdex secrets status`` counts per key."""

from __future__ import annotations

import base64
import json
import os
import uuid

import pytest
from sqlalchemy import select, text

from conftest import drop_scope, new_scope

WEBHOOK_SECRET = "whsec_rotation-test-551122"
ONEBOT_TOKEN = "onebot-access-token-8877"
CLAWBOT_TOKEN = "clawbot-bot-token-6655@im.bot"
WECOM_SECRET = "wecom-app-secret-zz-4433"
TELEGRAM_TOKEN = "123456789:AAtelegram-rotation-token-0011223344"


def _bind(session, scope_id: str, channel: str, config: dict) -> None:
    from mewdex.channels import bindings
    from mewdex.db.models import ChannelBinding

    session.add(
        ChannelBinding(
            scope_id=scope_id,
            channel=channel,
            status="active",
            identity=f"{channel}-{uuid.uuid4().hex[:8]}",
            config=bindings.seal_config(scope_id, channel, config),
        )
    )


@pytest.fixture
def sealed_everywhere(sessions):
    """A scope bound to webhook, OneBot and ClawBot (secrets sealed), the WeCom app configured, and a
    platform connector with an API key; the WeCom setting as it was is put back afterwards."""
    from mewdex.channels.telegram import setup as telegram
    from mewdex.channels.wecom import setup as wecom
    from mewdex.platform import instance
    from mewdex.providers import connectors

    scope = new_scope(sessions, "t-rot")
    with sessions.begin() as session:
        saved_wecom = instance.get_setting(session, wecom.APP_SETTING, None)
        saved_telegram = instance.get_setting(session, telegram.TOKEN_SETTING, None)
        telegram.set_stored_token(session, TELEGRAM_TOKEN)
        _bind(session, scope.scope_id, "webhook", {"url": "https://hooks.example.org/x", "secret": WEBHOOK_SECRET})
        _bind(session, scope.scope_id, "onebot", {"mode": "ws", "access_token": ONEBOT_TOKEN})
        _bind(session, scope.scope_id, "clawbot", {"bot_token": CLAWBOT_TOKEN, "base_url": "https://ilink.example"})
        wecom.configure_app(
            session,
            corp_id="ww0123456789",
            agent_id=1000002,
            secret=WECOM_SECRET,
            token="wecom-callback-token",
            encoding_aes_key=base64.b64encode(os.urandom(32)).decode().rstrip("="),
        )
        d = connectors.create_definition(
            session,
            provider="openai_compatible",
            name=f"rot-{uuid.uuid4().hex[:6]}",
            visibility="selected",
            credentials={"api_key": "sk-rotation-test-000111"},
            config={"base_url": "https://api.example.com/v1", "chat_model": "m"},
        )
        definition_id = d.definition_id
    yield scope, definition_id
    with sessions.begin() as session:
        if saved_wecom is None:
            session.execute(text("DELETE FROM platform_settings WHERE key = :k"), {"k": wecom.APP_SETTING})
        else:
            instance.set_setting(session, wecom.APP_SETTING, saved_wecom)
        if saved_telegram is None:
            instance.delete_setting(session, telegram.TOKEN_SETTING)
        else:
            instance.set_setting(session, telegram.TOKEN_SETTING, saved_telegram)
        session.execute(text("DELETE FROM external_system_audits WHERE definition_id = :d"), {"d": definition_id})
        session.execute(text("DELETE FROM external_system_definitions WHERE definition_id = :d"), {"d": definition_id})
    drop_scope(sessions, scope)


def _opened(sessions, scope_id: str, definition_id) -> dict[str, str]:
    from mewdex.channels import bindings
    from mewdex.channels.telegram import setup as telegram
    from mewdex.channels.wecom import setup as wecom
    from mewdex.providers import connectors

    with sessions.begin() as session:
        found = {
            channel: bindings.view(bindings.get(session, scope_id, channel)).config
            for channel in ("webhook", "onebot", "clawbot")
        }
        definition = connectors.get_definition(session, definition_id)
        return {
            "webhook": found["webhook"]["secret"],
            "onebot": found["onebot"]["access_token"],
            "clawbot": found["clawbot"]["bot_token"],
            "wecom": wecom.load_app(session).secret,
            "telegram": telegram.configured_token()[0],
            "connector": connectors._open_all(definition.credentials, connectors._definition_aad(definition_id))[
                "api_key"
            ],
        }


EXPECTED = {
    "webhook": WEBHOOK_SECRET,
    "onebot": ONEBOT_TOKEN,
    "clawbot": CLAWBOT_TOKEN,
    "wecom": WECOM_SECRET,
    "telegram": TELEGRAM_TOKEN,
    "connector": "sk-rotation-test-000111",
}


def _cli(*args: str):
    """The ``mewdex`` command in this process (the same app the console script runs)."""
    from typer.testing import CliRunner

    from mewdex.cli import app

    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def test_secrets_rotate_keeps_channel_and_wecom_secrets_readable(mewdex_env, sessions, sealed_everywhere):
    from mewdex.providers import secrets

    scope, definition_id = sealed_everywhere
    old_kid = secrets.active_key_id()
    assert _opened(sessions, scope.scope_id, definition_id) == EXPECTED
    rotated = _cli("secrets", "rotate")
    assert "re-encrypted" in rotated.stdout
    new_kid = secrets.active_key_id()
    assert new_kid != old_kid
    # every secret opens (on main the channel and WeCom ones were sealed with a dropped key)
    assert _opened(sessions, scope.scope_id, definition_id) == EXPECTED
    status = json.loads(_cli("secrets", "status", "--json").stdout)
    assert status["active"] == new_kid
    by_kid = {k["kid"]: k for k in status["keys"]}
    assert old_kid not in by_kid  # nothing references it any more: dropped
    assert by_kid[new_kid]["by_column"]["channel_bindings.config"] >= 3
    assert by_kid[new_kid]["by_column"]["platform_settings.value"] >= 4
    assert by_kid[new_kid]["by_column"]["external_system_definitions.credentials"] >= 1
    assert status["total"] == by_kid[new_kid]["secrets"]
    shown = rotated.output + json.dumps(status)
    assert not any(secret in shown for secret in EXPECTED.values())


def test_rotation_resumes_in_batches_and_keeps_a_key_while_referenced(sessions, sealed_everywhere, monkeypatch):
    """One row per batch; the rotation stops after its first batch (a crash): the old key stays (values
    still reference it) and status counts both keys; ``--resume`` finishes without another key."""
    from mewdex.db.models import ChannelBinding
    from mewdex.providers import sealed_fields, secrets

    scope, definition_id = sealed_everywhere
    monkeypatch.setattr(sealed_fields, "BATCH_ROWS", 1)
    old_kid = secrets.active_key_id()
    batches = []

    def crash(column: str, done: int) -> None:
        batches.append((column, done))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sealed_fields.rotate(sessions, progress=crash)
    new_kid = secrets.active_key_id()
    assert new_kid != old_kid and len(batches) == 1
    status = sealed_fields.status(sessions)
    counts = {k["kid"]: k["secrets"] for k in status["keys"]}
    # at most the first batch (one row) was re-sealed and committed; the rest still names the old key
    assert counts.get(new_kid, 0) <= 1 and counts[old_kid] >= 6 and sum(counts.values()) == status["total"]
    assert old_kid in secrets.ring_key_ids()
    assert _opened(sessions, scope.scope_id, definition_id) == EXPECTED

    result = sealed_fields.rotate(sessions, new_key=False)
    assert result["active"] == new_kid and result["reencrypted"] >= 4
    assert old_kid not in secrets.ring_key_ids()
    assert _opened(sessions, scope.scope_id, definition_id) == EXPECTED
    with sessions.begin() as session:
        configs = session.execute(select(ChannelBinding.config).where(ChannelBinding.scope_id == scope.scope_id))
        assert {v["kid"] for (config,) in configs for v in config.values() if secrets.is_sealed(v)} == {new_kid}


def test_every_module_that_seals_is_covered_by_the_registry():
    """A new sealed field must be registered (else rotation would drop its key): the modules that call
    ``secrets.seal`` are exactly the owners of the registered columns."""
    import pathlib

    import mewdex

    root = pathlib.Path(mewdex.__file__).parent
    sealing = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "secrets.seal(" in path.read_text() and path.name not in ("secrets.py", "sealed_fields.py")
    )
    # channels/discord/interactions.py seals a waiting interaction's token in its task's payload, and
    # channels/delivery.py a reply mode's handle in its delivery's (sealed_fields.SEALED_TASK_PAYLOADS:
    # the registry's tasks.payload column).
    assert sealing == [
        "channels/bindings.py",
        "channels/delivery.py",
        "channels/discord/interactions.py",
        "channels/telegram/setup.py",
        "channels/wecom/setup.py",
        "providers/connectors/__init__.py",
    ]


def test_sealed_instance_settings_are_registered():
    """The settings that seal members name the keys the registry lists (WeCom app, Telegram token)."""
    from mewdex.channels.telegram import setup as telegram
    from mewdex.channels.wecom import setup as wecom
    from mewdex.providers.sealed_fields import SEALED_SETTINGS

    assert SEALED_SETTINGS[wecom.APP_SETTING] == wecom.APP_SECRET_FIELDS
    assert SEALED_SETTINGS[telegram.TOKEN_SETTING] == ("token",)
