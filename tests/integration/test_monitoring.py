"""Probes and metrics (README "Monitoring"): ``/livez``, ``/readyz``, ``/metrics`` of the real app over
the real database; the metrics text is parsed with prometheus_client's own parser."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from accounts_helpers import bearer
from conftest import LOCAL_CLIENT, LOCAL_ORIGIN, client_for

FOREIGN_PEER = {"base_url": LOCAL_ORIGIN, "client": ("203.0.113.5", 40000)}


def parse(body: str) -> dict[str, list]:
    """``{sample name: [(labels, value)]}`` of a metrics text (prometheus_client's parser)."""
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def value(samples, name: str, **labels) -> float:
    found = [v for lab, v in samples.get(name, []) if all(lab.get(k) == w for k, w in labels.items())]
    assert found, f"no {name} with {labels}; have {samples.get(name, [])[:10]}"
    return found[0]


@pytest.fixture
def client(scope):
    with client_for(scope) as c:
        yield c


def _insert_task(session, scope_id: str, *, status: str, lane: str = "default", age_s: float = 0.0, run_s=1.0):
    now = datetime.now(UTC)
    task_id = f"mon-{uuid.uuid4().hex[:12]}"
    session.execute(
        text(
            "INSERT INTO tasks (id, scope_id, task_type, submission_mode, lane, payload, status, available_at, "
            "started_at, completed_at, attempt_count, max_attempts, claim_generation, created_at, updated_at) "
            "VALUES (:id, :s, 'noop', 'standalone', :lane, '{}', :st, :avail, :started, :done, 1, 3, 1, :c, :c)"
        ),
        {
            "id": task_id,
            "s": scope_id,
            "lane": lane,
            "st": status,
            "avail": now - timedelta(seconds=age_s),
            "started": now - timedelta(seconds=run_s) if status != "queued" else None,
            "done": now if status in ("succeeded", "failed") else None,
            "c": now - timedelta(seconds=age_s),
        },
    )
    return task_id


def test_probes_and_metrics_series(client, scope, sessions, settings_env):
    """A stalled queue degrades /health but neither /livez nor /readyz; /metrics from loopback carries
    every documented series with values that match what the database holds."""
    settings_env(MEWDEX_QUEUE_STALL_SECONDS="1")
    with sessions.begin() as session:
        _insert_task(session, scope.scope_id, status="queued", age_s=3600)  # due an hour ago, no worker
        _insert_task(session, scope.scope_id, status="succeeded", lane="visual", run_s=2.0)
        _insert_task(session, scope.scope_id, status="failed", lane="visual", run_s=0.5)
        session.execute(
            text(
                "INSERT INTO channel_deliveries (delivery_id, scope_id, channel, target, kind, status, attempts, "
                "created_at, updated_at) VALUES (:d, :s, 'webhook', 'https://example.com/hook', 'text', :st, 1, "
                "now(), now())"
            ),
            [{"d": uuid.uuid4(), "s": scope.scope_id, "st": st} for st in ("sent", "retrying")],
        )
        session.execute(
            text(
                "INSERT INTO usage_events (event_id, scope_id, kind, model_profile, units, cost_cny, created_at) "
                "VALUES (:e, :s, 'provider.chat', 'test-model', '{}', 0.25, now())"
            ),
            {"e": uuid.uuid4(), "s": scope.scope_id},
        )
        session.execute(
            text(
                "INSERT INTO external_system_audits (audit_id, scope_id, definition_revision, event, outcome, "
                "duration_ms, detail, created_at) VALUES (:a, :s, 1, 'call', 'failed', 12, '{}', now())"
            ),
            {"a": uuid.uuid4(), "s": scope.scope_id},
        )

    health = client.get("/health")
    assert health.status_code == 503 and health.json()["status"] == "degraded"  # the queue is stalled
    live = client.get("/livez")
    assert live.status_code == 200 and live.json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}, ready.text
    assert client.post("/api/v1/search", json={"query": "cat"}).status_code == 200

    from mewdex.db.engine import get_sessionmaker

    # a connection of the process's current main pool (the one /metrics reports) in use during the scrape
    with get_sessionmaker()() as held:
        held.connection()
        r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    m = parse(r.text)
    assert value(m, "mewdex_database_up") == 1
    # HTTP: by route template and status, with a latency histogram.
    assert value(m, "mewdex_http_requests_total", route="/livez", status="200", method="GET") >= 1
    assert value(m, "mewdex_http_requests_total", route="/health", status="503") >= 1
    assert value(m, "mewdex_http_request_duration_seconds_count", route="/api/v1/search", method="POST") >= 1
    assert value(m, "mewdex_http_request_duration_seconds_bucket", route="/livez", le="+Inf") >= 1
    # Search latency per leg (the legs read the main database: no replica is configured).
    for leg in ("keyword", "e5", "use"):
        assert value(m, "mewdex_search_leg_duration_seconds_count", leg=leg, database="primary") >= 1
    assert value(m, "mewdex_search_duration_seconds_count") >= 1
    # Queue depth and the oldest due task's age per lane.
    assert value(m, "mewdex_queue_depth", lane="default", state="queued") >= 1
    assert value(m, "mewdex_queue_oldest_age_seconds", lane="default") >= 3600
    # Task outcomes and durations per task type (the last 5 minutes).
    assert value(m, "mewdex_tasks_finished_5m", task_type="noop", outcome="succeeded") >= 1
    assert value(m, "mewdex_tasks_finished_5m", task_type="noop", outcome="failed") >= 1
    assert value(m, "mewdex_task_duration_seconds_5m", task_type="noop", quantile="1") >= 2.0
    assert 0 < value(m, "mewdex_task_duration_seconds_5m", task_type="noop", quantile="0.5") <= 2.0
    # Workers, database pool, disk.
    assert value(m, "mewdex_worker_restarts_total") == 0
    assert value(m, "mewdex_workers_configured") == 0
    assert value(m, "mewdex_db_pool_in_use", pool="main") >= 1  # the one held above
    assert value(m, "mewdex_db_pool_waiting", pool="main") == 0
    assert value(m, "mewdex_db_pool_size", pool="main") >= 1
    assert value(m, "mewdex_disk_free_bytes") > 0
    # Deliveries per channel and outcome; provider calls and cost.
    assert value(m, "mewdex_channel_deliveries_5m", channel="webhook", status="sent") >= 1
    assert value(m, "mewdex_channel_deliveries_pending", channel="webhook") >= 1
    assert value(m, "mewdex_provider_calls_5m", provider="unknown", outcome="failed") >= 1
    assert value(m, "mewdex_provider_cost_cny_5m", kind="provider.chat") >= 0.25
    assert value(m, "process_resident_memory_bytes") > 0


