"""Schedules API (issue 18): the preview of a cron expression; jobs CRUD, runs, owner scoping."""

from __future__ import annotations

import pytest
from sqlalchemy import text


def test_preview_in_utc_and_in_the_zone(client):
    r = client.get(
        "/api/v1/schedules/preview",
        params={"cron": "30 2 * * *", "tz": "Europe/Berlin", "after": "2027-03-27T01:30Z", "count": 3},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert [x["utc"] for x in body["runs"]] == ["2027-03-28T01:00:00Z", "2027-03-29T00:30:00Z", "2027-03-30T00:30:00Z"]
    # the gap run is shown at its real wall time (03:00 CEST), the next ones at 02:30
    assert [x["local"][11:16] for x in body["runs"]] == ["03:00", "02:30", "02:30"]
    assert [x["utc_offset"] for x in body["runs"]] == ["+02:00", "+02:00", "+02:00"]
    assert body["tz"] == "Europe/Berlin" and body["cron"] == "30 2 * * *"


def test_preview_defaults_to_shanghai_and_now(client):
    r = client.get("/api/v1/schedules/preview", params={"cron": "0 9 * * 1-5"})
    assert r.status_code == 200, r.text
    runs = r.json()["runs"]
    assert len(runs) == 5
    assert all(x["local"][11:16] == "09:00" and x["utc"][11:16] == "01:00" for x in runs)
    assert r.json()["tz"] == "Asia/Shanghai"


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"cron": "61 * * * *"}, "cron_invalid"),
        ({"cron": "* * * *"}, "cron_invalid"),
        ({"cron": "0 9 * * *", "tz": "Mars/Olympus"}, "timezone_invalid"),
        ({"cron": "0 9 * * *", "after": "yesterday"}, "schedule_invalid"),
        ({"cron": "0 9 * * *", "after": "2027-03-27T01:30"}, "schedule_invalid"),
    ],
)
def test_preview_bad_input_is_a_readable_422(client, params, code):
    r = client.get("/api/v1/schedules/preview", params=params)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == code
    assert r.json()["error"]["message"]


