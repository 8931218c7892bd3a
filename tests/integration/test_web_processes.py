"""Issue 45, item 4: ``mewdex serve`` with several web processes (``MEWDEX_WEB_PROCESSES``) on its one
port. A real ``serve`` with two web processes and one worker process on the session's database: both
web processes answer; only the parent runs the workers (the queue is processed once, by its worker
process; the connections say who is who); the sign-up limit and the ``/metrics`` counters hold across
the web processes; one that is killed is reported and replaced; SIGTERM ends every process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import uuid

import httpx
import psutil
from sqlalchemy import text

from accounts_helpers import delete_users
from conftest import wait_until
from queue_helpers import enqueue_noops
from ui_helpers import serve

SIGNUP_LIMIT = 3


def _on_one_connection(url: str, path: str = "/health", **request) -> tuple[int, httpx.Response]:
    """A new connection (so the kernel hands it to either web process): the pid of the web process
    that holds it (admin ``/health``), then ``request`` (method, json…) to ``path`` on it."""
    with httpx.Client(base_url=url, timeout=30, limits=httpx.Limits(max_connections=1)) as client:
        pid = client.get("/health").json()["web"]["pid"]
        return pid, client.request(request.pop("method", "GET"), path, **request)


class Healths:
    """The ``GET /health`` requests sent through :func:`_on_one_connection` for ``wait_until``
    predicates (``answered``: each counted by the server; ``unsure``: ones whose answer did not come
    in time, counted or not): a busy machine ends no wait with a ReadTimeout."""

    def __init__(self) -> None:
        self.answered = 0
        self.unsure = 0

    def ask(self, url: str) -> tuple[int, httpx.Response] | None:
        try:
            pid, response = _on_one_connection(url)
        except httpx.TimeoutException:
            self.unsure += 2  # its first request and the second, each maybe answered
            return None
        self.answered += 2
        return pid, response


def _metric(body: str, line_start: str) -> float:
    """The sum of the samples whose lines start with ``line_start`` (one or more label sets)."""
    found = [float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith(line_start)]
    assert found, (line_start, body[:3000])
    return sum(found)


def test_two_web_processes_answer_on_one_port_and_only_the_parent_runs_the_workers(
    mewdex_env, sessions, scope, tmp_path
):
    env = {
        **os.environ,
        **mewdex_env.env,
        "MEWDEX_AUTH": "none",  # this machine's user is the admin: /health says which process answered
        "MEWDEX_WEB_PROCESSES": "2",
        "MEWDEX_WORKER_MODE": "process",
        "MEWDEX_SIGNUP_MAX_PER_IP": str(SIGNUP_LIMIT),
    }
    with sessions.begin() as session:
        session.execute(text("DELETE FROM login_failures WHERE key LIKE 'signup:%'"))
    tag = uuid.uuid4().hex[:8]  # the sign-up attempts' emails (an account made is deleted at the end)
    server = serve(env, tmp_path / "serve.log", workers=1, probe="/readyz")
    parent = psutil.Process(server.process.pid)
    try:
        # Both web processes answer, each on the connections it accepted; the workers are the parent's.
        healths = Healths()
        answers: list[tuple[int, httpx.Response]] = []
        wait_until(
            lambda: (
                (answer := healths.ask(server.url)) is not None
                and (answers.append(answer) or len({pid for pid, _ in answers}) == 2)
            ),
            60,
            0.05,
            "both web processes to answer",
        )
        web = {pid for pid, _ in answers}
        folders = list((mewdex_env.data_dir / "run").glob("serve-*"))  # this serve's (and any a killed one left)
        assert web == {child.pid for child in parent.children() if "spawn_main" in " ".join(child.cmdline())}
        pools = [r.json()["workers"]["pool"] for _, r in answers]
        assert all(pool == pools[0] for pool in pools) and pools[0]["alive"] == 1, pools
        [worker] = pools[0]["pids"]
        assert psutil.Process(worker).ppid() == parent.pid and all(
            r.json()["web"]["processes"] == 2 for _, r in answers
        )

        # The queue is processed once, by the parent's worker process alone.
        ids = enqueue_noops(sessions, scope, 20)
        with sessions.begin() as session:
            processed = text("SELECT count(*) FROM tasks WHERE id = ANY(:ids) AND status = 'succeeded'")
            wait_until(lambda: session.execute(processed, {"ids": ids}).scalar() == len(ids), 60, 0.2, "the tasks")
            owners = session.execute(
                text("SELECT lease_owner FROM task_attempts WHERE task_id = ANY(:ids)"), {"ids": ids}
            ).scalars()
            assert sorted(owner.split(":")[1] for owner in owners) == [str(worker)] * len(ids)
            names = set(session.execute(text("SELECT application_name FROM pg_stat_activity")).scalars())
        assert {f"mewdex serve:{parent.pid}", *(f"mewdex serve web:{pid}" for pid in web)} <= names
        assert any(re.fullmatch(rf"mewdex-worker:.+:{worker}", name or "") for name in names), names
        from mewdex.runtime import queue_processors

        with sessions.begin() as session:
            assert not any(name.startswith("mewdex serve web:") for name in queue_processors(session))

        # The sign-up limit counts the attempts of both web processes together.
        attempts: list[tuple[int, int]] = []
        while len(attempts) < 20 and not (len(attempts) > SIGNUP_LIMIT and len({p for p, _ in attempts}) == 2):
            body = {"email": f"many-{tag}-{len(attempts)}@example.com", "password": "a password of sorts"}
            pid, r = _on_one_connection(server.url, "/api/v1/auth/signup", method="POST", json=body)
            attempts.append((pid, r.status_code))
        assert len({p for p, _ in attempts}) == 2, attempts  # per process, one of them would have allowed more
        statuses = [status for _, status in attempts]
        assert 429 not in statuses[:SIGNUP_LIMIT] and set(statuses[SIGNUP_LIMIT:]) == {429}, attempts

        # /metrics sums the web processes' counters, whichever of them answers the scrape.
        # Each connection began with a GET /health (two of them where that was the request); the probe
        # polled /readyz. Whatever status each answered with (a busy machine's may be 503).
        counted = healths.answered + len(attempts)
        scrapes: dict[int, tuple[int, str]] = {}
        while len(scrapes) < 2:
            pid, r = _on_one_connection(server.url, "/metrics")
            counted += 1
            scrapes[pid] = (counted, r.text)
        for expected, body in scrapes.values():
            health = _metric(body, 'mewdex_http_requests_total{method="GET",route="/health",')
            assert expected <= health <= expected + healths.unsure, (expected, healths.unsure, health)
            assert _metric(body, "mewdex_workers_alive ") == 1 and "process_resident_memory_bytes " in body

        # A web process that dies is reported and replaced.
        victim = min(web)
        os.kill(victim, signal.SIGKILL)
        wait_until(
            lambda: re.search(
                rf"web process {victim} killed by SIGKILL; started \d+ in its place", server.log.read_text()
            ),
            30,
            0.2,
            "the dead web process to be reported",
        )
        replacement = int(
            re.search(rf"web process {victim} killed by SIGKILL; started (\d+)", server.log.read_text())[1]
        )
        wait_until(
            lambda: (answer := healths.ask(server.url)) is not None and answer[0] == replacement,
            60,
            0.05,
            "its replacement to answer",
        )
        everyone = [parent, *parent.children(recursive=True)]
    finally:
        with sessions.begin() as session:  # later servers of this test process count from zero again
            session.execute(text("DELETE FROM login_failures WHERE key LIKE 'signup:%'"))
            made = list(
                session.execute(text("SELECT user_id FROM users WHERE email LIKE :e"), {"e": f"many-{tag}-%"}).scalars()
            )
        delete_users(sessions, made)
        server.process.send_signal(signal.SIGTERM)
        try:
            code = server.process.wait(60)
        except subprocess.TimeoutExpired:
            server.stop()
            raise
    # SIGTERM ends them all: the parent exits 0 after its web processes and its worker process.
    assert code == 0, server.log.read_text()
    gone, alive = psutil.wait_procs(everyone, timeout=10)
    assert not alive, alive
    assert folders and not any(folder.exists() for folder in folders)
    assert "Traceback" not in server.log.read_text(), server.log.read_text()
