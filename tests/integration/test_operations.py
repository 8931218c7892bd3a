"""Scheduled backups (``backup_check`` → ``backup`` through the periodic scheduler's queue), their last
result on ``/health`` and the admin page, ``mewdex doctor``, ``mewdex reindex`` over every library and
the start-up rebuild when the search recipe changed (issue 34, items 1 and 6)."""

from __future__ import annotations

import json
import random
import re
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from channel_helpers import add_meme
from conftest import client_for, drain_queue, drop_scope, new_scope


def _run_schedule(sessions, name: str) -> None:
    """Enqueue one slot of the built-in schedule ``name`` and run the system scope's queue with a real worker."""
    from mewdex.db.models import ScopeContext
    from mewdex.library.scopes import ensure_scope
    from mewdex.queue.scheduler import enqueue_slot
    from mewdex.runtime.maintenance import SYSTEM_SCOPE, schedules

    [schedule] = [s for s in schedules() if s.name == name]
    with sessions.begin() as session:
        ensure_scope(session, ScopeContext(SYSTEM_SCOPE))  # what every entry point's start-up makes
        enqueue_slot(session, schedule, random.randrange(10**12, 10**13))
    drain_queue(sessions, ScopeContext(SYSTEM_SCOPE), timeout=180)


def _pretend_checked_minutes_ago(sessions, minutes: int) -> None:
    from mewdex.backups.status import SCHEDULE_STATE_SETTING
    from mewdex.platform.instance import get_setting, set_setting

    with sessions.begin() as session:
        state = dict(get_setting(session, SCHEDULE_STATE_SETTING, None) or {})
        state["after"] = (datetime.now(UTC) - timedelta(minutes=minutes)).isoformat()
        set_setting(session, SCHEDULE_STATE_SETTING, state)


def _backup_tasks(sessions) -> list[tuple[str, str]]:
    with sessions.begin() as session:
        return [
            tuple(row)
            for row in session.execute(
                text(
                    "SELECT status, coalesce(error->>'code', '') FROM tasks WHERE task_type = 'backup'"
                    " ORDER BY created_at"
                )
            ).all()
        ]


@pytest.fixture
def no_backup_state(sessions):
    from mewdex.backups.status import LAST_BACKUP_SETTING, SCHEDULE_STATE_SETTING

    def clear():
        with sessions.begin() as session:
            session.execute(
                text("DELETE FROM platform_settings WHERE key IN (:a, :b)"),
                {"a": LAST_BACKUP_SETTING, "b": SCHEDULE_STATE_SETTING},
            )
            session.execute(text("DELETE FROM tasks WHERE task_type IN ('backup', 'backup_check')"))

    clear()
    yield
    clear()


def test_scheduled_backups_run_keep_n_and_show_on_health_and_the_admin_page(
    sessions, settings_env, tmp_path, no_backup_state
):
    from mewdex.backups.archive import SNAPSHOT_NAME

    dest = tmp_path / "scheduled"
    (tmp_path / "backup.key").write_text("7" * 64)
    settings_env(
        MEWDEX_BACKUP_DEST=str(dest), MEWDEX_BACKUP_CRON="*/5 * * * *", MEWDEX_BACKUP_KEEP="1", MEWDEX_AUTH="none",
        MEWDEX_BACKUP_KEY_FILE=str(tmp_path / "backup.key"),
    )  # fmt: skip
    _run_schedule(sessions, "backup_check")  # the first check only starts counting: nothing is due yet
    assert _backup_tasks(sessions) == []
    _pretend_checked_minutes_ago(sessions, 6)  # a run of */5 fell since the last check
    _run_schedule(sessions, "backup_check")
    assert _backup_tasks(sessions) == [("succeeded", "")]
    _run_schedule(sessions, "backup_check")  # checked just now: nothing due again
    assert len(_backup_tasks(sessions)) == 1
    first = sorted(p.name for p in dest.iterdir() if SNAPSHOT_NAME.fullmatch(p.name))

    _pretend_checked_minutes_ago(sessions, 6)
    _run_schedule(sessions, "backup_check")
    assert _backup_tasks(sessions) == [("succeeded", ""), ("succeeded", "")]
    snapshots = sorted(p.name for p in dest.iterdir() if SNAPSHOT_NAME.fullmatch(p.name))
    assert len(snapshots) == 1 and snapshots != first, "MEWDEX_BACKUP_KEEP=1 keeps the newest snapshot only"

    with client_for() as client:
        health = client.get("/health").json()
        assert health["backup"]["configured"] is True and health["backup"]["stale"] is False
        assert health["backup"]["last"]["status"] == "ok" and health["backup"]["last"]["snapshot"] == snapshots[0]
        page = client.get("/admin", headers={"Accept-Language": "en"}).text
        assert 'data-status="ok"' in page and snapshots[0] in page and "*/5 * * * *" in page
        zh = client.get("/admin", headers={"Accept-Language": "zh-CN"}).text
        assert "上次备份" in zh and snapshots[0] in zh

        settings_env(MEWDEX_BACKUP_DEST="ftp://nowhere/backups")  # a failure is recorded and shown
        _pretend_checked_minutes_ago(sessions, 6)
        _run_schedule(sessions, "backup_check")
        assert _backup_tasks(sessions)[-1] == ("failed", "backup_dest_invalid")
        last = client.get("/health").json()["backup"]["last"]
        assert last["status"] == "failed" and last["code"] == "backup_dest_invalid" and last["last_ok_at"]
        assert 'data-status="failed"' in client.get("/admin").text


