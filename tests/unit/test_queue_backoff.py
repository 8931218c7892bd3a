"""Retry backoff of the task queue: capped exponential with jitter in [0.5, 1.0] × the step."""

from __future__ import annotations

import pytest

from mewdex.queue.tasks import backoff_seconds


@pytest.mark.parametrize("attempt,step", [(0, 2), (1, 2), (2, 4), (3, 8), (6, 64)])
def test_backoff_doubles_per_attempt(attempt, step):
    values = [backoff_seconds(attempt, 2.0, 1000.0) for _ in range(200)]
    assert all(0.5 * step <= v <= step for v in values)
    assert max(values) - min(values) > 0  # jittered


def test_backoff_is_capped():
    assert all(backoff_seconds(60, 2.0, 30.0) <= 30.0 for _ in range(100))
    assert all(backoff_seconds(1000, 2.0, 30.0) <= 30.0 for _ in range(100))


def test_backoff_does_not_overflow_for_huge_attempt_counts():
    assert backoff_seconds(10_000, 2.0, 30.0) <= 30.0


def test_zero_base_means_no_wait():
    assert backoff_seconds(5, 0.0, 300.0) == 0.0
