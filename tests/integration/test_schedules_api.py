"""Schedules API (issue 18): the preview of a cron expression; jobs CRUD, runs, owner scoping."""

from __future__ import annotations

import pytest

from conftest import client  # noqa: F401


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
