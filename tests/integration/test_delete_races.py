"""Issue 20: DELETE of a meme while the queue works on it answers 204/404, never 500.

Under ``bench/load.py`` two DELETEs answered 500: the delete freed the lane slots of the tasks it had
locked, but a task created (and claimed) for the meme after that — the next pipeline stage, queued by
a worker finishing the previous one — still held a slot when the meme's rows were deleted, and the
cascade to ``tasks`` broke ``task_lane_slots``' foreign key. Concurrent deletes of one meme, the other
race of the load, must give one 204 and 404s.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import text

from conftest import wait_until
from library_helpers import check_storage_invariants, png


def _upload(client, seed: int) -> str:
    r = client.post("/api/v1/memes", files=[("files", (f"m{seed}.png", png(seed), "image/png"))])
    assert r.status_code in (200, 201), r.text
    return r.json()["results"][0]["meme"]["id"]


def _wait_for_lock_wait(sessions, timeout: float = 10.0) -> None:
    """Until some backend waits on a row lock (the delete, blocked by the worker's transaction)."""

    def waiting() -> int:
        with sessions.begin() as session:
            return session.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock' AND datname = current_database()"
                )
            ).scalar_one()

    wait_until(waiting, timeout, 0.05, "the delete to wait for the worker's transaction")


def test_delete_while_a_worker_queues_and_claims_the_next_stage(client, sessions, store, scope):
    from mewdex.queue import tasks as queue

    meme_id = _upload(client, 11)
    assert client.delete(f"/api/v1/memes/{meme_id}").status_code == 204  # to the trash; the purge races below
    task_id = f"noop-{uuid.uuid4().hex}"
    with sessions.begin() as session:
        queue.ensure_lane(session, "default", scope_id=scope.scope_id)
    worker = sessions()
    worker.begin()
    try:
        # The worker's transaction: a new task for the meme (its stage row's foreign key check
        # share-locks the meme row), then the task takes a lane slot.
        worker.execute(
            text(
                "INSERT INTO tasks (id, scope_id, task_type, lane, payload, status, max_attempts, available_at, "
                "created_at, updated_at, claim_generation, attempt_count, error_history, "
                "lease_owner, lease_expires_at) VALUES (:id, :s, 'noop', 'default', '{}', 'running', 3, now(), "
                "now(), now(), 1, 1, '[]', 'test-worker', now() + interval '2 minutes')"
            ),
            {"id": task_id, "s": scope.scope_id},
        )
        worker.execute(
            text(
                "INSERT INTO image_stage_tasks (task_id, scope_id, image_stage, target_meme_id) "
                "VALUES (:id, :s, 'visual', :m)"
            ),
            {"id": task_id, "s": scope.scope_id, "m": meme_id},
        )
        worker.execute(
            text(
                "UPDATE task_lane_slots SET task_scope_id = :s, task_id = :id, lease_owner = 'test-worker', "
                "claim_generation = 1, lease_expires_at = now() + interval '2 minutes' "
                "WHERE lane = 'default' AND slot_number = (SELECT min(slot_number) FROM task_lane_slots "
                "WHERE lane = 'default' AND task_id IS NULL)"
            ),
            {"s": scope.scope_id, "id": task_id},
        )
        answers: list[int] = []
        deleter = threading.Thread(target=lambda: answers.append(client.delete(f"/api/v1/trash/{meme_id}").status_code))
        deleter.start()
        _wait_for_lock_wait(sessions)
        worker.commit()
    finally:
        worker.close()
    deleter.join(60)
    assert answers == [204]
    with sessions.begin() as session:
        assert session.execute(text("SELECT count(*) FROM tasks WHERE id = :id"), {"id": task_id}).scalar_one() == 0
        held = session.execute(
            text("SELECT count(*) FROM task_lane_slots WHERE task_id = :id"), {"id": task_id}
        ).scalar_one()
        assert held == 0  # the slot is free again
    check_storage_invariants(sessions, store, scope)


def test_concurrent_deletes_of_one_meme_give_one_204(client, sessions, store, scope):
    meme_ids = [_upload(client, 20 + i) for i in range(3)]
    for m in meme_ids:
        assert client.delete(f"/api/v1/memes/{m}").status_code == 204  # to the trash; the purges race below
    with ThreadPoolExecutor(8) as pool:
        codes = list(
            pool.map(lambda m: client.delete(f"/api/v1/trash/{m}").status_code, [m for m in meme_ids for _ in range(4)])
        )
    assert sorted(codes) == [204] * 3 + [404] * 9, codes
    check_storage_invariants(sessions, store, scope)
