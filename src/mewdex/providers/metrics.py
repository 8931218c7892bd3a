"""The providers' series of ``GET /metrics`` (hook ``metric_collectors``: ``providers``): calls to
outside systems from ``external_system_audits`` and metered cost from ``usage_events``, read at
scrape time (README "Monitoring")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from sqlalchemy import text

from mewdex import hooks
from mewdex.telemetry import WINDOW_SECONDS


def provider_series(run: Callable[..., Any]) -> Iterator[Metric]:
    """``mewdex_provider_calls_5m`` {provider, outcome} and ``mewdex_provider_cost_cny_5m`` {kind}
    (CNY) over the window."""
    calls = GaugeMetricFamily(
        "mewdex_provider_calls_5m",
        "Calls to outside systems (connectors) in the last 5 minutes, by provider and outcome (ok|failed).",
        labels=["provider", "outcome"],
    )
    for provider, outcome, count in run(
        text(
            "SELECT coalesce(d.provider, 'unknown'), a.outcome, count(*) FROM external_system_audits a "
            "LEFT JOIN external_system_definitions d ON d.definition_id = a.definition_id "
            "WHERE a.created_at > now() - make_interval(secs => :w) GROUP BY 1, 2"
        ),
        {"w": WINDOW_SECONDS},
    ):
        calls.add_metric([provider, outcome], count)
    cost = GaugeMetricFamily(
        "mewdex_provider_cost_cny_5m",
        "Metered cost (CNY, from MEWDEX_PRICES) of the last 5 minutes' provider calls, by kind.",
        labels=["kind"],
    )
    for kind, total in run(
        text(
            "SELECT kind, sum(cost_cny) FROM usage_events "
            "WHERE created_at > now() - make_interval(secs => :w) GROUP BY kind"
        ),
        {"w": WINDOW_SECONDS},
    ):
        cost.add_metric([kind], float(total or 0))
    yield from (calls, cost)


hooks.provide("metric_collectors", "providers", provider_series)
