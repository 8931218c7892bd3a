"""Backups and restores (issue 34, item 1): a library with memes, a collection, a connector credential,
a webhook channel binding and a schedule is backed up by the real ``mewdex backup`` while uploads run,
restored by ``mewdex restore`` into a new data dir, served by ``mewdex serve`` on another port, and
answers the same; a second backup copies no blob twice; a damaged backup is refused by name. The
backups are encrypted with a key of the test's own (``MEWDEX_BACKUP_KEY_FILE``), restored with
``--key-file``; hostile backups: ``test_backup_hostile.py``.

One module-scoped setup (one backup, one restore, one server): the checks share it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, text

from channel_helpers import add_meme, image_bytes
from conftest import MEWDEX_BIN, TEST_ENV, client_for, drop_scope, http_ok, new_scope, wait_until
from fakes.webhook_receiver import WebhookReceiver
from s3_helpers import free_port


def mewdex_data_dir() -> Path:
    from mewdex.config import get_settings

    return get_settings().data_dir.resolve()


QUERIES = ["grumpy cat", "dancing", "office work"]
NAMES = ["grumpy cat", "cat in a box", "dancing dog", "office work meme", "sleepy cat at work"]
API_KEY = "sk-backup-test-0123456789"
#: The backup key of this module's backups (what an operator keeps elsewhere).
BACKUP_KEY = "5" * 64


def _key():
    from mewdex.backups.keys import parse_key

    return parse_key(BACKUP_KEY, "the test key")


def _cli(env: dict[str, str | None], *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """``mewdex ARGS`` with this process's environment and ``env`` (a None value: left out)."""
    merged = {**os.environ, **env, "COLUMNS": "200", "NO_COLOR": "1"}
    full = {k: v for k, v in merged.items() if v is not None}
    return subprocess.run([str(MEWDEX_BIN), *args], env=full, capture_output=True, text=True, timeout=timeout)


def _json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.stdout.strip(), f"no output (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _search(client, query: str) -> list[str]:
    r = client.post("/api/v1/search", json={"query": query, "n_results": 5})
    assert r.status_code == 200, r.text
    return [hit["id"] for hit in r.json()["results"]]


def _collections(client) -> dict[str, list[str]]:
    out = {}
    for brief in client.get("/api/v1/collections").json()["collections"]:
        full = client.get(f"/api/v1/collections/{brief['id']}").json()
        out[brief["name"]] = sorted(item["id"] for item in full["items"])
    return out


class Library:
    """The source library (a scope of the session's data dir) and what it answered before the backup."""

    def __init__(self, scope, memes, receiver, secret, dest, first, uploaded_during):
        self.scope, self.memes, self.receiver, self.secret = scope, memes, receiver, secret
        self.dest, self.first, self.uploaded_during = dest, first, uploaded_during
        self.searches: dict[str, list[str]] = {}
        self.collections: dict[str, list[str]] = {}
        self.schedules: list[str] = []


