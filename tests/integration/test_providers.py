"""Providers (issue 15): the fake OpenAI-compatible server through the official SDK and the egress
guard, connectors (grant, connect, verify, revision bump, revoke, visibility), metering (reserve →
commit/release; usage events and audits for refused and failed calls), secrets never leaked."""

from __future__ import annotations

import json
import logging
import uuid
from decimal import Decimal

import pytest
from sqlalchemy import select, text

from fakes.openai_server import FakeOpenAI, Reply


@pytest.fixture
def fake(settings_env):
    with FakeOpenAI() as server:
        settings_env(
            MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([server.host_port]),
            MEWDEX_PROVIDER_MAX_RETRIES="1",
            MEWDEX_PROVIDER_TIMEOUT_SECONDS="5",
        )
        yield server


def _connection(fake, **config):
    from mewdex.providers.connectors import Connection

    return Connection(
        uuid.uuid4(),
        "openai_compatible",
        "t",
        1,
        {"base_url": fake.base_url, **config},
        None,
        {"api_key": fake.api_key},
        "local",
        None,
    )


def _client(fake, **kw):
    from mewdex.providers.openai_compat import sdk_client

    return sdk_client(_connection(fake), **kw)


PNG_1x1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
)


def test_fake_server_speaks_the_sdk_features(fake):
    import base64

    client = _client(fake)
    schema = {
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
        "additionalProperties": False,
    }
    fake.script(Reply.json({"title": "a cat"}))
    answer = client.chat.completions.create(
        model="fake-vision",
        response_format={"type": "json_schema", "json_schema": {"name": "ctx", "strict": True, "schema": schema}},
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "describe"},
                    {
                        "type": "image_url",
                        "image_url": {
                            "url": "data:image/png;base64," + base64.b64encode(PNG_1x1).decode(),
                            "detail": "low",
                        },
                    },
                ],
            }
        ],
    )
    assert json.loads(answer.choices[0].message.content) == {"title": "a cat"}
    assert answer.usage.prompt_tokens >= 85
    body = fake.chat_requests()[-1]
    assert FakeOpenAI.images(body) == [PNG_1x1] and body["response_format"]["json_schema"]["strict"] is True

    fake.script(Reply.tool_call("search_memes", {"query": "cat"}))
    answer = client.chat.completions.create(
        model="fake-chat",
        messages=[{"role": "user", "content": "find"}],
        tools=[
            {
                "type": "function",
                "function": {"name": "search_memes", "parameters": {"type": "object", "properties": {}}},
            }
        ],
    )
    call = answer.choices[0].message.tool_calls[0]
    assert call.function.name == "search_memes" and json.loads(call.function.arguments) == {"query": "cat"}

    fake.script(Reply.text("hello streaming world"))
    chunks = list(
        client.chat.completions.create(
            model="fake-chat",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "hello streaming world"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0

    fake.script(Reply.calls([("a", {"x": 1}), ("b", "{}")]))
    streamed = list(
        client.chat.completions.create(model="fake-chat", messages=[{"role": "user", "content": "t"}], stream=True)
    )
    names = [
        tc.function.name
        for c in streamed
        if c.choices
        for tc in (c.choices[0].delta.tool_calls or [])
        if tc.function and tc.function.name
    ]
    assert names == ["a", "b"]

    fake.script(Reply.refusal("no"))
    answer = client.chat.completions.create(model="fake-chat", messages=[{"role": "user", "content": "x"}])
    assert answer.choices[0].message.refusal == "no" and answer.choices[0].message.content is None

    vectors = client.embeddings.create(model="fake-embed", input=["a", "b", "a"])
    assert len(vectors.data) == 3 and vectors.data[0].embedding == vectors.data[2].embedding
    assert vectors.data[0].embedding != vectors.data[1].embedding and len(vectors.data[0].embedding) == 16


def test_failure_modes_become_provider_errors(fake):
    import openai

    from mewdex.providers.openai_compat import provider_error

    client = _client(fake)
    msg = [{"role": "user", "content": "x"}]
    fake.script(Reply.error(429, "slow down", {"Retry-After": "0"}), Reply.text("after retry"))
    assert client.chat.completions.create(model="m", messages=msg).choices[0].message.content == "after retry"

    fake.script(Reply.error(500), Reply.error(500))
    with pytest.raises(openai.InternalServerError) as err:
        client.chat.completions.create(model="m", messages=msg)
    assert provider_error(err.value).code == "provider_failed" and provider_error(err.value).retryable

    fake.script(Reply.error(429, "quota", {"Retry-After": "0"}), Reply.error(429, "quota", {"Retry-After": "0"}))
    with pytest.raises(openai.RateLimitError) as err:
        client.chat.completions.create(model="m", messages=msg)
    assert provider_error(err.value).code == "provider_rate_limited"

    fake.script(Reply.delay(2.0))
    with pytest.raises(openai.APITimeoutError) as err:
        _client(fake, timeout=0.5, max_retries=0).chat.completions.create(model="m", messages=msg)
    assert provider_error(err.value).code == "provider_failed"

    fake.script(Reply.invalid_json())
    with pytest.raises(Exception) as err:
        client.chat.completions.create(model="m", messages=msg)
    assert provider_error(err.value).code in ("provider_invalid_output", "provider_failed")

    bad = _connection(fake)
    bad.credentials = {"api_key": "sk-wrong-key-000000"}
    from mewdex.providers.openai_compat import sdk_client

    with pytest.raises(openai.AuthenticationError) as err:
        sdk_client(bad).models.list()
    assert "sk-wrong" not in provider_error(err.value).message


@pytest.mark.parametrize(
    "reply",
    [
        # answers 500 in 0.8 s and asks for a retry in 1 s: each try well inside its own 2 s
        lambda: Reply.delay(0.8, Reply.error(500, headers={"Retry-After": "1"})),
        # answers nothing within the 1 s read timeout: the SDK retries the timeout after a backoff
        lambda: Reply.delay(1.5),
    ],
    ids=["retried-5xx", "retried-timeouts"],
)
def test_one_sdk_call_has_one_deadline_across_its_retries(fake, reply):
    """Issue 40, finding 10: the deadline of an SDK call (twice the timeout, as egress.fetch's covers
    its redirects and retries) starts when the call starts and covers every retry and the waits
    between them; with MEWDEX_PROVIDER_MAX_RETRIES = 3 a call did run four tries and three
    backoffs (6 s and more) past its 2 s."""
    import time

    import openai

    client = _client(fake, timeout=1.0, max_retries=3)
    fake.script(*(reply() for _ in range(4)))
    started = time.monotonic()
    with pytest.raises(openai.APIError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    took = time.monotonic() - started
    assert took < 3.0, f"the call ran {took:.1f} s, past its 2 s deadline"
    client.close()


def test_egress_guard_stops_the_sdk_without_an_allow_listed_host(settings_env):
    from mewdex.providers.openai_compat import provider_error

    with FakeOpenAI() as server:
        settings_env(MEWDEX_EGRESS_ALLOW_HOSTS="[]")
        with pytest.raises(Exception) as err:
            _client(server, max_retries=0).models.list()
        assert provider_error(err.value).code == "egress_scheme_refused"
        assert server.requests == []


# ---------------------------------------------------------------- connectors


@pytest.fixture
def people(sessions):
    from accounts_helpers import delete_users, own_scope_users

    with sessions.begin() as session:
        users, made = own_scope_users(session, ["conn0", "conn1"], role="user")
        people = [(u.user_id, u.scope_id) for u in users]
    yield people
    with sessions.begin() as session:
        made_ids = [uuid.UUID(m) for m in made]
        session.execute(text("DELETE FROM external_system_audits WHERE user_id = ANY(:u)"), {"u": made_ids})
        session.execute(text("DELETE FROM external_systems WHERE user_id = ANY(:u)"), {"u": made_ids})
    delete_users(sessions, made)


def _user(session, user_id):
    from mewdex.db.models import User

    return session.get(User, user_id)


def test_connector_lifecycle_and_no_secret_leaks(fake, sessions, people, caplog, settings_env):
    from mewdex.db.models import ExternalSystemAudit, ScopeContext
    from mewdex.providers import connectors
    from mewdex.providers.errors import ProviderError
    from mewdex.providers.openai_compat import chat_client

    caplog.set_level(logging.DEBUG)
    (alice_id, alice_scope), (bob_id, bob_scope) = people
    name = f"lab-{uuid.uuid4().hex[:6]}"
    with sessions.begin() as session:
        definition = connectors.create_definition(
            session,
            provider="openai_compatible",
            name=name,
            config={"base_url": fake.base_url, "chat_model": "fake-chat"},
        )
        definition_id = definition.definition_id
        with pytest.raises(ProviderError) as err:
            connectors.create_definition(
                session, provider="openai_compatible", name="x", config={"base_url": "ftp://nope"}
            )
        assert err.value.code == "connector_config_invalid"
        # not granted yet: invisible, and connecting looks like a missing definition
        assert definition_id not in [
            d.definition_id for d in connectors.visible_definitions(session, _user(session, alice_id))
        ]
        with pytest.raises(ProviderError) as err:
            connectors.save_connection(session, _user(session, alice_id), definition_id, {"api_key": fake.api_key})
        assert err.value.code == "not_found"
        connectors.grant(session, definition_id, alice_id)
        system = connectors.save_connection(session, _user(session, alice_id), definition_id, {"api_key": fake.api_key})
        system_id = system.external_system_id
        assert system.credential_hint == "sk-…0001" and fake.api_key not in json.dumps(system.credentials)
        assert definition_id not in [
            d.definition_id for d in connectors.visible_definitions(session, _user(session, bob_id))
        ]
        with pytest.raises(ProviderError):
            connectors.get_connection(session, _user(session, bob_id), system_id)
        # unverified: not usable yet
        with pytest.raises(ProviderError) as err:
            chat_client(session, ScopeContext(alice_scope), "chat")
        assert err.value.code == "connector_unverified"

    verified = connectors.verify_connection(sessions, ScopeContext(alice_scope), system_id)
    assert verified.verified_revision == 1
    with sessions.begin() as session:
        client = chat_client(session, ScopeContext(alice_scope), "chat")
        assert client.model == "fake-chat" and client.connection.external_system_id == system_id
        with pytest.raises(ProviderError) as err:
            chat_client(session, ScopeContext(bob_scope), "chat")
        assert err.value.code == "connector_unavailable"
        # a config change bumps the revision: verify again before use
        connectors.update_definition(
            session,
            definition_id,
            config={"base_url": fake.base_url, "chat_model": "fake-chat", "vision_model": "fake-vision"},
        )
        assert connectors.get_definition(session, definition_id).revision == 2
        with pytest.raises(ProviderError) as err:
            chat_client(session, ScopeContext(alice_scope), "chat")
        assert err.value.code == "connector_unverified"
    connectors.verify_connection(sessions, ScopeContext(alice_scope), system_id)
    with sessions.begin() as session:
        assert chat_client(session, ScopeContext(alice_scope), "vision").model == "fake-vision"
        connectors.revoke(session, definition_id, alice_id)
        with pytest.raises(ProviderError):
            chat_client(session, ScopeContext(alice_scope), "chat")
        audits = (
            session.execute(select(ExternalSystemAudit).where(ExternalSystemAudit.definition_id == definition_id))
            .scalars()
            .all()
        )
        assert sorted((a.event, a.outcome, a.definition_revision) for a in audits) == [  # rows come unordered
            ("verify", "ok", 1),
            ("verify", "ok", 2),
        ]
        stored = json.dumps([a.detail for a in audits]) + str(
            session.execute(
                text("SELECT row_to_json(e)::text FROM external_systems e WHERE external_system_id = :i"),
                {"i": system_id},
            ).scalar()
        )
    assert fake.api_key not in stored
    assert fake.api_key not in caplog.text
    with sessions.begin() as session:
        session.execute(text("DELETE FROM external_system_audits WHERE definition_id = :d"), {"d": definition_id})
        session.execute(text("DELETE FROM external_systems WHERE definition_id = :d"), {"d": definition_id})
        session.execute(text("DELETE FROM external_system_definitions WHERE definition_id = :d"), {"d": definition_id})


def test_metered_call_reserves_commits_releases_and_refuses_over_budget(fake, sessions, people):
    from mewdex.db.models import ExternalSystemAudit, OperationGrant, ScopeContext, UsageEvent, User
    from mewdex.platform.errors import PlatformError
    from mewdex.providers import connectors
    from mewdex.providers.errors import ProviderError
    from mewdex.providers.metering import CallResult, metered_call
    from mewdex.providers.openai_compat import chat_client, usage_units

    (alice_id, alice_scope), _ = people
    scope = ScopeContext(alice_scope)
    name = f"paid-{uuid.uuid4().hex[:6]}"
    with sessions.begin() as session:
        d = connectors.create_definition(
            session,
            provider="openai_compatible",
            name=name,
            visibility="all",
            credentials={"api_key": fake.api_key},
            config={
                "base_url": fake.base_url,
                "chat_model": "fake-chat",
                "price_version": "2026-12",
                "prices": {"fake-chat": {"input": 2, "output": 8, "cached_input": 0.5}},
            },
        )
        definition_id = d.definition_id

    def call(model):
        def run():
            answer = model.client.chat.completions.create(
                model=model.model, messages=[{"role": "user", "content": "hi"}]
            )
            return CallResult(answer.choices[0].message.content, usage_units(answer.usage))

        return run

    fake.script(Reply.text("fine", usage={"prompt_tokens": 1000, "completion_tokens": 500, "cached_tokens": 200}))
    with sessions.begin() as session:
        model = chat_client(session, scope, "chat")
    assert (
        metered_call(sessions, scope, model, call(model), operation="provider.chat", kind="chat", event="chat").value
        == "fine"
    )
    fake.script(Reply.error(500), Reply.error(500))
    with pytest.raises(ProviderError) as err:
        metered_call(sessions, scope, model, call(model), operation="provider.chat", kind="chat", event="chat")
    assert err.value.code == "provider_failed"
    with sessions.begin() as session:
        session.get(User, alice_id).quota_analysis_cost_per_month = Decimal(0)
    before = len(fake.requests)
    with pytest.raises(PlatformError) as err:
        metered_call(sessions, scope, model, call(model), operation="provider.chat", kind="chat", event="chat")
    assert err.value.code == "quota_exceeded" and len(fake.requests) == before  # refused before any call
    with sessions.begin() as session:
        events = (
            session.execute(
                select(UsageEvent).where(UsageEvent.scope_id == alice_scope).order_by(UsageEvent.created_at)
            )
            .scalars()
            .all()
        )
        outcomes = [(e.units["outcome"], e.cost_cny) for e in events]
        # (1000-200)*2 + 200*0.5 + 500*8 per 1M tokens = 0.0057 CNY
        assert outcomes == [("ok", Decimal("0.005700")), ("failed", Decimal(0)), ("refused", Decimal(0))]
        assert events[0].units["price_version"] == "2026-12" and events[0].units["cached_input_tokens"] == 200
        states = sorted(
            g.state
            for g in session.execute(select(OperationGrant).where(OperationGrant.scope_id == alice_scope)).scalars()
        )
        assert states == ["committed", "released"]
        audits = (
            session.execute(
                select(ExternalSystemAudit)
                .where(ExternalSystemAudit.definition_id == definition_id)
                .order_by(ExternalSystemAudit.created_at)
            )
            .scalars()
            .all()
        )
        assert [(a.outcome, a.status_code) for a in audits] == [("ok", 200), ("failed", 500), ("refused", None)]
        session.execute(text("DELETE FROM external_system_audits WHERE definition_id = :d"), {"d": definition_id})
        session.execute(text("DELETE FROM external_system_definitions WHERE definition_id = :d"), {"d": definition_id})


def test_env_configuration_creates_and_updates_the_platform_definition(fake, sessions, settings_env):
    from mewdex.providers import connectors
    from mewdex.providers.openai_compat import configure_from_env

    settings_env(
        MEWDEX_OPENAI_BASE_URL=fake.base_url, MEWDEX_OPENAI_API_KEY=fake.api_key, MEWDEX_CHAT_MODEL="fake-chat"
    )
    first = configure_from_env(sessions)
    assert configure_from_env(sessions) == first
    with sessions.begin() as session:
        assert connectors.get_definition(session, first).revision in (1,)
    settings_env(MEWDEX_VISION_MODEL="fake-vision")
    configure_from_env(sessions)
    with sessions.begin() as session:
        row = connectors.get_definition(session, first)
        assert row.revision == 2 and row.config["vision_model"] == "fake-vision" and row.visibility == "all"
        assert fake.api_key not in json.dumps(row.credentials) and row.credential_hint == "sk-…0001"
        session.execute(text("DELETE FROM external_system_audits WHERE definition_id = :d"), {"d": row.definition_id})
        session.delete(row)


def test_secrets_rotate_reencrypts_every_stored_secret(fake, sessions, people, monkeypatch, tmp_path):
    from mewdex.providers import connectors, sealed_fields, secrets
    from mewdex.providers.openai_compat import chat_client

    (alice_id, alice_scope), _ = people
    with sessions.begin() as session:
        d = connectors.create_definition(
            session,
            provider="openai_compatible",
            name=f"rot-{uuid.uuid4().hex[:6]}",
            visibility="all",
            credentials={"api_key": fake.api_key},
            config={"base_url": fake.base_url, "chat_model": "fake-chat"},
        )
        definition_id, old_kid = d.definition_id, d.credentials["api_key"]["kid"]
    result = sealed_fields.rotate(sessions)
    assert result["reencrypted"] >= 1
    from mewdex.db.models import ScopeContext

    with sessions.begin() as session:
        row = connectors.get_definition(session, definition_id)
        assert row.credentials["api_key"]["kid"] == secrets.active_key_id() != old_kid
        assert chat_client(session, ScopeContext(alice_scope), "chat").connection.credentials["api_key"] == fake.api_key
        session.delete(row)


def test_cli_connectors_and_secrets_rotate_never_print_the_key(mewdex_env, sessions):
    import os
    import subprocess

    from conftest import MEWDEX_BIN

    env = {**os.environ, **mewdex_env.env, "PROVIDER_TEST_KEY": "sk-cli-secret-998877"}
    name = f"cli-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(
        [
            str(MEWDEX_BIN),
            "connectors",
            "create",
            "openai_compatible",
            name,
            "--config",
            '{"base_url": "https://api.example.com/v1", "chat_model": "m"}',
            "--visibility",
            "all",
            "--api-key-env",
            "PROVIDER_TEST_KEY",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    listed = subprocess.run(
        [str(MEWDEX_BIN), "connectors", "list"], env=env, capture_output=True, text=True, timeout=300
    )
    rotated = subprocess.run(
        [str(MEWDEX_BIN), "secrets", "rotate"], env=env, capture_output=True, text=True, timeout=300
    )
    assert rotated.returncode == 0 and "re-encrypted" in rotated.stdout
    assert name in listed.stdout and "sk-…8877" in listed.stdout
    for out in (made, listed, rotated):
        assert "sk-cli-secret-998877" not in out.stdout + out.stderr
    with sessions.begin() as session:
        session.execute(text("DELETE FROM external_system_definitions WHERE name = :n"), {"n": name})
