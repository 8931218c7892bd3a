"""Running scheduled jobs (issue 18, point 2/3): dispatch (SKIP LOCKED, one run per (job, slot)),
coalesced downtime, failures with backoff and auto-disable, expiry, max runs, cost cap, timeout,
the no-repeat window, push messages in isolated/persistent conversations, delivery through a
signed webhook to a local receiver; and two real worker processes with a clock moved across 100
slots."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import func, select, text, update

from conftest import drain_queue, wait_until
from mewdex.db.models import Conversation, Meme, Message, ScheduledJob, ScheduledJobRun, Task
from mewdex.schedules import dispatch, jobs, runner
from mewdex.schedules.jobs import Viewer
from mewdex.search import keyword
from queue_helpers import start_workers, stop_workers

T0 = datetime(2027, 3, 1, 8, 0, tzinfo=UTC)
N_MEMES = 12


def _meme(scope, name: str) -> Meme:
    sha = hashlib.sha256(f"{scope.scope_id}-{name}".encode()).hexdigest()
    return Meme(
        scope_id=scope.scope_id,
        storage_key=sha + ".png",
        display_name=name,
        name_source="uploaded",
        extension=".png",
        size_bytes=100,
        sha256=sha,
        provenance={},
        extensions={"image": {}},
    )


@pytest.fixture(autouse=True)
def every_minute(settings_env):
    """These tests move a clock across every-minute slots: allow a 1-minute interval."""
    settings_env(MEWDEX_SCHEDULE_MIN_INTERVAL_MINUTES="1")


@pytest.fixture
def library(sessions, scope):
    """N_MEMES memes found by "上班" (keyword-indexed; no model needed)."""
    with sessions.begin() as session:
        memes = [_meme(scope, f"上班 {i}") for i in range(N_MEMES)]
        session.add_all(memes)
        session.flush()
        for i, m in enumerate(memes):
            filler = " ".join(f"w{k}" for k in range(i))
            keyword.index_document(
                session, scope.scope_id, m.id, "h", {"name": f"上班 {filler}", "ocr": "", "labels": "", "phrase": ""}
            )
        return [str(m.id) for m in memes]


def _job(sessions, scope, **values) -> ScheduledJob:
    values = {"name": "上班", "prompt": "上班", "cron": "* * * * *", "tz": "UTC", **values}
    with sessions.begin() as session:
        job = jobs.create(session, Viewer(scope), values, now=values.pop("now", T0 - timedelta(seconds=1)))
        session.flush()
        session.expunge(job)
        return job


def _dispatch(sessions, now):
    with sessions.begin() as session:
        return dispatch.dispatch_due(session, now)


def _runs(sessions, job_id) -> list[ScheduledJobRun]:
    with sessions.begin() as session:
        rows = list(
            session.execute(
                select(ScheduledJobRun).where(ScheduledJobRun.job_id == job_id).order_by(ScheduledJobRun.slot)
            ).scalars()
        )
        session.expunge_all()
        return rows


def _reload(sessions, job_id) -> ScheduledJob:
    with sessions.begin() as session:
        job = session.get(ScheduledJob, job_id)
        session.expunge(job)
        return job


@pytest.fixture
def receiver(settings_env):
    """A local webhook receiver: ``state["status"]`` (answer), ``state["delay"]`` (seconds), ``received``."""
    state = {"status": 204, "delay": 0.0, "received": []}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state["received"].append(({k.lower(): v for k, v in self.headers.items()}, body))
            time.sleep(state["delay"])
            self.send_response(state["status"])
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hosts = json.dumps([f"127.0.0.1:{server.server_address[1]}"])
    settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=hosts)
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}/hook"
    state["hosts"] = hosts
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def webhook_target(sessions, receiver):
    """A platform webhook connector definition pointing at the receiver; ``(notify, secret)``."""
    from mewdex.providers import connectors, webhook

    secret = webhook.new_secret()
    with sessions.begin() as session:
        d = connectors.create_definition(
            session,
            provider="webhook",
            name=f"hook-{uuid.uuid4().hex[:6]}",
            config={"url": receiver["url"]},
            credentials={"secret": secret},
            visibility="all",
        )
        definition_id = str(d.definition_id)
    yield {"type": "webhook", "definition_id": definition_id}, secret
    with sessions.begin() as session:
        session.execute(text("DELETE FROM external_system_audits WHERE definition_id = :d"), {"d": definition_id})
        session.execute(text("DELETE FROM external_system_definitions WHERE definition_id = :d"), {"d": definition_id})


def _verify(secret: str, headers: dict, body: bytes) -> bool:
    from fakes.webhook_receiver import verify

    return verify(secret, headers, body) == "ok"


# ------------------------------------------------------------------ dispatch


def test_downtime_of_ten_slots_is_one_coalesced_run_and_nine_skipped(sessions, scope, library):
    job = _job(sessions, scope)
    assert job.next_run_at == T0
    now = T0 + timedelta(minutes=9, seconds=30)  # slots T0 … T0+9m are due: 10 of them
    out = _dispatch(sessions, now)
    assert [(o["due"], o["coalesced"]) for o in out if o["job_id"] == str(job.job_id)] == [(10, 9)]
    runs = _runs(sessions, job.job_id)
    assert [r.status for r in runs] == ["skipped"] * 9 + ["queued"]
    assert runs[-1].slot == T0 + timedelta(minutes=9) and runs[-1].coalesced == 9
    assert all("missed" in r.reason for r in runs[:-1])
    with sessions.begin() as session:
        tasks = (
            session.execute(select(Task).where(Task.task_type == "scheduled_job_run", Task.scope_id == scope.scope_id))
            .scalars()
            .all()
        )
        assert len(tasks) == 1 and tasks[0].payload["slot"] == "2027-03-01T08:09:00Z"
    # next slot from the scheduled slot: 08:10, not "now + 1 minute"
    assert _reload(sessions, job.job_id).next_run_at == T0 + timedelta(minutes=10)
    assert _dispatch(sessions, now) == []  # nothing due any more: no burst, no second run
    drain_queue(sessions, scope)
    runs = _runs(sessions, job.job_id)
    assert [r.status for r in runs].count("ok") == 1 and len(runs) == 10


def test_concurrent_dispatchers_run_each_slot_once(sessions, scope, library):
    job = _job(sessions, scope)
    errors = []

    def dispatcher(now):
        try:
            _dispatch(sessions, now)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    for i in range(20):
        now = T0 + timedelta(minutes=i, seconds=1)
        threads = [threading.Thread(target=dispatcher, args=(now,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # a dispatcher that found the job locked skipped it; the one holding it ran the slot
        wait_until(lambda i=i: len(_runs(sessions, job.job_id)) == i + 1, what=f"slot {i}")
    assert not errors
    runs = _runs(sessions, job.job_id)
    assert [r.slot for r in runs] == [T0 + timedelta(minutes=i) for i in range(20)]
    assert {r.status for r in runs} == {"queued"} and {r.coalesced for r in runs} == {0}


def test_expiry_ends_the_job(sessions, scope, library):
    job = _job(sessions, scope, expires_at=T0 + timedelta(minutes=2, seconds=30))
    for i in range(5):
        _dispatch(sessions, T0 + timedelta(minutes=i, seconds=1))
    assert [r.slot for r in _runs(sessions, job.job_id)] == [T0 + timedelta(minutes=i) for i in range(3)]
    job = _reload(sessions, job.job_id)
    assert (job.enabled, job.disabled_reason) == (False, "expired")


def test_max_runs_ends_the_job(sessions, scope, library):
    job = _job(sessions, scope, max_runs=3)
    for i in range(6):
        _dispatch(sessions, T0 + timedelta(minutes=i, seconds=1))
    assert len(_runs(sessions, job.job_id)) == 3
    job = _reload(sessions, job.job_id)
    assert job.enabled is False and job.run_count == 3 and "maximum of 3 runs" in job.disabled_reason


def test_cost_cap_ends_the_job(sessions, scope, library):
    job = _job(sessions, scope, cost_cap_cny="0.5")
    _dispatch(sessions, T0 + timedelta(seconds=1))
    with sessions.begin() as session:  # what a chat-model run would have metered
        session.execute(
            update(ScheduledJobRun).where(ScheduledJobRun.job_id == job.job_id).values(cost_cny=Decimal("0.6"))
        )
    _dispatch(sessions, T0 + timedelta(minutes=1, seconds=1))
    runs = _runs(sessions, job.job_id)
    assert [r.status for r in runs] == ["queued", "skipped"] and "cost cap" in runs[1].reason
    job = _reload(sessions, job.job_id)
    assert job.enabled is False and job.disabled_reason.startswith("cost cap reached")


def test_paused_and_deleted_jobs_skip_their_queued_run(sessions, scope, library):
    job = _job(sessions, scope)
    _dispatch(sessions, T0 + timedelta(seconds=1))
    with sessions.begin() as session:
        jobs.pause(session, Viewer(scope), job.job_id)
    assert _dispatch(sessions, T0 + timedelta(minutes=5)) == []  # a paused job is not due
    drain_queue(sessions, scope)
    runs = _runs(sessions, job.job_id)
    assert [(r.status, r.reason) for r in runs] == [("skipped", "the job is paused")]
    with sessions.begin() as session:
        jobs.resume(session, Viewer(scope), job.job_id, now=T0 + timedelta(minutes=5, seconds=1))
    # missed while paused: not run; the next slot is the first after "now"
    assert _reload(sessions, job.job_id).next_run_at == T0 + timedelta(minutes=6)


# ------------------------------------------------------------------ runs


def test_runs_record_push_messages_and_never_repeat_a_recent_meme(sessions, scope, library):
    job = _job(sessions, scope, mode="isolated")
    for i in range(N_MEMES + 3):
        _dispatch(sessions, T0 + timedelta(minutes=i, seconds=1))
        drain_queue(sessions, scope)
    runs = _runs(sessions, job.job_id)
    assert {r.status for r in runs} == {"ok"}
    memes = [str(r.meme_id) for r in runs]
    assert set(memes) <= set(library)
    for i in range(len(memes)):  # any N+1 consecutive runs sent N+1 different memes
        window = memes[i : i + runner.NO_REPEAT_RUNS + 1]
        assert len(set(window)) == len(window), memes
    with sessions.begin() as session:
        convs = session.execute(select(Conversation).where(Conversation.scheduled_job_id == job.job_id)).scalars().all()
        assert len(convs) == len(runs)  # isolated: a conversation per run
        pushes = (
            session.execute(select(Message).where(Message.conversation_id.in_([c.conversation_id for c in convs])))
            .scalars()
            .all()
        )
        assert {m.kind for m in pushes} == {"push"} and len(pushes) == len(runs)
        assert all(m.artifact_refs[0]["meme_id"] in library for m in pushes)


def test_persistent_mode_writes_to_its_bound_conversation(sessions, scope, library):
    job = _job(sessions, scope, mode="persistent")
    for i in range(3):
        _dispatch(sessions, T0 + timedelta(minutes=i, seconds=1))
        drain_queue(sessions, scope)
    job = _reload(sessions, job.job_id)
    runs = _runs(sessions, job.job_id)
    assert job.bound_task_id is not None and {r.conversation_id for r in runs} == {job.bound_task_id}
    with sessions.begin() as session:
        n = session.execute(
            select(func.count())
            .select_from(Message)
            .where(Message.conversation_id == job.bound_task_id, Message.kind == "push")
        ).scalar_one()
    assert n == 3


def test_webhook_delivery_is_signed_and_carries_the_meme(sessions, scope, library, webhook_target, receiver):
    notify, secret = webhook_target
    job = _job(sessions, scope, notify=notify)
    _dispatch(sessions, T0 + timedelta(seconds=1))
    drain_queue(sessions, scope)
    (run,) = _runs(sessions, job.job_id)
    assert (run.status, run.delivery_status) == ("ok", "succeeded"), (run.error_code, run.error)
    ((headers, body),) = receiver["received"]
    assert _verify(secret, headers, body)
    event = json.loads(body)
    assert event["type"] == "schedule.run" and event["timestamp"] == "2027-03-01T08:00:00.000Z"  # the run's slot
    assert event["data"]["meme"]["id"] == str(run.meme_id)
    assert event["data"]["run"] == {"id": str(run.run_id), "slot": "2027-03-01T08:00:00Z"}
    assert event["data"]["conversation_id"] == str(run.conversation_id)
    assert headers["webhook-id"] == f"msg_{run.run_id.hex}"


def test_failures_back_off_then_disable_the_job_with_the_reason(sessions, scope, library, webhook_target, receiver):
    notify, _secret = webhook_target
    receiver["status"] = 503
    job = _job(sessions, scope, notify=notify)
    for i in range(runner.DISABLE_AFTER_FAILURES + 1):
        _dispatch(sessions, T0 + timedelta(minutes=i, seconds=1))
        drain_queue(sessions, scope)
    runs = _runs(sessions, job.job_id)
    # the job stopped after DISABLE_AFTER_FAILURES failed runs; each run was tried MAX_ATTEMPTS times
    assert len(runs) == runner.DISABLE_AFTER_FAILURES
    assert {(r.status, r.error_code, r.delivery_status, r.attempts) for r in runs} == {
        ("error", "provider_failed", "failed", runner.MAX_ATTEMPTS)
    }
    assert len(receiver["received"]) == runner.DISABLE_AFTER_FAILURES * runner.MAX_ATTEMPTS
    # every attempt of a run carried the same webhook-id: the receiver can drop repeats
    ids = [h["webhook-id"] for h, _b in receiver["received"]]
    assert len(set(ids)) == runner.DISABLE_AFTER_FAILURES
    with sessions.begin() as session:
        histories = (
            session.execute(
                select(Task.attempt_count).where(Task.scope_id == scope.scope_id, Task.task_type == "scheduled_job_run")
            )
            .scalars()
            .all()
        )
    assert set(histories) == {runner.MAX_ATTEMPTS}
    job = _reload(sessions, job.job_id)
    assert job.enabled is False and job.consecutive_failures == runner.DISABLE_AFTER_FAILURES
    assert "3 failed runs in a row" in job.disabled_reason and "provider_failed" in job.disabled_reason
    assert job.last_status == "error"
    # resuming clears the reason and the count
    with sessions.begin() as session:
        jobs.resume(session, Viewer(scope), job.job_id, now=T0 + timedelta(hours=1))
    job = _reload(sessions, job.job_id)
    assert (job.enabled, job.disabled_reason, job.consecutive_failures) == (True, None, 0)


def test_a_success_resets_the_failure_count(sessions, scope, library, webhook_target, receiver):
    notify, _secret = webhook_target
    job = _job(sessions, scope, notify=notify)
    receiver["status"] = 500
    _dispatch(sessions, T0 + timedelta(seconds=1))
    drain_queue(sessions, scope)
    assert _reload(sessions, job.job_id).consecutive_failures == 1
    receiver["status"] = 204
    _dispatch(sessions, T0 + timedelta(minutes=1, seconds=1))
    drain_queue(sessions, scope)
    job = _reload(sessions, job.job_id)
    assert (job.consecutive_failures, job.last_status, job.enabled) == (0, "ok", True)


def test_timeout_seconds_is_enforced(sessions, scope, library, webhook_target, receiver):
    notify, _secret = webhook_target
    receiver["delay"] = 3.0
    job = _job(sessions, scope, notify=notify, timeout_seconds=1)
    _dispatch(sessions, T0 + timedelta(seconds=1))
    started = time.monotonic()
    drain_queue(sessions, scope)
    (run,) = _runs(sessions, job.job_id)
    assert (run.status, run.error_code) == ("error", "schedule_timeout"), run.error
    assert run.attempts == 1  # a timeout is final: not retried
    assert time.monotonic() - started < 10


def test_no_matching_meme_fails_the_run(sessions, scope, library):
    job = _job(sessions, scope, prompt="zzzz-nothing-matches")
    _dispatch(sessions, T0 + timedelta(seconds=1))
    drain_queue(sessions, scope)
    (run,) = _runs(sessions, job.job_id)
    assert (run.status, run.error_code) == ("error", "schedule_no_meme")


# ------------------------------------------------------------------ real workers, moved clock


def test_two_worker_processes_and_a_clock_moved_across_100_slots_run_each_slot_once(
    sessions, scope, library, mewdex_env, tmp_path
):
    clock_file = tmp_path / "clock"
    clock_file.write_text((T0 - timedelta(seconds=1)).isoformat())
    job = _job(sessions, scope)
    procs = start_workers(
        mewdex_env,
        2,
        concurrency=2,
        # every run's conversation is kept, to count the pushes
        extra_env={"MEWDEX_SCHEDULES_CLOCK_FILE": str(clock_file), "MEWDEX_SCHEDULE_KEEP_RUN_CONVERSATIONS": "100"},
    )
    try:
        for i in range(100):
            clock_file.write_text((T0 + timedelta(minutes=i, seconds=1)).isoformat())
            # the workers' schedulers dispatch every second; this process dispatches too, at once
            _dispatch(sessions, T0 + timedelta(minutes=i, seconds=1))
            wait_until(lambda i=i: len(_runs(sessions, job.job_id)) == i + 1, timeout=30, what=f"slot {i}")
        wait_until(lambda: {r.status for r in _runs(sessions, job.job_id)} == {"ok"}, timeout=240, what="100 runs ok")
    finally:
        stop_workers(procs)
    runs = _runs(sessions, job.job_id)
    assert [r.slot for r in runs] == [T0 + timedelta(minutes=i) for i in range(100)]
    assert {r.coalesced for r in runs} == {0} and {r.attempts for r in runs} == {1}
    with sessions.begin() as session:
        tasks = session.execute(
            select(Task.dedupe_key, Task.status).where(
                Task.scope_id == scope.scope_id, Task.task_type == "scheduled_job_run"
            )
        ).all()
        pushes = session.execute(
            select(func.count())
            .select_from(Message)
            .join(Conversation, Conversation.conversation_id == Message.conversation_id)
            .where(Conversation.scheduled_job_id == job.job_id, Message.kind == "push")
        ).scalar_one()
    assert len(tasks) == 100 and len({k for k, _s in tasks}) == 100 and {s for _k, s in tasks} == {"succeeded"}
    assert pushes == 100
    job = _reload(sessions, job.job_id)
    assert job.run_count == 100 and job.next_run_at == T0 + timedelta(minutes=100)


# ------------------------------------------------------------------ channel delivery (issue 17's framework)


@pytest.fixture
def channel_receiver(settings_env):
    from fakes.webhook_receiver import WebhookReceiver

    with WebhookReceiver() as r:
        settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([f"127.0.0.1:{r.port}"]))
        yield r


def test_channel_target_delivers_through_the_channel_framework(sessions, account, channel_receiver):
    from conftest import client_for
    from mewdex.db.models import ChannelDelivery

    with client_for(account.scope) as client:
        made = client.post("/api/v1/channels/webhook", json={"url": channel_receiver.url})
        assert made.status_code == 201, made.text
        channel_receiver.secret = made.json()["secret"]  # the receiver verifies every signature itself
    job = _job(sessions, account.scope, prompt="cat", notify={"type": "channel", "channel": "webhook"})
    _dispatch(sessions, T0 + timedelta(seconds=1))
    drain_queue(sessions, account.scope, timeout=120)
    (run,) = _runs(sessions, job.job_id)
    assert (run.status, run.delivery_status) == ("ok", "queued"), (run.error_code, run.error)
    assert run.delivery_detail["type"] == "channel" and run.delivery_detail["channel"] == "webhook"
    with sessions.begin() as session:
        row = session.get(ChannelDelivery, uuid.UUID(run.delivery_detail["delivery_id"]))
        assert (row.status, row.source, row.meme_id, row.conversation_id) == (
            "sent",
            "schedule",
            run.meme_id,
            run.conversation_id,
        )
    [event] = channel_receiver.events
    assert event["type"] == "channel.meme" and event["data"]["meme_id"] == str(run.meme_id)
    assert event["data"]["caption"].startswith("⏰ 上班")
    assert channel_receiver.requests[-1]["verdict"] == "ok"


def test_channel_target_without_a_binding_fails_the_run_with_the_reason(sessions, account):
    job = _job(sessions, account.scope, prompt="cat", notify={"type": "channel", "channel": "telegram"})
    _dispatch(sessions, T0 + timedelta(seconds=1))
    drain_queue(sessions, account.scope, timeout=120)
    (run,) = _runs(sessions, job.job_id)
    assert (run.status, run.error_code, run.attempts) == ("error", "channel_not_bound", 1), run.error


def test_job_limit_minimum_interval_metered_runs_and_pruned_conversations(sessions, scope, library, settings_env):
    """Issue 31, finding 6: an account has at most MEWDEX_SCHEDULE_MAX_JOBS_PER_ACCOUNT jobs and a
    cron may not run more often than MEWDEX_SCHEDULE_MIN_INTERVAL_MINUTES (both changed at run time
    by an admin); each run is a priced usage event (counted against the budget); an isolated job
    keeps only its latest run conversations."""
    from mewdex.db.models import UsageEvent
    from mewdex.platform import instance
    from mewdex.platform.grants import BUDGET_KINDS
    from mewdex.schedules.errors import ScheduleError

    settings_env(MEWDEX_SCHEDULE_MIN_INTERVAL_MINUTES="5", MEWDEX_SCHEDULE_MAX_JOBS_PER_ACCOUNT="2")
    for every_minute in ("* * * * *", "*/2 * * * *", "0,3 9 * * *", "0-1 0 1 * *"):
        with pytest.raises(ScheduleError) as err, sessions.begin() as session:
            jobs.create(session, Viewer(scope), {"name": "x", "prompt": "上班", "cron": every_minute, "tz": "UTC"})
        assert err.value.code == "schedule_too_frequent", every_minute
    first = _job(sessions, scope, cron="*/5 * * * *")
    with pytest.raises(ScheduleError) as err, sessions.begin() as session:
        jobs.update(session, Viewer(scope), first.job_id, {"cron": "*/4 * * * *"})
    assert err.value.code == "schedule_too_frequent"
    _job(sessions, scope, cron="0 9 * * *")
    with pytest.raises(ScheduleError) as err:
        _job(sessions, scope, cron="0 10 * * *")
    assert err.value.code == "schedule_limit_reached" and err.value.details == {"max_jobs": 2}
    with sessions.begin() as session:  # the admin raises the limit at run time
        instance.set_setting(session, "schedule_max_jobs_per_account", 3)
    try:
        _job(sessions, scope, cron="0 10 * * *")
        with pytest.raises(ScheduleError) as err:
            _job(sessions, scope, cron="0 11 * * *")
        assert err.value.details == {"max_jobs": 3}
    finally:
        with sessions.begin() as session:
            instance.set_setting(session, "schedule_max_jobs_per_account", None)
    with sessions.begin() as session:
        session.execute(update(ScheduledJob).where(ScheduledJob.scope_id == scope.scope_id).values(deleted_at=T0))

    settings_env(
        MEWDEX_SCHEDULE_MIN_INTERVAL_MINUTES="1",
        MEWDEX_SCHEDULE_KEEP_RUN_CONVERSATIONS="2",
        MEWDEX_PRICES=json.dumps({"schedule": {"runs": 0.5}}),
    )
    busy = _job(sessions, scope, mode="isolated")
    for i in range(4):
        _dispatch(sessions, T0 + timedelta(minutes=i, seconds=1))
        drain_queue(sessions, scope)
    runs = _runs(sessions, busy.job_id)
    assert [r.status for r in runs] == ["ok"] * 4
    with sessions.begin() as session:
        events = session.execute(
            select(UsageEvent.kind, UsageEvent.cost_cny).where(UsageEvent.scope_id == scope.scope_id)
        ).all()
        assert sorted(events) == [("schedule_run", Decimal("0.5"))] * 4 and "schedule_run" in BUDGET_KINDS
        kept = session.execute(
            select(Conversation.conversation_id).where(Conversation.scheduled_job_id == busy.job_id)
        ).scalars()
        assert set(kept) == {runs[-1].conversation_id, runs[-2].conversation_id}
    assert [r.conversation_id is None for r in _runs(sessions, busy.job_id)] == [True, True, False, False]


def test_a_job_now_too_frequent_is_paused_at_dispatch_and_not_resumed(sessions, scope, settings_env):
    """Issue 31, finding 6: the minimum interval is one rule (jobs.check_interval) that create,
    update, resume and dispatch all ask: after an admin raises it, a job saved under the old minimum
    is paused at its next dispatch with the reason (no run), and resuming it answers
    ``schedule_too_frequent`` until its cron is changed."""
    from mewdex.platform import instance
    from mewdex.schedules.errors import ScheduleError

    settings_env(MEWDEX_SCHEDULE_MIN_INTERVAL_MINUTES="5")
    job = _job(sessions, scope, cron="*/5 * * * *")
    with sessions.begin() as session:
        instance.set_setting(session, "schedule_min_interval_minutes", 10)
    try:
        out = _dispatch(sessions, T0 + timedelta(minutes=5, seconds=1))
        assert {"job_id": str(job.job_id), "ended": "too_frequent"} in out
        assert _runs(sessions, job.job_id) == []
        with sessions.begin() as session:
            row = session.get(ScheduledJob, job.job_id)
            assert not row.enabled and "every 10 minutes" in row.disabled_reason
        with pytest.raises(ScheduleError) as err, sessions.begin() as session:
            jobs.resume(session, Viewer(scope), job.job_id, now=T0)
        assert err.value.code == "schedule_too_frequent" and err.value.details == {"min_interval_minutes": 10}
        with sessions.begin() as session:
            jobs.update(session, Viewer(scope), job.job_id, {"cron": "*/10 * * * *"})
            assert jobs.resume(session, Viewer(scope), job.job_id, now=T0).enabled
    finally:
        with sessions.begin() as session:
            instance.set_setting(session, "schedule_min_interval_minutes", None)
            session.execute(update(ScheduledJob).where(ScheduledJob.job_id == job.job_id).values(deleted_at=T0))


def test_parallel_creates_at_the_limit_only_one_passes(sessions, scope, settings_env):
    """Issue 31, finding 6: the per-account job limit holds under parallel creates: with one job
    left, a second create on another connection waits for the first's lock on the account's scope
    row and then counts the first's job (``schedule_limit_reached``), never both passing."""
    from mewdex.schedules.errors import ScheduleError

    settings_env(MEWDEX_SCHEDULE_MAX_JOBS_PER_ACCOUNT="2")
    values = {"name": "x", "prompt": "上班", "tz": "UTC"}
    _job(sessions, scope, cron="0 9 * * *")
    first = sessions()
    result: dict[str, str] = {}

    def second() -> None:
        try:
            with sessions.begin() as session:
                jobs.create(session, Viewer(scope), {**values, "cron": "0 11 * * *"})
            result["code"] = "created"
        except ScheduleError as exc:
            result["code"] = exc.code

    try:
        first.begin()
        jobs.create(first, Viewer(scope), {**values, "cron": "0 10 * * *"})  # at limit - 1: passes, not committed
        thread = threading.Thread(target=second)
        thread.start()
        thread.join(1.5)
        assert thread.is_alive(), "the second create waits for the first's lock"
        first.commit()
        thread.join(30)
        assert result == {"code": "schedule_limit_reached"}
        with sessions.begin() as session:
            mine = ScheduledJob.scope_id == scope.scope_id, ScheduledJob.deleted_at.is_(None)
            assert session.execute(select(func.count()).where(*mine)).scalar_one() == 2
    finally:
        first.rollback()
        first.close()
        with sessions.begin() as session:
            session.execute(update(ScheduledJob).where(ScheduledJob.scope_id == scope.scope_id).values(deleted_at=T0))
