"""The channels' series of ``GET /metrics`` (hook ``metric_collectors``: ``deliveries``), read from
``channel_deliveries`` at scrape time (README "Monitoring")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from sqlalchemy import text

from mewdex import hooks
from mewdex.telemetry import WINDOW_SECONDS


def delivery_series(run: Callable[..., Any]) -> Iterator[Metric]:
    """``mewdex_channel_deliveries_5m`` {channel, status} over the window and
    ``mewdex_channel_deliveries_pending`` {channel} (queued or retrying now)."""
    recent = GaugeMetricFamily(
        "mewdex_channel_deliveries_5m",
        "Channel deliveries created in the last 5 minutes, by channel and status "
        "(queued, retrying, sent, failed, cancelled, unknown).",
        labels=["channel", "status"],
    )
    for channel, status, count in run(
        text(
            "SELECT channel, status, count(*) FROM channel_deliveries "
            "WHERE created_at > now() - make_interval(secs => :w) GROUP BY channel, status"
        ),
        {"w": WINDOW_SECONDS},
    ):
        recent.add_metric([channel, status], count)
    pending = GaugeMetricFamily(
        "mewdex_channel_deliveries_pending",
        "Deliveries not yet sent (queued or retrying), by channel.",
        labels=["channel"],
    )
    for channel, count in run(
        text("SELECT channel, count(*) FROM channel_deliveries WHERE status IN ('queued', 'retrying') GROUP BY channel")
    ):
        pending.add_metric([channel], count)
    yield from (recent, pending)


hooks.provide("metric_collectors", "deliveries", delivery_series)
