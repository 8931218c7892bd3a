"""Retention (``runtime.retention``): old finished work is deleted in small batches; failed work, work
still in use and what the pages show are kept. Real database, rows made by the real services or SQL."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from accounts_helpers import add_meme, png
from mewdex.runtime import retention

OLD = "now() - interval '400 days'"


def _task(session, scope_id: str, status: str, *, old: bool, task_type: str = "noop") -> str:
    task_id = f"ret-{uuid.uuid4().hex[:12]}"
    done = OLD if old else "now()"
    session.execute(
        text(
            "INSERT INTO tasks (id, scope_id, task_type, submission_mode, lane, payload, status, available_at, "
            "started_at, completed_at, attempt_count, max_attempts, claim_generation, created_at, updated_at) "
            f"VALUES (:id, :s, :t, 'standalone', 'default', '{{}}', :st, {done}, {done}, {done}, 1, 3, 1, {done}, "
            f"{done})"
        ),
        {"id": task_id, "s": scope_id, "t": task_type, "st": status},
    )
    session.execute(
        text(
            "INSERT INTO task_attempts (scope_id, task_id, attempt, attempt_id, state, "
            "claim_generation, created_at, updated_at) "
            "VALUES (:s, :id, 1, :a, 'completed', 1, now(), now())"
        ),
        {"s": scope_id, "id": task_id, "a": f"{task_id}:1"},
    )
    return task_id


def _count(session, sql: str, **params) -> int:
    return session.execute(text(sql), params).scalar_one()


def test_retention_deletes_old_finished_work_in_batches_and_keeps_the_rest(sessions, store, scope, settings_env):
    settings_env(MEWDEX_RETENTION_BATCH_ROWS="10")
    s = scope.scope_id
    meme_id = add_meme(sessions, store, s, png(7), process=True)  # a job with its stage tasks
    with sessions.begin() as session:
        stage_tasks = (
            session.execute(
                text("SELECT task_id FROM image_processing_stages WHERE scope_id = :s AND task_id IS NOT NULL"),
                {"s": s},
            )
            .scalars()
            .all()
        )
        assert stage_tasks
        session.execute(
            text(
                f"UPDATE tasks SET status = 'succeeded', completed_at = {OLD}, started_at = {OLD} "
                "WHERE scope_id = :s AND id = ANY(:ids)"
            ),
            {"s": s, "ids": list(stage_tasks)},
        )
        session.execute(
            text("UPDATE image_processing_stages SET status = 'succeeded' WHERE scope_id = :s AND planned"), {"s": s}
        )
        for _ in range(25):  # three batches of 10
            _task(session, s, "succeeded", old=True)
        old_failed = _task(session, s, "failed", old=True)
        recent_done = _task(session, s, "succeeded", old=False)
        # Channel deliveries: old sent (gone), old failed (kept), recent sent (kept).
        deliveries = {}
        for name, status, when in (("sent", "sent", OLD), ("failed", "failed", OLD), ("recent", "sent", "now()")):
            deliveries[name] = uuid.uuid4()
            session.execute(
                text(
                    "INSERT INTO channel_deliveries (delivery_id, scope_id, channel, target, kind, status, attempts, "
                    f"created_at, updated_at) VALUES (:d, :s, 'webhook', 'x', 'text', :st, 1, {when}, {when})"
                ),
                {"d": deliveries[name], "s": s, "st": status},
            )
        audits = {}
        for outcome in ("ok", "failed"):
            audits[outcome] = uuid.uuid4()
            session.execute(
                text(
                    "INSERT INTO external_system_audits (audit_id, scope_id, definition_revision, event, outcome, "
                    f"duration_ms, detail, created_at) VALUES (:a, :s, 1, 'call', :o, 5, '{{}}', {OLD})"
                ),
                {"a": audits[outcome], "s": s, "o": outcome},
            )
        # Schedules: an isolated job whose runs made conversations (one ok, one error), and a
        # persistent job's standing conversation.
        isolated, persistent = uuid.uuid4(), uuid.uuid4()
        conv = {k: uuid.uuid4() for k in ("ok_run", "error_run", "bound")}
        for job, mode in ((isolated, "isolated"), (persistent, "persistent")):
            session.execute(
                text(
                    "INSERT INTO scheduled_jobs (job_id, scope_id, name, prompt, cron, mode, next_run_at, "
                    "created_at, updated_at) VALUES (:j, :s, 'daily', 'cats', '0 9 * * *', :m, now(), now(), now())"
                ),
                {"j": job, "s": s, "m": mode},
            )
        for key, job in (("ok_run", isolated), ("error_run", isolated), ("bound", persistent)):
            session.execute(
                text(
                    "INSERT INTO conversations (conversation_id, scope_id, name, scheduled_job_id, created_at, "
                    f"updated_at) VALUES (:c, :s, 'run', :j, {OLD}, {OLD})"
                ),
                {"c": conv[key], "s": s, "j": job},
            )
        session.execute(
            text("UPDATE scheduled_jobs SET bound_task_id = :c WHERE job_id = :j"),
            {"c": conv["bound"], "j": persistent},
        )
        for key, status in (("ok_run", "ok"), ("error_run", "error")):
            session.execute(
                text(
                    "INSERT INTO scheduled_job_runs (run_id, job_id, scope_id, slot, status, conversation_id, "
                    f"created_at) VALUES (:r, :j, :s, {OLD} + make_interval(secs => :k), :st, :c, {OLD})"
                ),
                {"r": uuid.uuid4(), "j": isolated, "s": s, "k": len(key), "st": status, "c": conv[key]},
            )

        # Sign-up and public-link counts per address: an old window goes, a current one and the sign-in
        # counters stay.
        tag = uuid.uuid4().hex[:8]
        counts = {f"signup:old-{tag}": OLD, f"share:old-{tag}": OLD, f"share:now-{tag}": "now()", f"ip:old-{tag}": OLD}
        for key, when in counts.items():
            session.execute(
                text(f"INSERT INTO login_failures (key, failures, window_started_at) VALUES (:k, 1, {when})"),
                {"k": key},
            )

    result = retention.run(sessions)
    assert result["complete"] is True
    assert result["deleted"]["tasks"] >= 25 + len(stage_tasks)
    assert result["batches"] >= 4  # 25 + the stage tasks in batches of 10, then the other rules

    with sessions.begin() as session:
        left = set(session.execute(text("SELECT id FROM tasks WHERE scope_id = :s"), {"s": s}).scalars())
        assert left == {old_failed, recent_done}
        assert _count(session, "SELECT count(*) FROM task_attempts WHERE scope_id = :s", s=s) == 2
        # The meme page's stage rows stay, succeeded, without the deleted task's link.
        stages = session.execute(
            text("SELECT status, task_id FROM image_processing_stages WHERE scope_id = :s AND planned"), {"s": s}
        ).all()
        assert stages and all(status == "succeeded" and task is None for status, task in stages)
        assert _count(session, "SELECT count(*) FROM memes WHERE scope_id = :s AND id = :m", s=s, m=meme_id) == 1
        kept = set(
            session.execute(text("SELECT delivery_id FROM channel_deliveries WHERE scope_id = :s"), {"s": s}).scalars()
        )
        assert kept == {deliveries["failed"], deliveries["recent"]}
        kept = set(
            session.execute(text("SELECT audit_id FROM external_system_audits WHERE scope_id = :s"), {"s": s}).scalars()
        )
        assert kept == {audits["failed"]}
        kept = set(
            session.execute(text("SELECT conversation_id FROM conversations WHERE scope_id = :s"), {"s": s}).scalars()
        )
        assert kept == {conv["error_run"], conv["bound"]}
        assert _count(session, "SELECT count(*) FROM scheduled_job_runs WHERE scope_id = :s", s=s) == 2  # history
        kept = set(
            session.execute(text("SELECT key FROM login_failures WHERE key LIKE :t"), {"t": f"%-{tag}"}).scalars()
        )
        assert kept == {f"share:now-{tag}", f"ip:old-{tag}"}
        session.execute(text("DELETE FROM login_failures WHERE key LIKE :t"), {"t": f"%-{tag}"})
