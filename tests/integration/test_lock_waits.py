"""Write-backs that must not wait for other workers' transactions (a wait there once closed a deadlock
during ingest): ensuring a lane's rows beside a claim in progress, and the pipeline's meme lock beside a
transaction that only references the meme."""

from __future__ import annotations

import hashlib
import threading
import uuid

import pytest
from sqlalchemy import text

from mewdex.db.models import Meme
from mewdex.pipeline import tasks as pipeline_tasks
from mewdex.pipeline.base import load_meme
from mewdex.pipeline.name_repair import repair_names
from mewdex.queue import tasks as queue


@pytest.fixture
def other_transaction(sessions):
    """A second session with a transaction left open (rolled back at the end)."""
    session = sessions()
    session.begin()
    yield session
    session.rollback()
    session.close()


def _impatient(session) -> None:
    session.execute(text("SET LOCAL lock_timeout = '1s'"))  # waiting fails the test instead of hanging it


def test_enqueue_does_not_wait_for_a_claim_that_has_not_committed(sessions, scope, other_transaction):
    lane = f"t-lock-{uuid.uuid4().hex[:8]}"
    with sessions.begin() as session:
        queue.ensure_lane(session, lane, scope_id=scope.scope_id)
    # what a claim does in its transaction: its lane slot, resource slot and the scope's fairness row
    params = {"l": lane, "s": scope.scope_id}
    other_transaction.execute(text("UPDATE task_lane_slots SET lease_owner = 'w' WHERE lane = :l"), params)
    other_transaction.execute(text("UPDATE task_lane_resource_slots SET lease_owner = 'w' WHERE lane = :l"), params)
    other_transaction.execute(
        text("UPDATE task_lane_fairness SET last_dispatch_sequence = 7 WHERE lane = :l AND scope_id = :s"), params
    )
    with sessions.begin() as session:  # a stage hand-off in a write-back
        _impatient(session)
        task = queue.enqueue(session, scope_id=scope.scope_id, task_type="noop", lane=lane)
    assert task.status == "queued"


def test_a_new_lane_still_gets_its_rows(sessions, scope):
    lane = f"t-lock-{uuid.uuid4().hex[:8]}"
    with sessions.begin() as session:
        queue.ensure_lane(session, lane, scope_id=scope.scope_id)
        queue.ensure_lane(session, lane, scope_id=scope.scope_id)  # idempotent
        counts = session.execute(
            text(
                "SELECT (SELECT count(*) FROM task_lane_slots WHERE lane = :l),"
                " (SELECT count(*) FROM task_lane_resource_slots WHERE lane = :l),"
                " (SELECT count(*) FROM task_lane_fairness WHERE lane = :l AND scope_id = :s)"
            ),
            {"l": lane, "s": scope.scope_id},
        ).one()
    assert tuple(counts) == (queue.MAX_LANE_SLOTS, queue.MAX_LANE_SLOTS, 1)


def _meme(sessions, scope, display_name: str = "image"):
    data = uuid.uuid4().bytes
    with sessions.begin() as session:
        meme = Meme(
            scope_id=scope.scope_id,
            storage_key=f"{hashlib.sha256(data).hexdigest()}.png",
            display_name=display_name,
            name_source="automatic",
            extension=".png",
            size_bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        session.add(meme)
        session.flush()
        return meme.id


def test_the_stage_meme_lock_does_not_wait_for_a_row_that_references_the_meme(sessions, scope, other_transaction):
    meme_id = _meme(sessions, scope)
    # what inserting a row with a foreign key to the meme takes (another image's near-duplicate pair)
    other_transaction.execute(text("SELECT 1 FROM memes WHERE id = :m FOR KEY SHARE"), {"m": meme_id})
    with sessions.begin() as session:  # a write-back
        _impatient(session)
        assert load_meme(session, scope.scope_id, meme_id) is not None
    with sessions.begin() as session:  # a claim's on_claim
        _impatient(session)
        assert pipeline_tasks.snapshot(session, scope.scope_id, meme_id) is not None
    with sessions.begin() as session:  # the lock still orders two stages of one meme
        load_meme(session, scope.scope_id, meme_id)
        with sessions.begin() as second:
            _impatient(second)
            with pytest.raises(Exception, match="lock timeout"):
                load_meme(second, scope.scope_id, meme_id)


def test_name_repair_does_not_wait_for_a_row_that_references_a_meme(sessions, scope, other_transaction):
    """The repair locks a batch of memes; a visual write-back holding a key-share lock on one of them (its
    near-duplicate pair) while it waits for the repair's next meme was a deadlock."""
    meme_id = _meme(sessions, scope, display_name="IMG_2034")
    other_transaction.execute(text("SELECT 1 FROM memes WHERE id = :m FOR KEY SHARE"), {"m": meme_id})
    done: list[dict] = []
    thread = threading.Thread(target=lambda: done.append(repair_names(sessions, scope.scope_id)), daemon=True)
    thread.start()
    thread.join(10)
    finished = not thread.is_alive()
    other_transaction.rollback()  # lets a waiting repair finish before the test ends
    thread.join(10)
    assert finished and done[0]["checked"] >= 1
