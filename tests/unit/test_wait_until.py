"""The tests' one wait helper (conftest.wait_until): returns the first truthy value, fails clearly."""

from __future__ import annotations

import itertools
import time

import pytest

from conftest import wait_until


def test_returns_the_first_truthy_value():
    values = iter([0, None, "", "ready", "later"])
    assert wait_until(lambda: next(values), timeout=5, interval=0) == "ready"


def test_times_out_naming_what_it_waited_for_and_the_last_value():
    calls = itertools.count()
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 0.2s waiting for the queue to drain \(last value: 0\)"):
        wait_until(lambda: next(calls) and 0, timeout=0.2, interval=0.01, what="the queue to drain")
    assert 0.2 <= time.monotonic() - started < 5
    assert next(calls) > 2  # it polled, not just once


def test_what_may_be_a_function_called_at_the_timeout():
    seen = []
    with pytest.raises(AssertionError, match=r"waiting for the task \(status queued\) \(last value: None\)"):
        wait_until(lambda: seen.append(1), timeout=0.05, interval=0.01, what=lambda: f"the task (status {'queued'})")
    assert len(seen) > 1


def test_an_assertion_in_the_predicate_ends_the_wait_at_once():
    def broken():
        raise AssertionError("invariant broken")

    started = time.monotonic()
    with pytest.raises(AssertionError, match="invariant broken"):
        wait_until(broken, timeout=30)
    assert time.monotonic() - started < 5