def test_doctor_reports_a_failed_backup_with_its_fix_and_exits_1(sessions, settings_env, no_backup_state):
    from mewdex.backups.status import record_result
    from mewdex.cli import app

    settings_env(MEWDEX_BACKUP_DEST="/srv/backups/mewdex")
    record_result({"status": "failed", "code": "backup_store_failed", "message": "disk full", "dest": "/srv"})
    result = CliRunner().invoke(app, ["doctor", "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    checks = {c["name"]: c for c in report["checks"]}
    assert list(checks) == [
        "database", "migrations", "disk", "secrets", "models", "egress", "search_index", "backups",
    ]  # fmt: skip
    assert report["ok"] is False
    assert checks["backups"]["status"] == "problem" and "backup_store_failed" in checks["backups"]["message"]
    assert checks["backups"]["fix"] == "mewdex backup /srv/backups/mewdex"
    assert checks["database"]["status"] == checks["migrations"]["status"] == "ok"
    assert checks["secrets"]["status"] == "ok" and checks["models"]["status"] == "ok"

    settings_env(MEWDEX_EGRESS_ALLOW_HOSTS='["no-port-here"]')
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 1
    assert (
        re.search(r"problem\s+egress: .*no-port-here", result.stdout) and "MEWDEX_EGRESS_ALLOW_HOSTS" in result.stdout
    )


@pytest.fixture
def two_libraries(sessions, store):
    scopes = [new_scope(sessions, "rx"), new_scope(sessions, "rx")]
    for i, scope in enumerate(scopes):
        add_meme(sessions, store, scope, f"reindex meme {i}")
    yield scopes
    with sessions.begin() as session:  # builds this test started in other tests' scopes are not theirs to run
        session.execute(
            text(
                "DELETE FROM search_generations g USING tasks t WHERE t.task_type = 'search_reindex'"
                " AND t.dedupe_key = g.id::text AND t.payload->>'reason' IN ('recipe_changed', 'requested')"
                " AND t.created_at > now() - interval '10 minutes' AND g.status IN ('building', 'ready')"
            )
        )
        session.execute(
            text(
                "DELETE FROM tasks WHERE task_type = 'search_reindex' AND status IN ('queued', 'running')"
                " AND payload->>'reason' IN ('recipe_changed', 'requested')"
            )
        )
    for scope in scopes:
        drop_scope(sessions, scope)


def _reindex_tasks(sessions, scope_ids) -> dict[str, str]:
    with sessions.begin() as session:
        rows = session.execute(
            text(
                "SELECT scope_id, payload->>'reason' FROM tasks WHERE task_type = 'search_reindex'"
                " AND scope_id = ANY(:s) AND status = 'queued'"
            ),
            {"s": scope_ids},
        ).all()
    return dict(rows)


def test_a_search_recipe_change_queues_a_rebuild_of_every_library_shown_on_the_admin_page(
    sessions, settings_env, two_libraries
):
    from mewdex.platform.instance import set_setting
    from mewdex.runtime import SEARCH_RECIPE_SETTING, check_search_recipe
    from mewdex.search.documents import recipe

    ids = [s.scope_id for s in two_libraries]
    check_search_recipe()  # records the current recipe if no start did yet
    assert check_search_recipe() == [], "an unchanged recipe queues nothing"
    with sessions.begin() as session:
        set_setting(session, SEARCH_RECIPE_SETTING, "recipe-of-an-older-release")
    started = check_search_recipe()
    assert set(ids) <= set(started)
    assert _reindex_tasks(sessions, ids) == dict.fromkeys(ids, "recipe_changed")
    with sessions.begin() as session:
        assert (
            session.execute(
                text("SELECT value FROM platform_settings WHERE key = :k"), {"k": SEARCH_RECIPE_SETTING}
            ).scalar_one()
            == recipe()
        )
    assert check_search_recipe() == [], "recorded: the next start queues nothing"

    settings_env(MEWDEX_AUTH="none")
    with client_for() as client:
        page = client.get("/admin", headers={"Accept-Language": "en"}).text
        assert 'id="admin-rebuilds"' in page and "the search recipe changed" in page
        assert all(scope_id in page for scope_id in ids)
        assert "搜索配方已更新" in client.get("/admin", headers={"Accept-Language": "zh-CN"}).text


def test_a_data_dir_from_before_the_recipe_was_recorded_rebuilds_once(sessions, two_libraries):
    """No recipe recorded but libraries indexed: the vectors come from a release before the recipe was
    recorded (an unknown recipe), so the first start rebuilds them, as for a change, and records it."""
    from mewdex.runtime import SEARCH_RECIPE_SETTING, check_search_recipe

    ids = [s.scope_id for s in two_libraries]
    check_search_recipe()
    with sessions.begin() as session:
        session.execute(text("DELETE FROM platform_settings WHERE key = :k"), {"k": SEARCH_RECIPE_SETTING})
    assert set(ids) <= set(check_search_recipe())
    assert _reindex_tasks(sessions, ids) == dict.fromkeys(ids, "recipe_changed")
    assert check_search_recipe() == [], "recorded: the next start queues nothing"


def test_reindex_covers_every_library(sessions, two_libraries):
    from mewdex.cli import app

    ids = [s.scope_id for s in two_libraries]
    result = CliRunner().invoke(app, ["reindex"])
    assert result.exit_code == 0, result.output
    for scope_id in ids:
        assert re.search(rf"{scope_id}: building generation \S+\s+with \S+", result.stdout), result.stdout
    assert _reindex_tasks(sessions, ids) == dict.fromkeys(ids, "requested")


def test_backup_to_s3_is_content_addressed_verifiable_and_pruned(
    sessions, store, settings_env, s3_server, tmp_path, no_backup_state
):
    """DEST = s3://bucket/prefix with the S3 store's settings: the same layout, checks and pruning;
    encrypted, and an http:// endpoint on another machine is refused."""
    from mewdex.backups.archive import BackupError, entries, object_name
    from mewdex.backups.keys import key_from_file
    from mewdex.backups.restore import resolve_source, verify
    from mewdex.backups.snapshot import backup
    from mewdex.backups.targets import read_manifest

    env = s3_server.env("unused")
    (tmp_path / "backup.key").write_text("8" * 64)
    settings_env(
        **{k: v for k, v in env.items() if k != "MEWDEX_BLOB_STORE"},
        MEWDEX_BACKUP_KEY_FILE=str(tmp_path / "backup.key"),
    )  # the endpoint and credentials; the library's own blobs stay local
    key = key_from_file(tmp_path / "backup.key")
    dest = s3_server.url(f"backups-{uuid.uuid4().hex[:8]}")
    scope = new_scope(sessions, "s3bk")
    try:
        add_meme(sessions, store, scope, "s3 backup meme")
        first = backup(dest)
        assert first["blobs"]["copied"] >= 1 and first["blobs"]["missing"] == 0
        add_meme(sessions, store, scope, "another s3 backup meme")
        second = backup(dest, keep=1)
        assert second["blobs"]["copied"] == 1, "only the new meme's file is sent again"
        assert second["removed_snapshots"] == [first["snapshot"]]
        target, name = resolve_source(dest)
        assert name == second["snapshot"]
        manifest = read_manifest(target, name, key)
        assert manifest["encrypted"] is True
        with tempfile.TemporaryDirectory() as tmp:
            local = verify(target, name, manifest, Path(tmp), _Silent(), key)
            assert set(local) == set(manifest["files"]) and "database.dump" in local
        kept = {object_name(key, name, e) for e in entries(manifest) if e.kind == "blob"}
        assert set(target.blob_objects()) == kept, "pruning left exactly the blobs the kept snapshot lists"
        settings_env(MEWDEX_S3_ENDPOINT_URL=env["MEWDEX_S3_ENDPOINT_URL"].replace("127.0.0.1", "192.0.2.1"))
        with pytest.raises(BackupError) as insecure:
            backup(dest)
        assert insecure.value.code == "backup_dest_insecure"
    finally:
        drop_scope(sessions, scope)


class _Silent:
    def phase(self, name, total):
        pass

    def advance(self, steps=1):
        pass


def test_doctor_reads_the_sealed_payloads_of_waiting_tasks_only(sessions):
    """A finished task's payload is history: a key rotation re-seals only waiting tasks, so a finished
    one may keep a handle sealed under a dropped key; the doctor's secrets check walks what a rotation
    walks and is not alarmed by it, while a waiting task's unreadable handle is a problem."""
    from mewdex.queue import registry
    from mewdex.runtime.doctor import sealed_secrets

    unreadable = {"v": 1, "kid": "dropped-key", "nonce": "AAAA", "ct": "AAAA"}
    scope = new_scope(sessions)
    try:
        with sessions.begin() as session:
            waiting, finished = (
                registry.submit(
                    session, scope_id=scope.scope_id, task_type="channel_delivery", payload={"reply_token": unreadable}
                ).id
                for _ in range(2)
            )
            session.execute(text("UPDATE tasks SET status = 'succeeded', completed_at = now() WHERE id = :i"),
                            {"i": finished})  # fmt: skip
        with sessions.begin() as session:
            places = [where for where, _ in sealed_secrets(session)]
        assert any(str(waiting) in p for p in places) and not any(str(finished) in p for p in places)
    finally:
        drop_scope(sessions, scope)
