"""The task, batch and processing API and the queue back-pressure (real app, real database, real worker)."""

from __future__ import annotations

from sqlalchemy import text

from queue_helpers import enqueue_noops


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


def test_batch_active_member_check_reads_the_scopes_active_tasks_then_the_members(sessions, scope, monkeypatch):
    """has_active_member reads the scope's first ACTIVE_PROBE running and queued tasks; a scope with
    more active tasks than that, none of those read in the batch, is answered from the members."""
    from mewdex.queue import batches

    monkeypatch.setattr(batches, "ACTIVE_PROBE", 3)
    joins = []
    join = batches._members_active
    monkeypatch.setattr(batches, "_members_active", lambda *a: joins.append(a) or join(*a))
    with sessions.begin() as session:
        batch_id = batches.create(session, scope.scope_id).batch_id
    members = enqueue_noops(sessions, scope, 2, batch_id=batch_id)
    others = enqueue_noops(sessions, scope, 5)  # available later than the members

    def active(*, joined: bool = False) -> bool:
        del joins[:]
        with sessions.begin() as session:
            answer = batches.has_active_member(session, scope.scope_id, batch_id)
        assert bool(joins) == joined, "answered from the join" if joins else "answered from the tasks read"
        return answer

    def set_status(ids: list[str], status: str, later: bool = False) -> None:
        with sessions.begin() as session:
            session.execute(
                text(
                    "UPDATE tasks SET status = :st, available_at = available_at + "
                    "CASE WHEN :later THEN interval '1 hour' ELSE interval '0' END "
                    "WHERE scope_id = :s AND id = ANY(:ids)"
                ),
                {"st": status, "later": later, "s": scope.scope_id, "ids": ids},
            )

    assert active()  # a member among the first queued tasks read
    set_status(members, "succeeded")
    assert not active(joined=True)  # 3 of the 5 other queued tasks read, none a member
    set_status(members[:1], "queued", later=True)
    assert active(joined=True)  # queued behind the 5 others: not among those read
    set_status(others, "succeeded")
    assert active()  # the only active task of the scope
    set_status(members[:1], "running")
    assert active()
    set_status(others[:4], "running")  # running before the member: 3 of the 5 running read
    assert active(joined=True)
    set_status(others[:4], "succeeded")
    set_status(members[:1], "failed")
    assert not active()


def test_health_reports_queues_and_workers(client, sessions, scope, settings_env):
    settings_env(MEWDEX_AUTH="none")  # the details are for admins: here the local admin of no-login mode
    enqueue_noops(sessions, scope, 2, lane="embedding")
    body = client.get("/health").json()
    assert body["status"] == "ok"
    assert set(body["queues"]) >= {"default", "visual", "agent", "embedding"}
    assert body["queues"]["embedding"]["queued"] >= 2
    assert body["workers"]["pool"] == {"threads": 0, "alive": 0, "busy": 0, "lanes": []}
    with sessions.begin() as session:
        session.execute(text("DELETE FROM tasks WHERE scope_id = :s"), {"s": scope.scope_id})