def test_readyz_refuses_pending_migrations_and_shutdown(client, sessions):
    with sessions.begin() as session:
        head = session.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        session.execute(text("UPDATE alembic_version SET version_num = '0016_halfvec_hnsw'"))
    try:
        r = client.get("/readyz")
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        assert [x["code"] for x in r.json()["reasons"]] == ["migrations_pending"]
        assert client.get("/livez").status_code == 200
    finally:
        with sessions.begin() as session:
            session.execute(text("UPDATE alembic_version SET version_num = :h"), {"h": head})
    assert client.get("/readyz").status_code == 200
    client.app.state.shutting_down = True
    try:
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["reasons"][0]["code"] == "shutting_down"
        assert client.get("/livez").status_code == 200
    finally:
        client.app.state.shutting_down = False


def test_readyz_names_no_schema_revision_to_an_anonymous_caller(client, sessions):
    """Issue 40 finding 9: an anonymous caller (a foreign address, no credential) gets the status and a
    reason code with a fixed sentence, never the schema revisions; loopback (an operator) still gets
    them, as ``mewdex doctor`` does."""
    foreign = TestClient(client.app, **FOREIGN_PEER, raise_server_exceptions=False)
    with sessions.begin() as session:
        head = session.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    ready = foreign.get("/readyz", headers={"Host": "10.1.2.3:8275"})
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}
    old = "0016_halfvec_hnsw"
    with sessions.begin() as session:
        session.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": old})
    try:
        r = foreign.get("/readyz", headers={"Host": "10.1.2.3:8275"})
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        assert r.json()["status"] == "not_ready"
        assert [x["code"] for x in r.json()["reasons"]] == ["migrations_pending"]
        for revision in (old, head, old.split("_")[0], head.split("_")[0]):
            assert revision not in r.text, r.text
        operator = client.get("/readyz")  # loopback: the one who runs the server
        assert operator.status_code == 503
        assert old in operator.json()["reasons"][0]["message"] and head in operator.json()["reasons"][0]["message"]
    finally:
        with sessions.begin() as session:
            session.execute(text("UPDATE alembic_version SET version_num = :h"), {"h": head})
    assert foreign.get("/readyz", headers={"Host": "10.1.2.3:8275"}).status_code == 200


def test_metrics_only_for_loopback_admins_and_the_allow_list(auth_app, settings_env):
    """A foreign address gets the answer of an unknown path (404); a user's token too; an admin's token
    and an address in MEWDEX_METRICS_ALLOW get the text."""
    user, admin = auth_app.new("user"), auth_app.new("admin", admin=True)
    r = admin.client.post(
        "/api/v1/tokens", json={"name": "prometheus", "scopes": ["read", "admin"]}, headers={"X-CSRF-Token": admin.csrf}
    )
    assert r.status_code == 201, r.text
    admin_token = r.json()["token"]
    foreign = TestClient(auth_app.app, **FOREIGN_PEER)  # the app runs already (its accounts' clients)
    unknown = foreign.get("/no-such-path")
    r = foreign.get("/metrics")
    assert r.status_code == 404 and r.json() == unknown.json()
    assert foreign.get("/metrics", headers=bearer(user.token)).status_code == 404
    assert foreign.get("/metrics", headers={"X-Forwarded-For": "127.0.0.1"}).status_code == 404
    assert foreign.get("/metrics", headers=bearer(admin.token)).status_code == 404  # a token without "admin"
    r = foreign.get("/metrics", headers=bearer(admin_token))
    assert r.status_code == 200 and "mewdex_queue_depth" in r.text
    settings_env(MEWDEX_METRICS_ALLOW='["203.0.113.0/24"]')
    assert foreign.get("/metrics").status_code == 200
    assert foreign.get("/livez").status_code == 200  # probes answer anyone, whatever the Host
    assert foreign.get("/readyz", headers={"Host": "10.1.2.3:8275"}).status_code == 200
    assert foreign.get("/metrics", headers={"Host": "10.1.2.3:8275"}).status_code == 421
    local = TestClient(auth_app.app, **LOCAL_CLIENT)
    assert local.get("/metrics").status_code == 200
    assert local.get("/metrics", headers={"X-Forwarded-For": "198.51.100.1"}).status_code == 404
