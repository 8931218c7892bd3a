"""The schedule math (issue 18): ../shared/cases/cron_dst.json exactly, DST in zones with 1-hour,
30-minute and midnight transitions, 23/25 hourly runs on the change days, cron's OR of the day
fields, Sunday as 0 and 7, and the errors of bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from mewdex.schedules import cron
from mewdex.schedules.errors import ScheduleError

CASES = Path(__file__).resolve().parents[2] / ".." / "shared" / "cases" / "cron_dst.json"


def at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def z(instants: list[datetime]) -> list[str]:
    return [i.strftime("%Y-%m-%dT%H:%MZ") for i in instants]


@pytest.fixture(scope="module")
def cases() -> dict:
    if not CASES.exists():
        pytest.skip(f"{CASES} not found (../shared)")
    return json.loads(CASES.read_text())


def test_cron_01_gap_runs_once_right_after_the_jump(cases):
    c = cases["CRON-01"]
    runs = z(cron.next_runs(c["expr"], c["tz"], at(c["after"]), 2))
    assert runs == c["expected_policy_run_after_gap"]
    # never two runs on 03-28, never 03-29 first
    assert runs[0] != "2027-03-29T00:30Z"


def test_cron_03_midnight_after_a_change(cases):
    for c in cases["CRON-03"]:
        assert z(cron.next_runs(c["expr"], c["tz"], at(c["after"]), 1)) == [c["expected_next"]], c["source"]


@pytest.mark.parametrize(
    ("expr", "tz", "after", "expected"),
    [
        # 1-hour spring gap (America/New_York 2026-03-08 02:00 -> 03:00): 02:30 runs at 03:00 EDT
        ("30 2 * * *", "America/New_York", "2026-03-07T12:00Z", ["2026-03-08T07:00Z", "2026-03-09T06:30Z"]),
        # 1-hour fall-back (2026-11-01 01:00-02:00 twice): 01:30 runs once, at the first copy (EDT)
        ("30 1 * * *", "America/New_York", "2026-10-31T12:00Z", ["2026-11-01T05:30Z", "2026-11-02T06:30Z"]),
        # Lord Howe: 30-minute spring gap (2026-10-04 02:00 -> 02:30): 02:00 and 02:15 run at 02:30 LHDT
        ("0 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00Z", ["2026-10-03T15:30Z", "2026-10-04T15:00Z"]),
        ("15 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00Z", ["2026-10-03T15:30Z", "2026-10-04T15:15Z"]),
        ("30 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00Z", ["2026-10-03T15:30Z", "2026-10-04T15:30Z"]),
        # Lord Howe: 30-minute fall-back (2026-04-05 02:00 LHDT -> 01:30 LHST): 01:45 runs once
        ("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00Z", ["2026-04-04T14:45Z", "2026-04-05T15:15Z"]),
        # Midnight gaps: 00:00 does not exist, the day still gets its run at 01:00
        ("0 0 * * *", "Africa/Cairo", "2025-04-24T12:00Z", ["2025-04-24T22:00Z", "2025-04-25T21:00Z"]),
        ("0 0 * * *", "America/Santiago", "2026-09-05T12:00Z", ["2026-09-06T04:00Z", "2026-09-07T03:00Z"]),
        # Santiago fall-back at midnight (2026-04-05 00:00 -03 -> 23:00 -04 on 04-04): 23:30 runs once
        ("30 23 * * *", "America/Santiago", "2026-04-04T12:00Z", ["2026-04-05T02:30Z", "2026-04-06T03:30Z"]),
        # the README's example: Berlin's repeated 02:00-03:00 on 2027-10-31 runs 02:30 once (CEST)
        ("30 2 * * *", "Europe/Berlin", "2027-10-30T12:00Z", ["2027-10-31T00:30Z", "2027-11-01T01:30Z"]),
        # no DST: the default zone
        ("0 9 * * 1-5", "Asia/Shanghai", "2026-12-04T02:00Z", ["2026-12-07T01:00Z", "2026-12-08T01:00Z"]),
    ],
)
def test_dst_transitions(expr, tz, after, expected):
    assert z(cron.next_runs(expr, tz, at(after), len(expected))) == expected


def _runs_on_local_day(expr: str, tz: str, day: str) -> list[datetime]:
    zone = ZoneInfo(tz)
    start = datetime.fromisoformat(day).replace(tzinfo=zone)
    end = (datetime.fromisoformat(day) + timedelta(days=1)).replace(tzinfo=zone)
    out = []
    for r in cron.runs(expr, tz, start.astimezone(UTC) - timedelta(seconds=1)):
        if r >= end.astimezone(UTC):
            break
        out.append(r)
    return out


@pytest.mark.parametrize(
    ("tz", "spring", "fall"),
    [
        ("Europe/Berlin", "2027-03-28", "2027-10-31"),
        ("America/New_York", "2026-03-08", "2026-11-01"),
        ("Africa/Cairo", "2026-04-24", "2026-10-29"),
    ],
)
def test_wildcard_hour_follows_real_time(tz, spring, fall):
    assert len(_runs_on_local_day("0 * * * *", tz, spring)) == 23
    assert len(_runs_on_local_day("0 * * * *", tz, fall)) == 25
    ordinary = (datetime.fromisoformat(spring) + timedelta(days=7)).date().isoformat()
    assert len(_runs_on_local_day("0 * * * *", tz, ordinary)) == 24
    # */15 keeps firing through both copies of the repeated hour: 4 × 25 runs, 15 minutes apart
    quarter = _runs_on_local_day("*/15 * * * *", tz, fall)
    assert len(quarter) == 100
    assert {b - a for a, b in zip(quarter, quarter[1:], strict=False)} == {timedelta(minutes=15)}


def test_lord_howe_half_hour_gap_with_a_wildcard_hour_follows_real_time():
    # 2026-10-04 02:00 LHST -> 02:30 LHDT: the day is 23.5 h long and has no wall time 02:00, so an
    # hourly job (wildcard hour: real time, not the after-the-gap rule) runs 23 times, 01:00 then 03:00
    runs = _runs_on_local_day("0 * * * *", "Australia/Lord_Howe", "2026-10-04")
    assert len(runs) == 23
    assert z(runs[1:3]) == ["2026-10-03T14:30Z", "2026-10-03T16:00Z"]
    # a fixed-hour job in the gap runs once, right after the jump (02:30 LHDT = 15:30Z)
    assert z(cron.next_runs("0 2 * * *", "Australia/Lord_Howe", at("2026-10-03T12:00Z"), 1)) == ["2026-10-03T15:30Z"]


def test_day_fields_or_when_both_restricted_and_when_one_is_a_star_step():
    # the 15th OR every Monday (June 2026: Mondays 1, 8, 15, 22, 29; the 15th is a Monday too)
    runs = z(cron.next_runs("0 9 15 * 1", "UTC", at("2026-07-01T00:00Z"), 5))
    assert runs == [
        "2026-07-06T09:00Z",
        "2026-07-13T09:00Z",
        "2026-07-15T09:00Z",
        "2026-07-20T09:00Z",
        "2026-07-27T09:00Z",
    ]
    # a day field starting with * makes it AND (Vixie cron): odd days that are Mondays
    runs = z(cron.next_runs("0 9 */2 * 1", "UTC", at("2026-07-01T00:00Z"), 3))
    assert runs == ["2026-07-13T09:00Z", "2026-07-27T09:00Z", "2026-08-03T09:00Z"]


def test_sunday_is_0_and_7():
    after = at("2026-12-01T00:00Z")  # a Tuesday
    sunday = ["2026-12-06T09:00Z", "2026-12-13T09:00Z"]
    assert z(cron.next_runs("0 9 * * 0", "UTC", after, 2)) == sunday
    assert z(cron.next_runs("0 9 * * 7", "UTC", after, 2)) == sunday
    assert z(cron.next_runs("0 9 * * SUN", "UTC", after, 2)) == sunday
    assert z(cron.next_runs("0 9 * * 5-7", "UTC", after, 3)) == [
        "2026-12-04T09:00Z",
        "2026-12-05T09:00Z",
        "2026-12-06T09:00Z",
    ]


def test_next_run_is_strictly_after_the_slot():
    slot = at("2026-12-07T01:00Z")  # Mon 09:00 Asia/Shanghai
    assert cron.next_run("0 9 * * 1-5", "Asia/Shanghai", slot) == at("2026-12-08T01:00Z")


@pytest.mark.parametrize(
    ("expr", "code"),
    [
        ("", "cron_invalid"),
        ("* * * *", "cron_invalid"),
        ("* * * * * *", "cron_invalid"),
        ("61 * * * *", "cron_invalid"),
        ("0 9 15W * *", "cron_invalid"),
        ("0 0 30 2 *", "cron_invalid"),
        ("hello world", "cron_invalid"),
    ],
)
def test_bad_expressions(expr, code):
    with pytest.raises(ScheduleError) as err:
        cron.next_runs(expr, "UTC", at("2026-01-01T00:00Z"), 1)
    assert err.value.code == code
    assert err.value.message


@pytest.mark.parametrize(
    "tz",
    # the last three are tz-database files, not zone names: an account's time zone refuses them too
    [
        "Mars/Olympus",
        "",
        "../etc/passwd",
        "/etc/localtime",
        "Asia/Shanghai/x",
        "localtime",
        "posix/Asia/Shanghai",
        "posixrules",
    ],
)
def test_bad_zones(tz):
    with pytest.raises(ScheduleError) as err:
        cron.next_runs("0 9 * * *", tz, at("2026-01-01T00:00Z"), 1)
    assert err.value.code == "timezone_invalid"


def test_last_day_forms():
    assert z(cron.next_runs("0 0 L 2 *", "UTC", at("2028-01-01T00:00Z"), 1)) == ["2028-02-29T00:00Z"]
    assert z(cron.next_runs("0 0 * * MON#5", "UTC", at("2026-12-01T00:00Z"), 1)) == ["2027-03-29T00:00Z"]


def test_preview_shape():
    p = cron.preview("0  9 * * 1-5", "Asia/Shanghai", at("2026-12-04T02:00Z"), 5)
    assert p["cron"] == "0 9 * * 1-5"
    assert [r["utc"] for r in p["runs"]] == [
        "2026-12-07T01:00:00Z",
        "2026-12-08T01:00:00Z",
        "2026-12-09T01:00:00Z",
        "2026-12-10T01:00:00Z",
        "2026-12-11T01:00:00Z",
    ]
    assert p["runs"][0]["local_display"] == "Mon 2026-12-07 09:00"
    assert p["runs"][0]["utc_offset"] == "+08:00"
    assert "Monday through Friday" in p["description"]