def test_processing_resubmit_modes_plan_stages(client, sessions, store, scope, drain):
    from conftest import case_file
    from mewdex.library.memes import add_image

    result = add_image(
        sessions,
        store,
        scope,
        case_file("img04_palette_trns.png").read_bytes(),
        filename="p.png",
        provenance={"source": "test", "relative_path": "p.png"},
    )
    drain(scope)
    meme_id = result.meme_id
    jobs = client.get("/api/v1/processing/jobs", params={"meme": meme_id}).json()["items"]
    assert [j["status"] for j in jobs] == ["succeeded"]

    def submit(mode):
        r = client.post("/api/v1/processing", json={"meme_ids": [meme_id], "mode": mode})
        assert r.status_code == 202, r.text
        [job_id] = r.json()["jobs"]
        return client.get(f"/api/v1/processing/jobs/{job_id}").json()

    # Everything is current: normal and repair skip every stage as already_ready; the job ends at once.
    for mode in ("normal", "repair"):
        job = submit(mode)
        assert job["mode"] == mode and job["status"] == "succeeded" and job["tasks"] == []
        assert {s["stage"]: s["skip_reason"] for s in job["stages"]} == {
            "visual": "already_ready",
            "agent": "already_ready",
            "auto_rename": "disabled",
            "text_embedding": "already_ready",
        }
    job = submit("full_retry")
    assert [s["stage"] for s in job["stages"] if s["planned"]] == ["visual", "agent", "text_embedding"]
    assert [t["stage"] for t in job["tasks"]] == ["visual"]  # the next stage's task comes with the hand-off
    again = client.post("/api/v1/processing", json={"meme_ids": [meme_id], "mode": "normal"}).json()
    assert again["jobs"] == [] and again["skipped"] == [{"meme_id": meme_id, "reason": "job_active"}]
    drain(scope)
    job = client.get(f"/api/v1/processing/jobs/{job['id']}").json()
    assert job["status"] == "succeeded" and [t["stage"] for t in job["tasks"]] == ["visual", "agent", "text_embedding"]
    # The agent task carried the job's frozen analysis policy; the public task shape does not show it.
    assert "analysis_policy" not in job["tasks"][1]
    bulk = client.post("/api/v1/processing", json={"all_not_ready": True}).json()
    assert bulk["jobs"] == [] and bulk["batch_id"]
    assert client.get(f"/api/v1/batches/{bulk['batch_id']}").json()["state"] == "complete"
    assert client.post("/api/v1/processing", json={"meme_ids": [str(__import__("uuid").uuid4())]}).status_code == 404
    assert client.post("/api/v1/processing", json={}).status_code == 422
    assert client.post("/api/v1/processing", json={"meme_ids": [meme_id], "mode": "bogus"}).status_code == 422


def test_batch_feeds_parked_tasks_as_the_agent_lane_drains(sessions, scope, settings_env):
    from mewdex.queue import batches

    settings_env(MEWDEX_AGENT_BACKPRESSURE="3")
    with sessions.begin() as session:
        batch_id = batches.create(session, scope.scope_id).batch_id
    ids = enqueue_noops(sessions, scope, 5, lane="t-feed", batch_id=batch_id)
    with sessions.begin() as session:
        for i in ids:
            batches.park(session, scope.scope_id, i)
    full = enqueue_noops(sessions, scope, 3, lane="agent")

    def released() -> int:
        with sessions.begin() as session:
            return session.execute(
                text("SELECT count(*) FROM tasks WHERE scope_id = :s AND lane = 't-feed' AND available_at < :p"),
                {"s": scope.scope_id, "p": batches.PARKED_AT},
            ).scalar_one()

    with sessions.begin() as session:
        batches.feed(session)
    assert released() == 0  # the agent lane is at its limit: the batch waits
    with sessions.begin() as session:
        session.execute(text("DELETE FROM tasks WHERE id = ANY(:ids)"), {"ids": full})
        batches.feed(session)
    assert released() == 3  # up to the limit
    with sessions.begin() as session:
        batches.feed(session)
    assert released() == 5


def test_tasks_cli_list_show_cancel_retry(mewdex_env, sessions, scope):
    import json

    [task_id] = enqueue_noops(sessions, scope, 1, lane="t-cli")
    listed = json.loads(mewdex_env.cli("tasks", "list", "--json", scope=scope.scope_id, check=True).stdout)
    assert [t["id"] for t in listed["items"]] == [task_id]
    assert mewdex_env.cli("tasks", "cancel", task_id, scope=scope.scope_id, check=True).returncode == 0
    shown = json.loads(mewdex_env.cli("tasks", "show", task_id, "--json", scope=scope.scope_id, check=True).stdout)
    assert shown["status"] == "failed" and shown["termination_reason"] == "cancelled"
    assert mewdex_env.cli("tasks", "cancel", task_id, scope=scope.scope_id).returncode == 3  # already ended
    assert mewdex_env.cli("tasks", "retry", task_id, scope=scope.scope_id, check=True).returncode == 0
    assert mewdex_env.cli("tasks", "show", "missing", scope=scope.scope_id).returncode == 4
