"""The real ``mewdex`` CLI in subprocesses on the session's data dir (each test in its own scope)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from conftest import MEWDEX_BIN, case_file, client_for, wait_until
from it_helpers import counts
from mewdex.cli.common import ExitCode

STATUS_KEYS = {"queued", "running", "succeeded", "failed"}


def json_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def make_folder(root: Path) -> Path:
    (root / "reactions").mkdir(parents=True)
    shutil.copyfile(case_file("img04_palette_trns.png"), root / "reactions" / "palette.png")
    shutil.copyfile(case_file("img04_palette_trns.png"), root / "palette_copy.png")
    shutil.copyfile(case_file("img01_cmyk_exif6.jpg"), root / "reactions" / "cmyk.png")  # a JPEG named .png
    shutil.copyfile(case_file("img09_truncated.jpg"), root / "truncated.jpg")
    shutil.copyfile(case_file("job02_poison_text.png"), root / "poison.png")
    return root


def test_import_json_lines(mewdex_env, scope, sessions, tmp_path):
    folder = make_folder(tmp_path / "in")
    proc = mewdex_env.cli("import", str(folder), "--json", scope=scope.scope_id)
    assert proc.returncode == 0, proc.stderr
    lines = json_lines(proc.stdout)
    assert all(set(line) == {"path", "status", "meme_id", "error"} for line in lines)
    by_name = {Path(line["path"]).name: line for line in lines}
    assert set(by_name) == {"palette.png", "palette_copy.png", "cmyk.png", "truncated.jpg", "poison.png"}
    assert by_name["truncated.jpg"] | {"path": None} == {
        "path": None,
        "status": "skipped",
        "meme_id": None,
        "error": "image_corrupt",
    }
    assert by_name["poison.png"]["status"] == "skipped" and by_name["poison.png"]["error"] == "unsupported_media_type"
    statuses = sorted(line["status"] for line in lines)
    assert statuses == ["created", "created", "duplicate", "skipped", "skipped"]
    copies = [by_name["palette.png"], by_name["palette_copy.png"]]
    assert copies[0]["meme_id"] == copies[1]["meme_id"]
    assert counts(sessions, scope) == {"memes": 2, "jobs": 2, "tasks": 2, "open_ops": 0, "blobs": 2}


def test_import_human_output_lists_skipped_files(mewdex_env, scope, tmp_path):
    folder = make_folder(tmp_path / "in")
    proc = mewdex_env.cli("import", str(folder), scope=scope.scope_id)
    assert proc.returncode == 0, proc.stderr
    assert "2 created" in proc.stdout and "1 duplicates" in proc.stdout and "2 skipped" in proc.stdout
    assert "image_corrupt" in proc.stdout and "unsupported_media_type" in proc.stdout


def test_status_json_shape(mewdex_env, scope, tmp_path):
    folder = make_folder(tmp_path / "in")
    mewdex_env.cli("import", str(folder), "--json", scope=scope.scope_id, check=True)
    proc = mewdex_env.cli("status", "--json", scope=scope.scope_id, check=True)
    body = json.loads(proc.stdout)
    assert body["memes"] == 2
    assert set(body["stages"]) == {"visual", "agent", "text_embedding"}
    for stage in body["stages"].values():
        assert STATUS_KEYS <= set(stage) and all(isinstance(v, int) for v in stage.values())
    assert body["stages"]["agent"]["queued"] == 2 and body["stages"]["agent"]["succeeded"] == 0


def test_status_json_shape_of_an_empty_library(mewdex_env, scope):
    body = json.loads(mewdex_env.cli("status", "--json", scope=scope.scope_id, check=True).stdout)
    assert body["memes"] == 0
    assert {"visual", "agent", "text_embedding"} <= set(body["stages"])


def test_search_in_an_empty_library(mewdex_env, scope):
    proc = mewdex_env.cli("search", "老板又让我周末加班", "--json", scope=scope.scope_id)
    assert proc.returncode == 0, proc.stderr
    body = json.loads(proc.stdout)
    assert body["results"] == [] and isinstance(body["took_ms"], (int, float))
    assert "still being processed" not in proc.stderr


def test_search_says_when_memes_are_still_being_processed(mewdex_env, scope, tmp_path):
    """Right after an import nothing is searchable yet: the CLI says so (on stderr; --json stays JSON)."""
    mewdex_env.cli("import", str(make_folder(tmp_path / "in")), "--json", scope=scope.scope_id, check=True)
    proc = mewdex_env.cli("search", "palette", "--json", scope=scope.scope_id, check=True)
    assert isinstance(json.loads(proc.stdout)["results"], list)
    assert "still being processed" in proc.stderr and "mewdex status" in proc.stderr


def test_a_command_where_no_library_is_says_it_made_a_new_one(tmp_path):
    """Run from another folder, the default ./.mewdex is another, empty library: the command says so."""
    from conftest import TEST_ENV

    data_dir = tmp_path / "elsewhere" / ".mewdex"
    env = {**os.environ, **TEST_ENV, "MEWDEX_DATA_DIR": str(data_dir), "COLUMNS": "300", "NO_COLOR": "1"}
    env.pop("MEWDEX_DATABASE_URL", None)
    env.pop("MEWDEX_DEFAULT_SCOPE", None)

    def status():
        return subprocess.run(
            [str(MEWDEX_BIN), "status", "--json"], env=env, capture_output=True, text=True, timeout=300, check=True
        )

    try:
        first = status()
        assert json.loads(first.stdout)["memes"] == 0
        assert f"no library was at {data_dir}" in " ".join(first.stderr.split())
        assert "no library" not in status().stderr  # the second time it is the library there
    finally:
        subprocess.run([str(MEWDEX_BIN), "db", "stop", "--force"], env=env, capture_output=True, timeout=120)


@pytest.mark.parametrize("args", [["search", "   "], ["search", "x" * 501], ["search", "x", "-n", "51"]])
def test_search_rejects_bad_arguments(mewdex_env, scope, args):
    proc = mewdex_env.cli(*args, scope=scope.scope_id)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_import_of_a_missing_path(mewdex_env, scope, tmp_path):
    proc = mewdex_env.cli("import", str(tmp_path / "nope"), scope=scope.scope_id)
    assert proc.returncode == 2 and "no such file or folder" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_concurrent_imports_of_one_folder(mewdex_env, scope, sessions, tmp_path):
    """Two processes import the same folder at once: each file becomes exactly one meme, nothing is left half-done."""
    folder = tmp_path / "in"
    names = [
        "img01_cmyk_exif6.jpg",
        "img02_gray16_ramp.png",
        "img03_exif6.jpg",
        "img03_exif6.png",
        "img04_palette_trns.png",
        "img05_ocr_hello_transparent.png",
        "img06_animated_3frames.webp",
        "img09_full_reference.jpg",
    ]
    for sub in ("a", "b"):
        (folder / sub).mkdir(parents=True)
        for name in names:
            shutil.copyfile(case_file(name), folder / sub / name)
    env = {**os.environ, **mewdex_env.env, "MEWDEX_DEFAULT_SCOPE": scope.scope_id}
    procs = [
        subprocess.Popen(
            [str(MEWDEX_BIN), "import", str(folder), "--json"],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    runs = [json_lines(o[0]) for o in outs]
    ids_by_file = {}
    for lines in runs:
        assert len(lines) == 2 * len(names)
        for line in lines:
            assert line["status"] in ("created", "duplicate"), line
            ids_by_file.setdefault(Path(line["path"]).name, set()).add(line["meme_id"])
    assert all(len(ids) == 1 for ids in ids_by_file.values()), ids_by_file  # a/x and b/x: the same meme
    created = sum(line["status"] == "created" for lines in runs for line in lines)
    assert created == len(names)
    assert counts(sessions, scope) == {
        "memes": len(names),
        "jobs": len(names),
        "tasks": len(names),
        "open_ops": 0,
        "blobs": len(names),
    }


def test_import_wait_processes_everything(mewdex_env, scope, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copyfile(case_file("img05_ocr_hello_transparent.png"), folder / "hello.png")
    proc = mewdex_env.cli("import", str(folder), "--wait", "--json", scope=scope.scope_id, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    body = json.loads(mewdex_env.cli("status", "--json", scope=scope.scope_id, check=True).stdout)
    assert body["stages"]["agent"] == {"queued": 0, "running": 0, "succeeded": 1, "failed": 0}
    assert body["stages"]["text_embedding"]["succeeded"] == 1
    found = json.loads(mewdex_env.cli("search", "hello", "--json", scope=scope.scope_id, check=True).stdout)
    assert [r["display_name"] for r in found["results"]] == ["hello"]
    # The table (issue 19, point 5): rank, name, a snippet of the text and a link with the full id; no scores.
    table = mewdex_env.cli("search", "hello", scope=scope.scope_id, check=True).stdout
    assert "score" not in table and f"/memes/{found['results'][0]['id']}" in table.replace("\n", "").replace("│", "")
    assert "hello" in table.lower()


# --- crash recovery of interrupted uploads -----------------------------------------------------


def interrupted_upload(sessions, store, scope, data: bytes):
    """What a `mewdex import` killed between writing the blob and committing its meme row leaves behind."""
    import hashlib

    from mewdex.db.models import Scope
    from mewdex.storage import journal

    sha = hashlib.sha256(data).hexdigest()
    key = sha + ".png"
    with sessions.begin() as session:
        namespace = session.get(Scope, scope.scope_id).storage_namespace
        op = journal.prepare_upload(session, scope.scope_id, key, sha, len(data))
    store.put(namespace, key, data)
    with sessions.begin() as session:  # the crash happened minutes ago
        session.execute(
            text("UPDATE storage_operations SET updated_at = now() - interval '10 minutes' WHERE id = :i"), {"i": op.id}
        )
    return op.id, namespace, key


def op_status(sessions, op_id) -> str:
    with sessions.begin() as session:
        return session.execute(text("SELECT status FROM storage_operations WHERE id = :i"), {"i": op_id}).scalar_one()


def test_serve_startup_recovers_an_interrupted_upload(sessions, store, scope):
    op_id, namespace, key = interrupted_upload(sessions, store, scope, case_file("img04_palette_trns.png").read_bytes())
    assert store.exists(namespace, key)
    with client_for() as client:
        wait_until(lambda: op_status(sessions, op_id) != "prepared", 20, what="recovery of the interrupted upload")
        assert client.get("/health").status_code == 200
    assert op_status(sessions, op_id) == "compensated"
    assert not store.exists(namespace, key)  # the orphan blob is gone


def test_cli_import_recovers_an_interrupted_upload(mewdex_env, sessions, store, scope, tmp_path):
    op_id, namespace, key = interrupted_upload(sessions, store, scope, case_file("img04_palette_trns.png").read_bytes())
    (tmp_path / "in").mkdir()
    shutil.copyfile(case_file("img01_cmyk_exif6.jpg"), tmp_path / "in" / "other.jpg")
    mewdex_env.cli("import", str(tmp_path / "in"), "--json", scope=scope.scope_id, check=True)
    assert op_status(sessions, op_id) != "prepared"
    assert not store.exists(namespace, key)


def test_serve_startup_cleans_stale_staging_files(store):
    stale = store.root / ".staging" / "0123456789abcdef0123456789abcdef.tmp"
    stale.write_bytes(b"half a blob")
    old = time.time() - timedelta(hours=2).total_seconds()
    os.utime(stale, (old, old))
    try:
        with client_for() as client:
            client.get("/health")
            wait_until(lambda: not stale.exists(), 10, 0.05, "start-up to remove the stale staging file")
        assert not stale.exists()
    finally:
        stale.unlink(missing_ok=True)


def test_serve_on_a_busy_port_says_so_before_anything_else(mewdex_env):
    """Issue 19, point 6: a second `make run` reports the busy port first (no "serving on" line)."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = mewdex_env.cli("serve", "--port", str(port), timeout=60)
    assert proc.returncode == ExitCode.CONFLICT  # the port is in use
    assert proc.stdout == ""
    assert f"port {port} on 127.0.0.1 is already in use" in proc.stderr


