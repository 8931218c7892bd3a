"""The task, batch and processing API and the queue back-pressure (real app, real database, real worker)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from mewdex.web.app import create_app
from mewdex.web.deps import current_scope
from queue_helpers import enqueue_noops


@pytest.fixture
def client(scope):
    app = create_app(workers=0)
    app.dependency_overrides[current_scope] = lambda: scope
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def code(r) -> str:
    return r.json()["error"]["code"]


def test_list_filter_and_cursor_paging(client, sessions, scope):
    ids = enqueue_noops(sessions, scope, 7, lane="t-api-list")
    seen, cursor = [], None
    while True:
        r = client.get("/api/v1/tasks", params={"limit": 3, "type": "noop", **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        body = r.json()
        seen += [t["id"] for t in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))  # newest first, every task once
    assert client.get("/api/v1/tasks", params={"status": "failed"}).json()["items"] == []
    assert code(client.get("/api/v1/tasks", params={"cursor": "garbage"})) == "invalid_cursor"
    assert client.get("/api/v1/tasks", params={"status": "bogus"}).status_code == 422


def test_detail_cancel_retry_and_other_scope(client, sessions, scope, drain):
    from conftest import drop_scope, new_scope

    [task_id] = enqueue_noops(sessions, scope, 1, payload={"fail": "boom_error", "retryable": False})
    drain(scope)  # the real worker loop runs it: fails for good at once
    r = client.get(f"/api/v1/tasks/{task_id}")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "failed" and body["error"]["code"] == "boom_error"
    assert [a["state"] for a in body["attempt_history"]] == ["failed"]
    assert body["attempt_history"][0]["claim_generation"] == 1
    assert code(client.post(f"/api/v1/tasks/{task_id}/cancel")) == "task_not_cancellable"
    r = client.post(f"/api/v1/tasks/{task_id}/retry")
    assert r.status_code == 200 and r.json()["status"] == "queued" and r.json()["max_attempts"] == 1 + 3
    assert code(client.post(f"/api/v1/tasks/{task_id}/retry")) == "task_not_retryable"
    r = client.post(f"/api/v1/tasks/{task_id}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "failed" and r.json()["termination_reason"] == "cancelled"
    assert [e["code"] for e in r.json()["error_history"]] == ["boom_error", "cancelled"]
    other = new_scope(sessions)
    try:
        [theirs] = enqueue_noops(sessions, other, 1)
        assert client.get(f"/api/v1/tasks/{theirs}").status_code == 404
        assert client.post(f"/api/v1/tasks/{theirs}/cancel").status_code == 404
        assert client.get("/api/v1/tasks/nope").status_code == 404
    finally:
        drop_scope(sessions, other)


def test_backpressure_429_then_accepted_when_drained(client, sessions, scope, settings_env, drain):
    settings_env(MEWDEX_AGENT_BACKPRESSURE="3")
    [poison] = enqueue_noops(sessions, scope, 1, lane="agent", payload={"fail": "x_error", "retryable": False})
    drain(scope)
    assert client.get(f"/api/v1/tasks/{poison}").json()["status"] == "failed"
    queued = enqueue_noops(sessions, scope, 3, lane="agent")  # the limit
    r = client.post(f"/api/v1/tasks/{poison}/retry")
    assert r.status_code == 429 and code(r) == "queue_full"
    assert int(r.headers["Retry-After"]) >= 1
    assert r.json()["error"]["details"]["limit"] == 3
    assert client.get(f"/api/v1/tasks/{poison}").json()["status"] == "failed"  # nothing half-done
    drain(scope)
    assert all(client.get(f"/api/v1/tasks/{i}").json()["status"] == "succeeded" for i in queued)
    assert client.post(f"/api/v1/tasks/{poison}/retry").status_code == 200


def test_batch_finalised_once_with_summary(client, sessions, scope, drain):
    from mewdex.queue import batches

    with sessions.begin() as session:
        batch_id = batches.create(session, scope.scope_id).batch_id
    enqueue_noops(sessions, scope, 4, batch_id=batch_id)
    enqueue_noops(sessions, scope, 2, batch_id=batch_id, payload={"fail": "bad_input", "retryable": False})
    with sessions.begin() as session:
        batches.seal(session, scope.scope_id, batch_id)
    assert client.get(f"/api/v1/batches/{batch_id}").json()["state"] == "submitted"
    drain(scope)
    body = client.get(f"/api/v1/batches/{batch_id}").json()
    assert body["state"] == "complete" and body["finalized_at"]
    assert body["summary"] == {"tasks": 6, "succeeded": 4, "failed": 2, "failed_by_code": {"bad_input": 2}}
    finalized = body["finalized_at"]
    with sessions.begin() as session:
        batches.seal(session, scope.scope_id, batch_id)
        batches.task_ended(session, scope.scope_id, "whatever")
    assert client.get(f"/api/v1/batches/{batch_id}").json()["finalized_at"] == finalized
    assert client.get("/api/v1/tasks", params={"batch": batch_id, "limit": 200}).json()["items"].__len__() == 6
    assert client.get("/api/v1/batches/batch-missing").status_code == 404


def test_health_reports_queues_and_workers(client, sessions, scope):
    enqueue_noops(sessions, scope, 2, lane="embedding")
    body = client.get("/health").json()
    assert body["status"] == "ok"
    assert set(body["queues"]) >= {"default", "visual", "agent", "embedding"}
    assert body["queues"]["embedding"]["queued"] >= 2
    assert body["workers"]["in_process"] == {"threads": 0, "alive": 0, "busy": 0, "lanes": []}
    with sessions.begin() as session:
        session.execute(text("DELETE FROM tasks WHERE scope_id = :s"), {"s": scope.scope_id})
