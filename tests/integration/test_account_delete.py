"""Deleting an account: the admin API, the CLI and what goes with the account (its whole library:
every row of its scope, its blobs and thumbnails; nothing left owned by no one)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from accounts_helpers import add_meme, bearer, png


def code(r) -> str:
    return r.json()["error"]["code"]


def _scope_rows(sessions, scope_id: str) -> dict[str, int]:
    """Rows keyed by ``scope_id`` in every table that has one (the scope row included)."""
    from mewdex.db.models import Base

    counts: dict[str, int] = {}
    with sessions.begin() as session:
        for table in Base.metadata.sorted_tables:
            for column in ("scope_id", "task_scope_id", "cursor_scope_id", "id" if table.name == "scopes" else ""):
                if column and column in table.c:
                    n = session.execute(
                        text(f"SELECT count(*) FROM {table.name} WHERE {column} = :s"), {"s": scope_id}
                    ).scalar_one()
                    if n:
                        counts[f"{table.name}.{column}"] = n
    return counts


def _namespace_files(sessions, store, scope_id: str) -> list[Path]:
    from mewdex.storage.blobs import thumbnail_namespace

    with sessions.begin() as session:
        ns = session.execute(text("SELECT storage_namespace FROM scopes WHERE id = :s"), {"s": scope_id}).scalar_one()
    roots = [Path(store.root) / str(ns), Path(store.root) / thumbnail_namespace(ns)]
    return roots


def _cli(*args: str, input: str | None = None):
    from typer.testing import CliRunner

    from mewdex.cli import app

    return CliRunner().invoke(app, list(args), input=input, env={"COLUMNS": "200", "NO_COLOR": "1"})


def test_admin_deletes_an_account_with_its_library_rows_and_files(auth_app, sessions, store):
    admin = auth_app.new("deladm", admin=True)
    victim = auth_app.new("delme")
    other = auth_app.new("keepme")
    for i in range(2):
        add_meme(sessions, store, victim.scope_id, png(900 + i), name=f"v{i}.png")
    kept = add_meme(sessions, store, other.scope_id, png(950), name="kept.png")
    r = victim.client.post(
        "/api/v1/schedules",
        json={"name": "daily", "cron": "0 9 * * *", "prompt": "a cat", "tz": "UTC"},
        headers={"X-CSRF-Token": victim.csrf},
    )
    assert r.status_code == 201, r.text
    roots = _namespace_files(sessions, store, victim.scope_id)
    assert any(p.rglob("*") for p in roots if p.exists()) and "memes.scope_id" in _scope_rows(sessions, victim.scope_id)

    anon = auth_app.client()
    csrf = {"X-CSRF-Token": admin.csrf}
    # only an admin; never oneself
    r = anon.delete(f"/api/v1/admin/users/{victim.user_id}", headers=bearer(other.token))
    assert r.status_code == 404 and code(r) == "not_found"  # a non-admin sees no admin route
    r = admin.client.delete(f"/api/v1/admin/users/{admin.user_id}", headers=csrf)
    assert r.status_code == 409 and code(r) == "cannot_delete_self"
    r = admin.client.delete("/api/v1/admin/users/00000000-0000-0000-0000-000000000000", headers=csrf)
    assert r.status_code == 404 and code(r) == "not_found"

    r = admin.client.delete(f"/api/v1/admin/users/{victim.user_id}", headers=csrf)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["email"] == victim.email and body["memes"] == 2 and body["blobs"] >= 2
    # no row of the scope anywhere, no file or folder of it in the blob store
    assert _scope_rows(sessions, victim.scope_id) == {}
    assert not any(p.exists() for p in roots)
    # the account is gone: its token and session stop, it is no longer listed, a second delete is 404
    assert anon.get("/api/v1/me", headers=bearer(victim.token)).status_code == 401
    assert victim.client.get("/api/v1/me").status_code == 401
    listed = admin.client.get("/api/v1/admin/users").json()["users"]
    assert victim.email not in {u["email"] for u in listed}
    r = admin.client.delete(f"/api/v1/admin/users/{victim.user_id}", headers=csrf)
    assert r.status_code == 404
    # another account's library is untouched
    assert other.client.get(f"/api/v1/memes/{kept}").status_code == 200


def test_cli_user_delete_asks_first(auth_app, sessions, store):
    victim = auth_app.new("clidel")
    add_meme(sessions, store, victim.scope_id, png(960), name="c.png")
    # a task of the account holding a worker: refused (409 account_busy), nothing deleted
    from mewdex.queue import registry

    with sessions.begin() as session:
        task = registry.submit(session, scope_id=victim.scope_id, task_type="noop", payload={})
        session.execute(text("UPDATE tasks SET status = 'running' WHERE id = :t"), {"t": task.id})
        task_id = task.id
    busy = _cli("user", "delete", victim.email, "--yes")
    assert busy.exit_code == 3 and "account_busy" in busy.output
    with sessions.begin() as session:
        session.execute(text("UPDATE tasks SET status = 'succeeded' WHERE id = :t"), {"t": task_id})
    refused = _cli("user", "delete", victim.email, input="n\n")
    assert refused.exit_code == 1 and "1 meme(s)" in refused.output
    assert "memes.scope_id" in _scope_rows(sessions, victim.scope_id)
    done = _cli("user", "delete", victim.email, "--yes")
    assert done.exit_code == 0, (done.output, done.exception)
    assert f"deleted {victim.email}: 1 meme(s)" in done.output
    assert _scope_rows(sessions, victim.scope_id) == {}
    missing = _cli("user", "delete", victim.email, "--yes")
    assert missing.exit_code == 4 and "no account" in missing.output


def test_deleting_an_account_while_a_backup_runs_keeps_its_files_until_the_backup_ends(auth_app, sessions, store):
    """The backup lease covers account deletion: a backup's snapshot may still list the account's
    blobs, so they stay while it holds its lease and go when it ends (as a deleted meme's do)."""
    import psycopg

    from mewdex.db.engine import get_engine
    from mewdex.library.accounts import delete_account_now
    from mewdex.storage import journal

    victim = auth_app.new("delbackup")
    add_meme(sessions, store, victim.scope_id, png(970), name="during.png")
    roots = _namespace_files(sessions, store, victim.scope_id)
    files = [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()]
    assert files
    url = get_engine().url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as lease:
        lease.execute("SELECT pg_advisory_lock(%s)", (journal.BACKUP_LEASE_KEY,))
        deleted = delete_account_now(sessions, victim.user_id)
        assert deleted.blobs == 0 and _scope_rows(sessions, victim.scope_id) == {}
        assert all(p.exists() for p in files), "removed while a backup held its lease"
        with sessions.begin() as session:  # storage recovery waits for the backup too
            assert journal.recover(session, store, older_than_seconds=0)["namespaces"] == 0
        assert all(p.exists() for p in files)
    with sessions.begin() as session:  # the backup ended (its lease went with its connection)
        assert journal.finish_deferred(session, store)["namespaces"] == 2
        left = session.execute(
            text("SELECT count(*) FROM platform_settings WHERE key = :k"),
            {"k": f"{journal.NAMESPACE_REMOVAL}{victim.scope_id}"},
        ).scalar_one()
    assert left == 0 and not any(p.exists() for p in files) and not any(p.exists() for p in roots)