def test_db_stop_refuses_while_the_database_is_in_use(mewdex_env, sessions):
    """Issue 19, point 6: `mewdex db stop` names the processes using the database and stops nothing."""
    with sessions.begin() as session:
        session.execute(text("SELECT 1"))  # this test process holds a connection
    proc = mewdex_env.cli("db", "stop", timeout=60)
    assert proc.returncode == ExitCode.CONFLICT, proc.stdout + proc.stderr  # the database is in use
    assert "in use by" in proc.stderr and f":{os.getpid()}" in proc.stderr
    assert "stopped" not in proc.stdout
    with sessions.begin() as session:  # still running
        assert session.execute(text("SELECT 1")).scalar_one() == 1


def test_import_says_nothing_processes_the_queue_and_counts_ignored_files(mewdex_env, scope, tmp_path):
    """Issue 19, point 5: without --wait and with no server or worker, the import says the memes will wait
    and how to start processing; non-image files are "ignored", not "skipped"."""
    folder = make_folder(tmp_path / "in")
    (folder / "metadata.jsonl").write_text('{"a": 1}\n')
    proc = mewdex_env.cli("import", str(folder), scope=scope.scope_id)
    assert proc.returncode == 0, proc.stderr
    assert "1 ignored" in proc.stdout and "2 skipped" in proc.stdout
    assert "metadata.jsonl" not in proc.stdout
    assert "nothing is processing the queue" in proc.stderr and "mewdex serve" in proc.stderr