@pytest.fixture(scope="module")
def library(mewdex_env, sessions, store, tmp_path_factory):
    from mewdex.platform import media_urls
    from mewdex.providers import connectors

    receiver = WebhookReceiver().__enter__()
    allow = json.dumps([f"127.0.0.1:{receiver.port}"])
    os.environ["MEWDEX_EGRESS_ALLOW_HOSTS"] = allow
    key_file = tmp_path_factory.mktemp("backup-key") / "backup.key"  # pytest keeps only its last runs' folders
    key_file.write_text(BACKUP_KEY + "\n")
    os.environ["MEWDEX_BACKUP_KEY_FILE"] = str(key_file)
    from mewdex.config import get_settings

    get_settings.cache_clear()
    scope = new_scope(sessions, "bk")
    memes = {name: add_meme(sessions, store, scope, name) for name in NAMES}
    memes["dancing gif"] = add_meme(sessions, store, scope, "dancing cat gif", "gif")
    definition_name = f"backup-test-{uuid.uuid4().hex[:8]}"
    with sessions.begin() as session:
        connectors.create_definition(
            session,
            provider="openai_compatible",
            name=definition_name,
            config={"base_url": "https://llm.example.com/v1"},
            credentials={"api_key": API_KEY},
        )
    with client_for(scope) as client:
        made = client.post("/api/v1/channels/webhook", json={"url": receiver.url})
        assert made.status_code == 201, made.text
        secret = made.json()["secret"]
        job = client.post("/api/v1/schedules", json={"name": "早安", "prompt": "猫", "cron": "0 9 * * *"})
        assert job.status_code == 201, job.text
        brief = client.post("/api/v1/collections", json={"name": "cats"}).json()
        cats = [memes["grumpy cat"], memes["cat in a box"], memes["sleepy cat at work"]]
        assert client.post(f"/api/v1/collections/{brief['id']}/items", json={"meme_ids": cats}).status_code == 200
        searches = {q: _search(client, q) for q in QUERIES}
        signed_link = media_urls.sign(None, f"/media/{memes['grumpy cat']}", 3600)[0]
        assert client.get(signed_link).status_code == 200
        collections = _collections(client)
        schedules = [j["name"] for j in client.get("/api/v1/schedules").json()["items"]]
    assert all(searches.values()), searches

    # The backup runs in its own process while this one keeps uploading through the journaled path.
    dest = Path(tempfile.mkdtemp(prefix="mewdex-backup-dest-"))
    uploaded: list[str] = []
    stop = threading.Event()

    def upload() -> None:
        from mewdex.library.memes import add_image

        n = 0
        while not stop.is_set():
            n += 1
            result = add_image(
                sessions, store, scope, image_bytes(seed=10_000 + n), filename=f"during {n}.png", provenance={},
                process=False,
            )  # fmt: skip
            uploaded.append(result.meme_id)
            time.sleep(0.2)

    uploader = threading.Thread(target=upload, daemon=True)
    uploader.start()
    try:
        first = _json(_cli(mewdex_env.env, "backup", str(dest), "--json"))
    finally:
        stop.set()
        uploader.join(10)
    lib = Library(scope, memes, receiver, secret, dest, first, uploaded)
    lib.searches, lib.collections, lib.schedules = searches, collections, schedules
    lib.definition_name = definition_name  # type: ignore[attr-defined]
    lib.signed_link = signed_link  # type: ignore[attr-defined]
    lib.key_file = key_file  # type: ignore[attr-defined]
    yield lib
    receiver.__exit__(None, None, None)
    os.environ.pop("MEWDEX_EGRESS_ALLOW_HOSTS", None)
    os.environ.pop("MEWDEX_BACKUP_KEY_FILE", None)
    get_settings.cache_clear()
    with sessions.begin() as session:
        session.execute(text("DELETE FROM external_system_definitions WHERE name = :n"), {"n": definition_name})
    drop_scope(sessions, scope)
    shutil.rmtree(dest, ignore_errors=True)


