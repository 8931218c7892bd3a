"""The ``channel`` and ``schedules`` lanes are shared by every account, each with a share of their
slots (issue 31, findings 4 and 6): one scope's many slow deliveries (or scheduled runs) hold at most
``MEWDEX_CHANNEL_SCOPE_CONCURRENCY`` (``MEWDEX_SCHEDULE_SCOPE_CONCURRENCY``) slots, another scope's
task is claimed at once, and a finished one frees its share."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from conftest import drop_scope, new_scope
from mewdex.queue import registry
from mewdex.queue import tasks as queue


def _claim(sessions, owner: str, lane: str):
    with sessions.begin() as session:
        return queue.claim(session, owner=owner, lanes=[lane], lease_seconds=120)


@pytest.mark.parametrize(
    ("lane", "task_type", "payload"),
    [
        ("channel", "channel_delivery", lambda: {"delivery_id": str(uuid.uuid4())}),
        ("schedules", "scheduled_job_run", lambda: {"job_id": str(uuid.uuid4()), "run_id": str(uuid.uuid4())}),
    ],
)
def test_one_scope_takes_only_its_share_of_the_lane(sessions, lane, task_type, payload):
    share = 2  # MEWDEX_CHANNEL_SCOPE_CONCURRENCY's (MEWDEX_SCHEDULE_SCOPE_CONCURRENCY's) default, of 8 slots
    busy, quiet = new_scope(sessions, "t-busy"), new_scope(sessions, "t-quiet")
    mine = {busy.scope_id, quiet.scope_id}
    claimed = []
    try:
        with sessions.begin() as session:
            for _ in range(6):  # e.g. every-minute schedules delivering to a slow webhook
                registry.submit(
                    session,
                    scope_id=busy.scope_id,
                    task_type=task_type,
                    payload=payload(),
                )
        for n in range(6):
            found = _claim(sessions, f"w{n}", lane)
            if found is not None:
                claimed.append(found)
        assert Counter(c.scope_id for c in claimed if c.scope_id in mine) == {busy.scope_id: share}
        # the busy scope's other deliveries wait; another account's delivery runs at once
        with sessions.begin() as session:
            registry.submit(
                session,
                scope_id=quiet.scope_id,
                task_type=task_type,
                payload=payload(),
            )
        found = _claim(sessions, "w-quiet", lane)
        assert found is not None and found.scope_id == quiet.scope_id
        claimed.append(found)
        assert _claim(sessions, "w-more", lane) is None
        # one of the busy scope's deliveries ends: the next one takes its place
        first = next(c for c in claimed if c.scope_id == busy.scope_id)
        with sessions.begin() as session:
            queue.release_slots(session, first.scope_id, first.task_id)
        claimed.remove(first)
        found = _claim(sessions, "w-next", lane)
        assert found is not None and found.scope_id == busy.scope_id
        claimed.append(found)
    finally:
        with sessions.begin() as session:
            for c in claimed:
                queue.release_slots(session, c.scope_id, c.task_id)
        drop_scope(sessions, busy)
        drop_scope(sessions, quiet)


def test_one_accounts_telegram_inline_queries_take_only_its_share(sessions):
    """Issue 40, finding 10: inline queries (``@bot cat``, one per keystroke) run in lane ``channel``
    under their sender's account, so one account's burst holds at most its share of the lane."""
    from mewdex.channels import bindings
    from mewdex.channels.telegram import inbound as tg

    busy = new_scope(sessions, "t-inline")
    sender = str(uuid.uuid4().int)[:10]
    claimed = []
    try:
        with sessions.begin() as session:
            bindings.bind(session, scope_id=busy.scope_id, user_id=None, channel="telegram", identity=sender, config={})
            for n in range(6):
                update = {"update_id": n, "inline_query": {"id": f"q-{sender}-{n}", "from": {"id": int(sender)},
                                                           "query": "cat"[: n % 3 + 1]}}  # fmt: skip
                assert tg.dispatch(session, update, "mewdex_bot") == "inline_query"
        for n in range(6):
            found = _claim(sessions, f"i{n}", "channel")
            if found is not None:
                claimed.append(found)
        assert Counter(c.scope_id for c in claimed if c.task_type == "telegram_inline") == {busy.scope_id: 2}
    finally:
        with sessions.begin() as session:
            for c in claimed:
                queue.release_slots(session, c.scope_id, c.task_id)
        drop_scope(sessions, busy)