def test_repair_names_command(mewdex_env, scope, sessions, tmp_path):
    """Issue 19, point 1: `mewdex repair-names` renames generic names from the folder, never manual ones."""
    from it_helpers import meme
    from mewdex.db.models import Meme

    (tmp_path / "in" / "drake").mkdir(parents=True)
    shutil.copyfile(case_file("img04_palette_trns.png"), tmp_path / "in" / "drake" / "default.png")
    lines = json_lines(
        mewdex_env.cli("import", str(tmp_path / "in"), "--json", scope=scope.scope_id, check=True).stdout
    )
    meme_id = lines[0]["meme_id"]
    with sessions.begin() as session:  # as imported before names came from meaning
        row = session.get(Meme, __import__("uuid").UUID(meme_id))
        row.display_name, row.name_source = "default", "uploaded"
    proc = mewdex_env.cli("repair-names", scope=scope.scope_id, check=True)
    assert "renamed 1 of 1" in proc.stdout
    assert meme(sessions, scope, meme_id).display_name == "drake"


def test_version_help_and_range_errors(mewdex_env):
    """Issue 19, point 5: --version, help without type tags, a range error that names the option."""
    assert mewdex_env.cli("--version", check=True).stdout.strip().startswith("mewdex ")
    for command in (["import", "--help"], ["search", "--help"], ["db", "stop", "--help"]):
        text_out = mewdex_env.cli(*command, check=True).stdout
        assert "<bool>" not in text_out and "<list[Path]>" not in text_out and "<str>" not in text_out
    proc = mewdex_env.cli("search", "x", "-n", "100")
    assert proc.returncode == 2 and "'-n'" in proc.stderr and "50" in proc.stderr
    assert "query must be" not in proc.stderr


