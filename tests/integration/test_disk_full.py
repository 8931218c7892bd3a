"""A full disk and killed writers (issue 20 point 5): 507 with per-file results, resumable CLI imports,
a clear end when the database goes away, /health's low-space warning, staging cleaned at start-up."""

from __future__ import annotations

import errno
import io
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from PIL import Image
from sqlalchemy import select

from conftest import MEWDEX_BIN, TEST_ENV, client_for
from mewdex.cli.common import ExitCode


def png(seed: int) -> bytes:
    """A small PNG of its own (the seed decides the pixels)."""
    image = Image.new("RGB", (16, 16), (seed % 256, (seed // 256) % 256, 77))
    image.putpixel((0, 0), (seed % 7, seed % 11, seed % 13))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def unique_pngs(count: int) -> list[bytes]:
    base = uuid.uuid4().int % 60000
    return [png(base + i) for i in range(count)]


def test_upload_on_a_full_disk_answers_507_with_what_was_stored(scope, sessions, store, monkeypatch):
    from hashlib import sha256

    from mewdex.db.models import Meme, StorageOperation
    from mewdex.storage.blobs import LocalBlobStore

    files = unique_pngs(3)
    full_for = sha256(files[1]).hexdigest()
    real_put = LocalBlobStore.put

    def put(self, namespace, key, data):
        if key.startswith(full_for):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_put(self, namespace, key, data)

    monkeypatch.setattr(LocalBlobStore, "put", put)
    with client_for(scope) as api:
        parts = [("files", (f"f{i}.png", data, "image/png")) for i, data in enumerate(files)]
        r = api.post("/api/v1/memes", files=parts)
    assert r.status_code == 507, r.text
    body = r.json()
    assert body["error"]["code"] == "insufficient_storage"
    assert body["error"]["details"] == {"stored": 2, "not_stored": 1}
    assert [x["status"] for x in body["results"]] == ["created", "failed", "created"]
    failed = body["results"][1]
    assert failed["meme"] is None and failed["error"]["code"] == "insufficient_storage"
    assert failed["error"]["status"] == 507
    with sessions.begin() as session:
        stored = set(session.execute(select(Meme.sha256).where(Meme.scope_id == scope.scope_id)).scalars())
        assert stored == {sha256(files[0]).hexdigest(), sha256(files[2]).hexdigest()}
        # the failed upload's journal entry is compensated at once, not left for recovery
        states = session.execute(
            select(StorageOperation.status).where(
                StorageOperation.scope_id == scope.scope_id, StorageOperation.target_key.startswith(full_for)
            )
        ).scalars()
        assert "prepared" not in set(states)


def test_health_warns_when_free_space_is_low(mewdex_env, settings_env):
    settings_env(MEWDEX_AUTH="none")  # the details are for admins: here the local admin of no-login mode
    with client_for() as client:
        settings_env(MEWDEX_DISK_LOW_BYTES=str(10**18))
        low = client.get("/health")
        settings_env(MEWDEX_DISK_LOW_BYTES="0")
        fine = client.get("/health")
    assert low.status_code == 200
    assert low.json()["disk"]["low"] is True and low.json()["disk"]["free_bytes"] > 0
    assert any(w.startswith("disk_space_low") for w in low.json()["warnings"])
    assert fine.json()["disk"]["low"] is False  # other warnings (a failed backup of another test) are not ours
    assert not any(w.startswith("disk_space_low") for w in fine.json()["warnings"])


def _folder(tmp_path: Path, count: int) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    for i, data in enumerate(unique_pngs(count)):
        (folder / f"img{i:03d}.png").write_bytes(data)
    return folder


def test_cli_import_on_a_full_disk_reports_the_failed_files_and_resumes(mewdex_env, scope, tmp_path, monkeypatch):
    folder = _folder(tmp_path, 4)
    monkeypatch.setenv("MEWDEX_FAILPOINT", "disk_full_after:2")  # the CLI's 3rd and 4th blob writes fail
    first = mewdex_env.cli("import", str(folder), scope=scope.scope_id)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "Traceback" not in first.stderr
    assert "2 created" in first.stdout and "2 failed" in first.stdout
    assert "failed" in first.stdout and "img002.png" in first.stdout and "img003.png" in first.stdout
    assert "insufficient_storage" in first.stdout
    assert "run the same import again" in " ".join(first.stderr.split())
    assert not list((mewdex_env.data_dir / "blobs" / ".staging").glob(f"{os.getpid()}-*"))

    monkeypatch.delenv("MEWDEX_FAILPOINT")
    again = mewdex_env.cli("import", str(folder), scope=scope.scope_id)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 created" in again.stdout and "2 duplicates" in again.stdout


def test_cli_import_whose_database_goes_away_ends_with_a_message(tmp_path):
    from mewdex.db.embedded import stop

    data_dir = tmp_path / "data"
    pgdata = data_dir.resolve() / "pgdata"
    env = {**os.environ, **TEST_ENV, "MEWDEX_DATA_DIR": str(data_dir), "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("MEWDEX_DATABASE_URL", None)
    env.pop("MEWDEX_DEFAULT_SCOPE", None)
    try:
        subprocess.run([str(MEWDEX_BIN), "migrate"], env=env, check=True, capture_output=True, timeout=300)
        folder = _folder(tmp_path, 80)
        proc = subprocess.Popen(
            [str(MEWDEX_BIN), "import", str(folder), "--json"],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout.readline().startswith("{")  # one file imported: now the database dies
        postmaster = int((pgdata / "postmaster.pid").read_text().splitlines()[0])
        os.kill(postmaster, signal.SIGKILL)
        out, errors = proc.communicate(timeout=120)
        assert proc.returncode == ExitCode.UNAVAILABLE, out[-2000:] + errors[-2000:]  # the database went away
        assert len(out.splitlines()) < 79, "the import finished before the database was killed"
        assert "Traceback" not in errors, errors[-3000:]
        assert "the database became unavailable during the import" in " ".join(errors.split())
    finally:
        stop(pgdata)


SLOW_WRITER = """
import sys, time
from mewdex.storage.blobs import LocalBlobStore

class Slow:
    calls = 0
    def read(self, size):
        Slow.calls += 1
        if Slow.calls == 1:
            return b"x" * 1000
        print("staged", flush=True)
        time.sleep(600)

LocalBlobStore(sys.argv[1]).put("00000000-0000-0000-0000-000000000000", "0" * 64 + ".png", Slow())
"""


def test_startup_removes_the_partial_staging_file_of_a_killed_writer(store):
    staging = store.root / ".staging"
    before = set(staging.iterdir())
    writer = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(store.root)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "staged"
        partial = set(staging.iterdir()) - before
        assert len(partial) == 1
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(10)
    (partial_file,) = partial
    assert partial_file.exists()  # a kill leaves it; fresh, so the hour-old rule would keep it
    with client_for() as client:
        client.get("/health")
    assert not partial_file.exists()


def test_upload_whose_spool_hits_a_full_disk_is_507(scope, monkeypatch):
    from mewdex.web import uploads

    class FullSpool(io.BytesIO):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(uploads.tempfile, "SpooledTemporaryFile", lambda **_: FullSpool())
    with client_for(scope) as api:
        r = api.post("/api/v1/memes", files=[("files", ("a.png", png(1), "image/png"))])
    assert r.status_code == 507, r.text
    assert r.json()["error"]["code"] == "insufficient_storage"
