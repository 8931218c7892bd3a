"""The attempt counts of sign-ups and public links per address (``platform.sessions.count_attempt``):
rows of ``login_failures`` that every API process counts in, so a limit holds however many processes
answer (``tests/integration/test_web_processes.py`` sends the attempts through two)."""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import text

from mewdex.platform.sessions import count_attempt


@pytest.fixture
def key(sessions):
    key = f"signup:test-{uuid.uuid4().hex[:12]}"
    yield key
    with sessions.begin() as session:
        session.execute(text("DELETE FROM login_failures WHERE key LIKE :k"), {"k": key + "%"})


def test_attempts_past_the_limit_wait_until_the_window_ends(key):
    assert [count_attempt(key, 3, 60) for _ in range(3)] == [0.0, 0.0, 0.0]
    waits = [count_attempt(key, 3, 60) for _ in range(2)]
    assert all(1.0 <= wait <= 60.0 for wait in waits), waits  # the window began with the first attempt
    assert count_attempt(key + "-other", 3, 60) == 0.0  # another address has its own count


def test_a_window_that_ended_counts_afresh(sessions, key):
    for _ in range(4):
        count_attempt(key, 3, 60)
    with sessions.begin() as session:
        session.execute(
            text("UPDATE login_failures SET window_started_at = now() - interval '61 seconds' WHERE key = :k"),
            {"k": key},
        )
    assert count_attempt(key, 3, 60) == 0.0
    with sessions.begin() as session:
        row = session.execute(
            text(
                "SELECT failures, window_started_at > now() - interval '5 seconds' FROM login_failures WHERE key = :k"
            ),
            {"k": key},
        ).one()
    assert tuple(row) == (1, True)


def test_attempts_sent_at_once_are_held_to_the_limit(key):
    """Counted and checked in one statement: 16 attempts in 16 transactions at once, limit 5, let 5 through
    (a count read first and written after would let more through)."""
    start = threading.Barrier(16)
    waits: list[float] = []

    def attempt() -> None:
        start.wait()
        waits.append(count_attempt(key, 5, 3600))

    threads = [threading.Thread(target=attempt) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(wait == 0.0 for wait in waits) == [False] * 11 + [True] * 5, waits