def test_commands_accept_an_id_prefix_of_8_characters(mewdex_env, scope, sessions, tmp_path):
    """Issue 19, point 5: --json prints full ids; rename/delete/similar take 8+ characters of one."""
    (tmp_path / "in").mkdir()
    shutil.copyfile(case_file("img04_palette_trns.png"), tmp_path / "in" / "palette.png")
    line = json_lines(
        mewdex_env.cli("import", str(tmp_path / "in"), "--json", scope=scope.scope_id, check=True).stdout
    )[0]
    meme_id = line["meme_id"]
    assert len(meme_id) == 36
    proc = mewdex_env.cli("rename", meme_id[:8], "短 id", scope=scope.scope_id)
    assert proc.returncode == 0, proc.stderr
    from it_helpers import meme

    assert meme(sessions, scope, meme_id).display_name == "短 id"
    proc = mewdex_env.cli("rename", meme_id[:7], "x", scope=scope.scope_id)
    assert proc.returncode == 4 and "8 characters" in proc.stderr  # not found
    proc = mewdex_env.cli("delete", "ffffffff", scope=scope.scope_id)
    assert proc.returncode == 4 and "not_found" in proc.stderr


def test_search_asks_the_server_running_on_the_data_dir(mewdex_env, scope, tmp_path):
    """Issue 19, point 5: with a `mewdex serve` recorded in the data dir search asks it over HTTP instead of
    loading the models itself; links point at that server. The stand-in (tests/integration/planted_server.py,
    run as a file named `mewdex`) passes what a client checks first (issue 40, finding 4): it is a process of
    this user whose command line is `mewdex serve`, holding the record open and listening on its URL."""
    import socket
    import sys

    answer = {
        "results": [
            {
                "id": "0badc0de-0000-4000-8000-000000000001",
                "display_name": "from the server",
                "score": 0.5,
                "snippet": "served text",
                "extension": ".png",
                "revision": 1,
            }
        ],
        "took_ms": 1.0,
    }
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    program = tmp_path / "mewdex"
    shutil.copyfile(Path(__file__).with_name("planted_server.py"), program)
    record = mewdex_env.data_dir / "serve.json"
    record.touch()
    records, ready = tmp_path / "seen.jsonl", tmp_path / "ready"
    server = subprocess.Popen(  # noqa: S603
        [sys.executable, str(program), "serve", "--host", "127.0.0.1", "--port", str(port), "--records", str(records)]
        + ["--ready", str(ready), "--hold", str(record), "--search-answer", json.dumps(answer)]
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: ready.exists() or server.poll() is not None, 20, 0.05, "the stand-in server to listen")
        with record.open("w") as out:  # in place: the stand-in keeps holding it
            json.dump({"url": url, "pid": server.pid}, out)
        proc = mewdex_env.cli("search", "anything", "-n", "3", scope=scope.scope_id, check=True)
        seen = [json.loads(line) for line in records.read_text().splitlines()]
        assert (seen[0]["method"], seen[0]["path"], json.loads(seen[0]["body"])) == (
            "POST",
            "/api/v1/search",
            {"query": "anything", "n_results": 3},
        )
        flat = proc.stdout.replace("\n", "").replace("│", "").replace(" ", "")
        assert (
            "fromtheserver" in flat
            and "servedtext" in flat
            and f"{url}/memes/0badc0de-0000-4000-8000-000000000001" in flat
        )
        # At 80 columns (issue 46) the link still prints whole on one line, never folded or cut.
        narrow = mewdex_env.cli("search", "anything", scope=scope.scope_id, check=True, columns=80).stdout
        assert any(f"{url}/memes/0badc0de-0000-4000-8000-000000000001" in line for line in narrow.splitlines()), narrow
        assert "from the server" in narrow and "served text" in narrow
    finally:
        server.terminate()
        server.wait(10)
        record.unlink(missing_ok=True)
