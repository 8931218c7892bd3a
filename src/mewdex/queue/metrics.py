"""The queue's series of ``GET /metrics`` (hook ``metric_collectors``: ``queue``, ``tasks``), read from
the ``tasks`` table at scrape time by the web layer's collector (README "Monitoring")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from sqlalchemy import text

from mewdex import hooks
from mewdex.queue.tasks import PARKED_AT, lane_names
from mewdex.telemetry import WINDOW_SECONDS


def queue_series(run: Callable[..., Any]) -> Iterator[Metric]:
    """``mewdex_queue_depth`` {lane, state} and ``mewdex_queue_oldest_age_seconds`` {lane}; every
    lane appears, an idle one with zeros. ``run``: the scrape's ``session.execute``."""
    depth = GaugeMetricFamily(
        "mewdex_queue_depth",
        "Tasks per lane and state: queued (due or backing off), running, parked (held by a batch).",
        labels=["lane", "state"],
    )
    oldest = GaugeMetricFamily(
        "mewdex_queue_oldest_age_seconds",
        "Per lane, how long the longest-waiting due task has waited since it became due (0: none waits).",
        labels=["lane"],
    )
    rows = run(
        text(
            "SELECT lane, count(*) FILTER (WHERE status = 'queued' AND available_at < :parked), "
            "count(*) FILTER (WHERE status = 'running'), "
            "count(*) FILTER (WHERE status = 'queued' AND available_at >= :parked), "
            "coalesce(extract(epoch FROM now() - min(available_at) "
            "FILTER (WHERE status = 'queued' AND available_at <= now())), 0) "
            "FROM tasks WHERE status IN ('queued', 'running') GROUP BY lane"
        ),
        {"parked": PARKED_AT},
    ).all()
    seen = {lane: (0, 0, 0, 0.0) for lane in lane_names()}
    seen |= {lane: (queued, running, parked, float(age)) for lane, queued, running, parked, age in rows}
    for lane, (queued, running, parked, age) in sorted(seen.items()):
        depth.add_metric([lane, "queued"], queued)
        depth.add_metric([lane, "running"], running)
        depth.add_metric([lane, "parked"], parked)
        oldest.add_metric([lane], max(age, 0.0))
    yield from (depth, oldest)


def task_series(run: Callable[..., Any]) -> Iterator[Metric]:
    """``mewdex_tasks_finished_5m`` {task_type, outcome} and ``mewdex_task_duration_seconds_5m``
    {task_type, quantile} (0.5, 0.95, 1 = max; seconds from claim to end) over the window
    (:data:`mewdex.telemetry.WINDOW_SECONDS`)."""
    finished = GaugeMetricFamily(
        "mewdex_tasks_finished_5m",
        "Tasks that ended in the last 5 minutes, by task type and outcome (succeeded|failed).",
        labels=["task_type", "outcome"],
    )
    duration = GaugeMetricFamily(
        "mewdex_task_duration_seconds_5m",
        "Run time (claim to end) of the tasks that ended in the last 5 minutes, by task type, at the "
        "0.5 and 0.95 quantiles and the maximum (quantile 1).",
        labels=["task_type", "quantile"],
    )
    rows = run(
        text(
            "SELECT task_type, status, count(*), "
            "percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - started_at)), "
            "percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - started_at)), "
            "max(extract(epoch FROM completed_at - started_at)) "
            "FROM tasks WHERE status IN ('succeeded', 'failed') AND completed_at > now() - make_interval(secs => :w) "
            "GROUP BY task_type, status"
        ),
        {"w": WINDOW_SECONDS},
    ).all()
    durations: dict[str, list[tuple[int, float, float, float]]] = {}
    for task_type, status, count, p50, p95, top in rows:
        finished.add_metric([task_type, status], count)
        if p50 is not None:
            durations.setdefault(task_type, []).append((count, float(p50), float(p95), float(top)))
    for task_type, parts in sorted(durations.items()):
        # Both outcomes together: the larger group's quantiles (failures are usually few), the overall max.
        count, p50, p95, _ = max(parts)
        duration.add_metric([task_type, "0.5"], p50)
        duration.add_metric([task_type, "0.95"], p95)
        duration.add_metric([task_type, "1"], max(p[3] for p in parts))
    yield from (finished, duration)


hooks.provide("metric_collectors", "queue", queue_series)
hooks.provide("metric_collectors", "tasks", task_series)