def test_jobs_crud_pause_resume_and_runs(client):
    body = {"name": "上班", "prompt": "上班", "cron": "0 9 * * 1-5", "tz": "Asia/Shanghai"}
    r = client.post("/api/v1/schedules", json=body)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["enabled"] and job["mode"] == "isolated" and job["next_run"]["local"][11:16] == "09:00"
    assert job["next_run"]["utc"][11:16] == "01:00" and job["description"]
    jid = job["id"]
    assert [j["id"] for j in client.get("/api/v1/schedules").json()["items"]] == [jid]

    r = client.patch(f"/api/v1/schedules/{jid}", json={"cron": "0 18 * * *", "tz": "Europe/Berlin"})
    assert r.status_code == 200, r.text
    assert r.json()["next_run"]["local"][11:16] == "18:00" and r.json()["tz"] == "Europe/Berlin"
    assert client.patch(f"/api/v1/schedules/{jid}", json={"cron": "0 25 * * *"}).json()["error"]["code"] == (
        "cron_invalid"
    )

    r = client.post(f"/api/v1/schedules/{jid}/pause")
    assert r.status_code == 200 and r.json()["enabled"] is False and r.json()["disabled_reason"] is None
    r = client.post(f"/api/v1/schedules/{jid}/resume")
    assert r.status_code == 200 and r.json()["enabled"] is True
    assert client.get(f"/api/v1/schedules/{jid}/runs").json() == {"items": []}

    assert client.delete(f"/api/v1/schedules/{jid}").status_code == 200
    assert client.get(f"/api/v1/schedules/{jid}").status_code == 404
    assert client.get("/api/v1/schedules").json()["items"] == []


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"cron": "* * *"}, "cron_invalid"),
        ({"tz": "Mars/Base"}, "timezone_invalid"),
        ({"name": "   "}, "schedule_invalid"),
        ({"mode": "sometimes"}, "invalid_request"),
        ({"notify": {"type": "pigeon"}}, "schedule_invalid"),
        ({"notify": {"type": "webhook", "definition_id": "nope"}}, "schedule_invalid"),
        ({"expires_at": "2027-01-01T00:00:00"}, "schedule_invalid"),
        ({"timeout_seconds": -1}, "invalid_request"),
    ],
)
def test_create_refuses_bad_input_without_writing(client, change, code):
    body = {"name": "x", "prompt": "上班", "cron": "0 9 * * *", **change}
    r = client.post("/api/v1/schedules", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == code
    assert client.get("/api/v1/schedules").json()["items"] == []


def test_jobs_are_owner_scoped(sessions):
    from conftest import client_for, drop_scope, new_scope

    a, b = new_scope(sessions), new_scope(sessions)
    try:
        with client_for(a) as ca, client_for(b) as cb:
            jid = ca.post("/api/v1/schedules", json={"name": "a", "prompt": "cat", "cron": "0 9 * * *"}).json()["id"]
            assert cb.get("/api/v1/schedules").json()["items"] == []
            for method, path in [
                ("get", f"/api/v1/schedules/{jid}"),
                ("get", f"/api/v1/schedules/{jid}/runs"),
                ("post", f"/api/v1/schedules/{jid}/pause"),
                ("delete", f"/api/v1/schedules/{jid}"),
            ]:
                r = getattr(cb, method)(path)
                assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", (method, path)
            assert cb.patch(f"/api/v1/schedules/{jid}", json={"name": "mine"}).status_code == 404
            assert ca.get(f"/api/v1/schedules/{jid}").json()["enabled"] is True
    finally:
        drop_scope(sessions, a)
        drop_scope(sessions, b)


def test_admin_sees_every_owners_jobs(auth_app):
    admin, alice, bob = auth_app.new("adm", admin=True), auth_app.new("alice"), auth_app.new("bob")
    hdr = lambda a: {"X-CSRF-Token": a.csrf}  # noqa: E731
    r = alice.client.post(
        "/api/v1/schedules", headers=hdr(alice), json={"name": "alice", "prompt": "cat", "cron": "0 9 * * *"}
    )
    assert r.status_code == 201, r.text
    jid = r.json()["id"]
    assert r.json()["scope_id"] == alice.scope_id
    assert bob.client.get("/api/v1/schedules").json()["items"] == []
    assert bob.client.get(f"/api/v1/schedules/{jid}").status_code == 404
    assert jid in [j["id"] for j in admin.client.get("/api/v1/schedules").json()["items"]]
    r = admin.client.post(f"/api/v1/schedules/{jid}/pause", headers=hdr(admin))
    assert r.status_code == 200 and r.json()["enabled"] is False


def test_runs_show_slots_in_utc_and_the_zone(client, sessions, scope):
    from datetime import UTC, datetime

    from mewdex.schedules import dispatch

    jid = client.post(
        "/api/v1/schedules", json={"name": "m", "prompt": "cat", "cron": "30 2 * * *", "tz": "Europe/Berlin"}
    ).json()["id"]
    with sessions.begin() as session:
        session.execute(
            text("UPDATE scheduled_jobs SET next_run_at = '2027-03-28T01:00Z' WHERE job_id = :j"), {"j": jid}
        )
    with sessions.begin() as session:
        dispatch.dispatch_due(session, datetime(2027, 3, 28, 1, 0, 5, tzinfo=UTC))
    (run,) = client.get(f"/api/v1/schedules/{jid}/runs").json()["items"]
    assert run["status"] == "queued" and run["slot"]["utc"] == "2027-03-28T01:00:00Z"
    assert run["slot"]["local"].startswith("2027-03-28T03:00:00+02:00")  # the gap run, at 03:00 CEST
    assert client.get(f"/api/v1/schedules/{jid}").json()["next_run"]["utc"] == "2027-03-29T00:30:00Z"


def test_resume_answers_422_when_the_cron_is_now_too_frequent(client, sessions):
    """Issue 31, finding 6: resuming a job whose cron runs more often than the minimum an admin has
    since raised is refused with the stable code (the job stays paused)."""
    from mewdex.platform import instance

    body = {"name": "x", "prompt": "上班", "cron": "*/10 * * * *", "tz": "UTC"}
    r = client.post("/api/v1/schedules", json=body)
    assert r.status_code == 201, r.text
    jid = r.json()["id"]
    assert client.post(f"/api/v1/schedules/{jid}/pause").status_code == 200
    with sessions.begin() as session:
        instance.set_setting(session, "schedule_min_interval_minutes", 15)
    try:
        r = client.post(f"/api/v1/schedules/{jid}/resume")
        assert r.status_code == 422 and r.json()["error"]["code"] == "schedule_too_frequent", r.text
        assert client.get(f"/api/v1/schedules/{jid}").json()["enabled"] is False
    finally:
        with sessions.begin() as session:
            instance.set_setting(session, "schedule_min_interval_minutes", None)
        client.delete(f"/api/v1/schedules/{jid}")