@pytest.fixture(scope="module")
def restored(library):
    """The backup restored into a new data dir, served on another port (no login: the library's scope)."""
    from mewdex.db.embedded import stop

    data_dir = Path(tempfile.mkdtemp(prefix="mewdex-restored-"))
    env = {
        **TEST_ENV,
        "MEWDEX_DATA_DIR": str(data_dir),
        "MEWDEX_DEFAULT_SCOPE": library.scope.scope_id,
        "MEWDEX_AUTH": "none",
        "MEWDEX_EGRESS_ALLOW_HOSTS": json.dumps([f"127.0.0.1:{library.receiver.port}"]),
        "MEWDEX_BACKUP_KEY_FILE": None,  # restore is given the key: --key-file
    }
    summary = _json(_cli(env, "restore", str(library.dest), "--key-file", str(library.key_file), "--json", timeout=300))
    port = free_port()
    log = open(data_dir / "serve.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(MEWDEX_BIN), "serve", "--port", str(port), "--workers", "0"],
        env={k: v for k, v in {**os.environ, **env}.items() if v is not None},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, (data_dir / "serve.log").read_text()[-3000:]
        return http_ok(base + "/health", (200, 503), timeout=2)

    try:
        wait_until(up, timeout=180, interval=0.5, what="the restored server")
        with httpx.Client(base_url=base, timeout=60) as client:
            yield {"summary": summary, "client": client, "env": env, "data_dir": data_dir}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        stop(data_dir.resolve() / "pgdata")
        shutil.rmtree(data_dir, ignore_errors=True)


def test_backup_covers_the_library_and_its_keys_encrypted(library, sessions):
    from mewdex.backups.archive import _Quiet
    from mewdex.backups.restore import verify
    from mewdex.backups.targets import DirTarget, read_manifest

    first = library.first
    manifest = read_manifest(DirTarget(library.dest), first["snapshot"], _key())
    assert manifest["schema_revision"] == first["schema_revision"] and manifest["mewdex_version"]
    assert manifest["encrypted"] is True and first["encrypted"] is True
    assert {"database.dump", "secret.keys", "keys/media_signing.json"} <= set(manifest["files"])
    with tempfile.TemporaryDirectory() as tmp:
        local = verify(DirTarget(library.dest), first["snapshot"], manifest, Path(tmp), _Quiet(), _key())
        for rel, facts in manifest["files"].items():
            assert hashlib.sha256(local[rel].read_bytes()).hexdigest() == facts["sha256"], rel
            stored = (library.dest / first["snapshot"] / rel).read_bytes()  # what DEST holds: not the file
            assert stored.startswith(b"MDXBKE2") and local[rel].read_bytes()[:64] not in stored, rel
    secret_keys = (mewdex_data_dir() / "secret.keys").read_bytes()
    for path in library.dest.rglob("*"):  # neither the key ring nor a blob's name is readable in DEST
        if path.is_file():
            assert secret_keys[:32] not in path.read_bytes(), path
    stored_names = {p.name for p in (library.dest / "data").rglob("*") if p.is_file()}
    assert stored_names and not any(b["key"][:64] in n for b in manifest["blobs"] for n in stored_names)
    keys = {b["key"] for b in manifest["blobs"]}
    with sessions.begin() as session:
        stored = session.execute(
            text("SELECT storage_key FROM memes WHERE id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": list(library.memes.values())},
        ).scalars()
        assert set(stored) <= keys
    assert first["blobs"]["missing"] == 0 and first["blobs"]["copied"] + first["blobs"]["reused"] == len(keys)
    assert library.uploaded_during, "uploads ran while the backup did"


def test_restored_library_answers_the_same(library, restored, sessions, store):
    from mewdex.db.models import Meme

    client = restored["client"]
    assert restored["summary"]["migrated_to"] == library.first["schema_revision"]
    assert {q: _search(client, q) for q in QUERIES} == library.searches
    assert _collections(client) == library.collections
    assert [j["name"] for j in client.get("/api/v1/schedules").json()["items"]] == library.schedules
    with sessions.begin() as session:
        source = {
            str(m.id): m for m in session.execute(select(Meme).where(Meme.scope_id == library.scope.scope_id)).scalars()
        }
    listed = client.get("/api/v1/memes", params={"limit": 200}).json()
    restored_ids = {m["id"] for m in listed["items"]}
    assert listed["next_cursor"] is None
    assert set(library.memes.values()) <= restored_ids <= set(source)
    assert client.get(library.signed_link).status_code == 200, "the media signing keys came back"
    for meme_id in restored_ids:  # every meme of the snapshot came back with its file, uploads included
        media = client.get(f"/media/{meme_id}")
        assert media.status_code == 200, (meme_id, media.text)
        assert hashlib.sha256(media.content).hexdigest() == source[meme_id].sha256


SECRETS_SCRIPT = """
import hashlib, json, sys
from sqlalchemy import select
from mewdex.channels import bindings
from mewdex.channels.webhook import adapter as webhook
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import ChannelBinding, ExternalSystemDefinition
from mewdex.providers import connectors
with get_sessionmaker().begin() as session:
    named = ExternalSystemDefinition.name == sys.argv[1]
    d = session.execute(select(ExternalSystemDefinition).where(named)).scalar_one()
    key = connectors._open_all(d.credentials, connectors._definition_aad(d.definition_id))["api_key"]
    row = session.execute(select(ChannelBinding).where(ChannelBinding.scope_id == sys.argv[2])).scalar_one()
    binding = bindings.view(row)
webhook.ADAPTER.send_text(binding, webhook.ADAPTER.target_of(binding), "restored")
from mewdex.runtime.doctor import check_secrets
print(json.dumps({"api_key_sha256": hashlib.sha256(key.encode()).hexdigest(), "secrets": check_secrets()}))
"""


def test_restored_secrets_decrypt_and_the_webhook_signs_with_the_same_secret(library, restored):
    library.receiver.secret = library.secret
    before = len(library.receiver.requests)
    proc = subprocess.run(
        [str(MEWDEX_BIN.parent / "python"), "-c", SECRETS_SCRIPT, library.definition_name, library.scope.scope_id],
        env={k: v for k, v in {**os.environ, **restored["env"]}.items() if v is not None},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer = _json(proc)
    assert answer["api_key_sha256"] == hashlib.sha256(API_KEY.encode()).hexdigest()
    assert answer["secrets"]["status"] == "ok", answer["secrets"]  # mewdex doctor's check: every sealed secret
    assert int(answer["secrets"]["message"].split()[0]) >= 2
    [request] = library.receiver.requests[before:]
    assert request["verdict"] == "ok", request
    assert library.receiver.events[-1]["data"] == {"text": "restored"}


def test_second_backup_copies_only_new_blobs(library, sessions, store):
    from mewdex.backups.snapshot import backup

    blobs_dir = library.dest / "data"
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in blobs_dir.rglob("*") if p.is_file()}
    new_id = add_meme(sessions, store, library.scope, "a meme after the first backup")
    second = backup(library.dest)
    after = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in blobs_dir.rglob("*") if p.is_file()}
    assert all(after[p] == v for p, v in before.items()), "a blob of the first backup was written again"
    new_files = set(after) - set(before)
    assert second["blobs"]["copied"] == len(new_files) >= 1
    assert second["blobs"]["reused"] == second["blobs"]["total"] - second["blobs"]["copied"]
    from mewdex.db.scopes import storage_namespace

    with sessions.begin() as session:
        stored_key = session.execute(text("SELECT storage_key FROM memes WHERE id = :i"), {"i": new_id}).scalar_one()
        namespace = storage_namespace(session, library.scope.scope_id)
    assert _key().blob_name(str(namespace), stored_key) in {p.name for p in new_files}
    assert second["snapshot"] != library.first["snapshot"]


