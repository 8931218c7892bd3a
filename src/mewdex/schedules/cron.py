"""The schedule math: a 5-field cron expression in an IANA time zone → its runs, as UTC instants.

Evaluated by `cronsim <https://pypi.org/project/cronsim/>`_ (chosen over croniter: croniter runs a
fixed-time job twice in a repeated fall-back hour, e.g. ``30 1 * * *`` in America/New_York on
2026-11-01 and ``45 1 * * *`` in Australia/Lord_Howe on 2026-04-05). The rules (README "Schedules"):

- the zone is stored as its IANA name; a run is a wall time in that zone, stored as a UTC instant;
- the next run is computed from the previous *scheduled* run (the slot), never from "now";
- a wall time that does not exist (spring-forward gap) runs once, right after the jump
  (``30 2 * * *`` Europe/Berlin on 2027-03-28 runs at 03:00 CEST = 01:00 UTC);
- a wall time that happens twice (fall-back) runs once, at its first occurrence;
- jobs with a wildcard hour (``0 * * * *``, ``*/15 * * * *``) follow real time through both
  transitions (23 hourly runs on the spring day, 25 on the fall day);
- day-of-month and day-of-week combine as cron does: OR when both are restricted
  (``0 9 15 * 1``: the 15th and every Monday), AND when one starts with ``*`` (``0 9 */2 * 1``);
- day of week 0 and 7 are both Sunday; names (``MON``, ``JAN``), ``L``, ``LW``, ``5L``, ``MON#2``
  are accepted; ``15W`` and 6-field (seconds) expressions are not.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from functools import lru_cache
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from mewdex.schedules.errors import ScheduleError

DEFAULT_TZ = "Asia/Shanghai"
MAX_PREVIEW = 50


def check_cron(expr: str) -> str:
    """The expression, whitespace-normalised, if it is a valid 5-field cron expression that runs at
    least once; raises ``ScheduleError`` ``cron_invalid`` (with the field at fault) or
    ``cron_never_runs``."""
    if not isinstance(expr, str) or not expr.strip():
        raise ScheduleError("cron_invalid", "the cron expression is empty")
    fields = expr.split()
    if len(fields) != 5:
        raise ScheduleError(
            "cron_invalid",
            f"a cron expression has 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}",
        )
    normalised = " ".join(fields)
    try:
        it = CronSim(normalised, datetime(2000, 1, 1))
    except CronSimError as exc:
        raise ScheduleError("cron_invalid", f"invalid cron expression {normalised!r}: {exc}") from None
    try:
        next(it)
    except StopIteration:
        raise ScheduleError("cron_never_runs", f"{normalised!r} never runs (no such date)") from None
    return normalised


@lru_cache(maxsize=512)
def shortest_gap_minutes(expr: str) -> float:
    """The shortest time between two consecutive runs of a (checked) expression, in minutes, over its
    first :data:`GAP_SAMPLE_RUNS` runs from 2000-01-01 (naive wall time: the gaps of the fields
    themselves). Enough to see the densest part of any expression: a day holding that many runs has
    gaps under 1.5 minutes."""
    it = CronSim(expr, datetime(2000, 1, 1))
    previous = next(it)
    shortest = float("inf")
    for _ in range(GAP_SAMPLE_RUNS):
        try:
            current = next(it)
        except StopIteration:
            break
        shortest = min(shortest, (current - previous).total_seconds() / 60)
        previous = current
    return shortest


GAP_SAMPLE_RUNS = 2000


@lru_cache(maxsize=512)
def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; raises ``ScheduleError`` ``timezone_invalid`` for a name that the
    account's time zone would refuse too (:func:`mewdex.platform.users.check_time_zone`, the one rule:
    unknown, path-like, or a tz-database file no browser names, such as ``localtime``)."""
    from mewdex.platform.errors import PlatformError
    from mewdex.platform.users import check_time_zone

    try:
        return ZoneInfo(check_time_zone(name))
    except PlatformError:
        raise ScheduleError(
            "timezone_invalid", f"unknown time zone {name!r} (use an IANA name, e.g. Asia/Shanghai)"
        ) from None


def _utc(instant: datetime) -> datetime:
    if instant.tzinfo is None:
        raise ScheduleError("schedule_invalid", "an instant needs a UTC offset (e.g. 2027-03-27T01:30Z)")
    return instant.astimezone(UTC)


def runs(expr: str, tz: str, after: datetime) -> Iterator[datetime]:
    """The runs of ``expr`` in zone ``tz`` strictly after the instant ``after`` (aware), as aware UTC
    datetimes, in order (ends after 50 years without a match). Raises ``ScheduleError``."""
    expr, z = check_cron(expr), zone(tz)
    it = CronSim(expr, _utc(after).astimezone(z))
    for local in it:
        yield local.astimezone(UTC)


def next_run(expr: str, tz: str, after: datetime) -> datetime | None:
    """The first run strictly after ``after`` (UTC), or None when there is none."""
    return next(runs(expr, tz, after), None)


def next_runs(expr: str, tz: str, after: datetime, count: int) -> list[datetime]:
    """Up to ``count`` (1…:data:`MAX_PREVIEW`) runs strictly after ``after``, in UTC."""
    if not 1 <= count <= MAX_PREVIEW:
        raise ScheduleError("schedule_invalid", f"count must be between 1 and {MAX_PREVIEW}")
    out = []
    for instant in runs(expr, tz, after):
        out.append(instant)
        if len(out) == count:
            break
    return out


def explain(expr: str) -> str:
    """An English description of the expression (cronsim's ``explain``), e.g. "At 09:00 on Monday
    through Friday"; "" when it has none."""
    try:
        return CronSim(check_cron(expr), datetime(2000, 1, 1)).explain()
    except Exception:  # explain() does not cover every form the evaluator accepts
        return ""


def _iso_utc(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_view(instant: datetime, tz: str) -> dict[str, str]:
    """One run as :class:`mewdex.schedules.shapes.PreviewRun`: UTC, local ISO, ``Mon 2026-12-07 09:00``, offset.
    ``local_display`` is English (the CLI's); the web page formats ``utc`` in the run's zone and the
    page's language itself (``times.js``), so the Chinese page shows 周一, not Mon."""
    local = instant.astimezone(zone(tz))
    offset = local.strftime("%z")
    return {
        "utc": _iso_utc(instant),
        "local": local.isoformat(),
        "local_display": local.strftime("%a %Y-%m-%d %H:%M"),
        "utc_offset": f"{offset[:3]}:{offset[3:]}",
    }


def preview(expr: str, tz: str, after: datetime, count: int = 5) -> dict[str, object]:
    """:class:`mewdex.schedules.shapes.SchedulePreview` of ``expr`` in ``tz``: the next ``count`` runs
    strictly after ``after`` (aware). Raises ``ScheduleError`` (``cron_invalid``, ``cron_never_runs``,
    ``timezone_invalid``, ``schedule_invalid``)."""
    expr = check_cron(expr)
    zone(tz)
    runs_ = next_runs(expr, tz, after, count)
    return {
        "cron": expr,
        "tz": tz.strip(),
        "after": _iso_utc(after),
        "description": explain(expr),
        "runs": [run_view(r, tz) for r in runs_],
    }