def test_restore_refuses_damage_a_newer_backup_a_wrong_key_and_a_full_target(library, restored):
    from mewdex.backups.archive import BackupError, seal_manifest
    from mewdex.backups.restore import restore
    from mewdex.backups.targets import DirTarget, read_manifest

    snapshot = library.dest / library.first["snapshot"]
    with pytest.raises(BackupError) as full:  # this process's data dir holds data: refused without --force
        restore(snapshot)
    assert full.value.code == "restore_target_not_empty" and "--force" in full.value.message

    copy = Path(tempfile.mkdtemp(prefix="mewdex-damaged-"))
    key_args = ("--key-file", str(library.key_file))
    try:
        shutil.copytree(library.dest, copy / "dest")
        copied = copy / "dest" / snapshot.name
        manifest = read_manifest(DirTarget(library.dest), snapshot.name, _key())
        manifest["schema_revision"] = "9999_from_the_future"
        envelope = json.loads((snapshot / "manifest.json").read_text())
        envelope["body"] = __import__("base64").b64encode(json.dumps(manifest).encode()).decode()
        envelope["encrypted"] = False  # edited without the key: refused before anything in it is used
        (copied / "manifest.json").write_text(json.dumps(envelope))
        with pytest.raises(BackupError) as forged:
            restore(copied)
        assert forged.value.code == "backup_unauthenticated"
        (copied / "manifest.json").write_bytes(seal_manifest(_key(), snapshot.name, manifest, encrypted=True))
        with pytest.raises(BackupError) as newer:  # the key's holder wrote it: authenticated, then refused
            restore(copied)
        assert newer.value.code == "backup_too_new" and "upgrade mewdex first" in newer.value.message

        shutil.copyfile(snapshot / "manifest.json", copied / "manifest.json")
        wrong = copy / "wrong.key"
        wrong.write_text("6" * 64)
        other = _cli(restored["env"], "restore", str(copied), "--force", "--key-file", str(wrong), "--json")
        assert other.returncode == 1 and _json(other)["error"]["code"] == "backup_unauthenticated", other.stdout

        dump = copied / "database.dump"
        data = bytearray(dump.read_bytes())
        data[len(data) // 2] ^= 0xFF
        dump.write_bytes(bytes(data))
        damaged = _cli(restored["env"], "restore", str(copied), "--force", *key_args, "--json")
        error = _json(damaged)["error"]
        assert damaged.returncode == 1 and error["code"] == "backup_corrupted", damaged.stdout
        assert f"{snapshot.name}/database.dump" in error["message"]
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    in_use = _cli(restored["env"], "restore", str(snapshot), "--force", *key_args, "--json")  # its server still runs
    assert in_use.returncode == 1 and _json(in_use)["error"]["code"] == "restore_target_in_use"
    assert "mewdex serve:" in _json(in_use)["error"]["message"]
    assert restored["client"].get("/api/v1/memes").status_code == 200, "a refused restore touched nothing"


def test_blob_deletion_waits_for_a_running_backup(library, sessions, store):
    """The backup lease: a meme deleted while a backup runs keeps its file until the backup ends."""
    import psycopg

    from mewdex.db.engine import get_engine
    from mewdex.db.scopes import storage_namespace
    from mewdex.library import memes
    from mewdex.storage import journal

    meme_id = add_meme(sessions, store, library.scope, "deleted during a backup")
    with sessions.begin() as session:
        key = session.execute(text("SELECT storage_key FROM memes WHERE id = :i"), {"i": meme_id}).scalar_one()
        namespace = storage_namespace(session, library.scope.scope_id)
    url = get_engine().url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as lease:
        lease.execute("SELECT pg_advisory_lock(%s)", (journal.BACKUP_LEASE_KEY,))
        memes.delete(sessions, store, library.scope, uuid.UUID(meme_id))
        assert store.exists(namespace, key), "removed while a backup held its lease"
        with sessions.begin() as session:
            counts = journal.recover(session, store, older_than_seconds=0)
        assert counts["deferred"] >= 1 and store.exists(namespace, key)
        lease.execute("SELECT pg_advisory_unlock(%s)", (journal.BACKUP_LEASE_KEY,))  # as the backup's release does
    with sessions.begin() as session:
        assert journal.finish_deferred(session, store)["completed"] >= 1
        states = session.execute(
            text("SELECT status FROM storage_operations WHERE source_key = :k AND operation_type = 'delete'"),
            {"k": key},
        ).scalars()
        assert set(states) == {"completed"}
    assert not store.exists(namespace, key)


def test_a_backup_missing_a_file_names_it_restores_the_rest_and_shows_on_health_and_doctor(
    library, mewdex_env, sessions, store
):
    """A blob the database references but the store lost: the snapshot is written without it and
    names it (``missing_blobs``; its manifest verifies, so it restores), the result is ``incomplete``
    on /health, the admin page and ``mewdex doctor``, and the CLI exits 1 saying what fixes it."""
    import io

    from mewdex.backups.archive import _Quiet
    from mewdex.backups.restore import verify
    from mewdex.backups.snapshot import backup
    from mewdex.backups.status import LAST_BACKUP_SETTING
    from mewdex.backups.targets import DirTarget, read_manifest
    from mewdex.db.scopes import storage_namespace
    from mewdex.platform.instance import get_setting, set_setting
    from mewdex.runtime import doctor

    meme_id = add_meme(sessions, store, library.scope, "a meme whose file was lost")
    with sessions.begin() as session:
        key = session.execute(text("SELECT storage_key FROM memes WHERE id = :i"), {"i": meme_id}).scalar_one()
        namespace = storage_namespace(session, library.scope.scope_id)
        previous = get_setting(session, LAST_BACKUP_SETTING, None)
    with store.open(namespace, key) as handle:
        data = handle.read()
    store.delete(namespace, key)
    dest = Path(tempfile.mkdtemp(prefix="mewdex-missing-"))
    try:
        summary = backup(dest)
        assert [(b["namespace"], b["key"]) for b in summary["missing_blobs"]] == [(namespace, key)]
        assert summary["blobs"]["missing"] == 1
        manifest = read_manifest(DirTarget(dest), summary["snapshot"], _key())
        assert key not in {b["key"] for b in manifest["blobs"]} and manifest["missing_blobs"][0]["key"] == key
        with tempfile.TemporaryDirectory() as tmp:  # what restore checks first: every listed file is there
            local = verify(DirTarget(dest), summary["snapshot"], manifest, Path(tmp), _Quiet(), _key())
            assert "database.dump" in local

        with client_for() as client:
            health = client.get("/health").json()
            last = health["backup"]["last"]
            assert last["status"] == "incomplete" and last["code"] == "backup_blobs_missing"
            assert f"{namespace}/{key}" in last["message"] and last["last_ok_at"]
            assert any(w.startswith("backup_incomplete: backup_blobs_missing") for w in health["warnings"])
            assert 'data-status="incomplete"' in client.get("/admin", headers={"Accept-Language": "en"}).text
            assert "不完整" in client.get("/admin", headers={"Accept-Language": "zh-CN"}).text
        check = doctor.check_backups()
        assert check["status"] == "problem" and key in check["message"] and "mewdex backup" in check["fix"]

        cli = _cli(mewdex_env.env, "backup", str(dest), "--json")
        assert cli.returncode == 1 and _json(cli)["missing_blobs"][0]["key"] == key, cli.stderr[-2000:]
        plain = _cli(mewdex_env.env, "backup", str(dest))
        said = " ".join(plain.stderr.split())
        assert plain.returncode == 1 and "incomplete: 1 file(s)" in said and "mewdex thumbnails reconcile" in said, said
    finally:
        store.put(namespace, key, io.BytesIO(data))
        shutil.rmtree(dest, ignore_errors=True)
        with sessions.begin() as session:  # later modules of this process see the result they had
            if previous is None:
                session.execute(text("DELETE FROM platform_settings WHERE key = :k"), {"k": LAST_BACKUP_SETTING})
            else:
                set_setting(session, LAST_BACKUP_SETTING, previous)


def test_pruning_runs_while_no_other_backup_can_write_the_destination(library, monkeypatch):
    """``--keep`` removes the blobs only dropped snapshots used; it does so while the backup still
    holds its one-at-a-time lock, so a second backup (which may be copying or reusing those very
    blobs in the same DEST) is refused meanwhile instead of losing them."""
    from mewdex.backups import snapshot as backups
    from mewdex.backups.archive import SNAPSHOT_NAME

    dest = Path(tempfile.mkdtemp(prefix="mewdex-prune-"))
    pruning, go_on = threading.Event(), threading.Event()
    real_prune = backups.prune

    def slow_prune(*args):
        pruning.set()
        assert go_on.wait(60)
        return real_prune(*args)

    try:
        backups.backup(dest)
        monkeypatch.setattr(backups, "prune", slow_prune)
        outcome: dict = {}
        first = threading.Thread(target=lambda: outcome.update(backups.backup(dest, keep=1)))
        first.start()
        try:
            assert pruning.wait(120), "the backup never reached its pruning"
            with pytest.raises(backups.BackupError) as refused:
                backups.backup(dest)
            assert refused.value.code == "backup_running"
        finally:
            go_on.set()
            first.join(120)
        assert len(outcome["removed_snapshots"]) == 1
        assert [p.name for p in dest.iterdir() if SNAPSHOT_NAME.fullmatch(p.name)] == [outcome["snapshot"]]
    finally:
        shutil.rmtree(dest, ignore_errors=True)
