"""Shared fixtures: one embedded PostgreSQL per test session, a fresh scope per test, a queue drainer,
a client of the real app, one wait helper, and a small corpus sample imported and processed once per session.

Nothing here mocks mewdex code: the database is the real embedded PostgreSQL 18 + pgvector (with
``fsync = off``: commits reach the kernel, not the disk; see :func:`_without_fsync`), the blob store
is the real local one, the models are the real offline ones.

Environment:
    MEWDEX_CORPUS   the meme corpus (default ``<repo>/../shared/data/memes``); corpus tests skip without it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "cases"
SHARED_CASES = REPO.parent / "shared" / "cases"
CORPUS = Path(os.environ.get("MEWDEX_CORPUS") or REPO.parent / "shared" / "data" / "memes")
MEWDEX_BIN = Path(sys.executable).parent / "mewdex"

# TestClient as the owner's browser on this machine: a Host the allow-list serves and a loopback
# peer (the defaults, ``testserver`` / ``testclient``, are a foreign host and a non-local peer).
LOCAL_ORIGIN = "http://127.0.0.1:8275"
LOCAL_CLIENT = {"base_url": LOCAL_ORIGIN, "client": ("127.0.0.1", 50000)}


def _loopback_keeps_secure_cookies() -> None:
    """Browsers send the Secure (``__Host-``) session cookies back to http://127.0.0.1 and
    http://localhost (potentially trustworthy origins); ``http.cookiejar``, under TestClient and httpx,
    only over https. The test clients act as the browsers do."""
    from http.cookiejar import DefaultCookiePolicy
    from urllib.parse import urlsplit

    original = DefaultCookiePolicy.return_ok_secure

    def return_ok_secure(self, cookie, request):
        if urlsplit(request.get_full_url()).hostname in ("127.0.0.1", "localhost", "::1"):
            return True
        return original(self, cookie, request)

    DefaultCookiePolicy.return_ok_secure = return_ok_secure


_loopback_keeps_secure_cookies()

# Fixtures shared by test files of several folders live beside their helper functions in these modules
# and are registered here, once, for the whole suite (a test asks for one by name; helper functions are
# imported from the module as before). pyproject.toml's pytest ``pythonpath`` makes them importable.
pytest_plugins = [
    "channel_helpers",  # account, other_account, telegram
    "accounts_helpers",  # auth_app
    "s3_helpers",  # s3_server, s3_store, app_store
    "ui_helpers",  # browser, page, search_server, work_server
]

# The session's defaults for every process started by the tests (CLI subprocesses inherit them).
TEST_ENV = {
    "MEWDEX_RETRY_BASE_SECONDS": "0",
    "MEWDEX_RETRY_MAX_SECONDS": "0",
    "MEWDEX_WORKER_POLL_SECONDS": "0.2",
    "MEWDEX_LOG_LEVEL": "WARNING",
    # Test workers share two cores with the test processes and their databases: at the default niceness
    # (10) they would get a tenth of a busy CPU and miss the tests' deadlines.
    "MEWDEX_WORKER_NICE": "0",
    # Every worker also serves the internal lanes (maintenance, channel polling), so a test's worker may
    # hold another test's long-poll task when it is stopped: it is released after 5 s, not the default 30
    # (tests of the grace period set their own).
    "MEWDEX_WORKER_GRACE_SECONDS": "5",
    # Most test servers never search: they load the search models (2-3 s of CPU) at their first search,
    # not beside every start-up, where the load slowed the tests running on the other core.
    "MEWDEX_WARM_MODELS": "false",
    # Tests register fake embedders under model ids of their own and clear the process's query cache
    # between cases; a cache shared through the data dir would hand one test another's vectors. Its own
    # tests turn it on.
    "MEWDEX_QUERY_CACHE_ENTRIES": "0",
    # A test process's database outlives its tests, and most servers they start run no worker: work one
    # test left queued would, after the default 300 s, make every later server's /health "degraded"
    # (queue_stalled), which failed the API fuzzer and kept servers polled for health from coming up.
    # Stall tests set their own.
    "MEWDEX_QUEUE_STALL_SECONDS": "3600",
    # bcrypt's lowest cost: every sign-up, sign-in and password check of the suite's servers and CLI calls
    # costs ~1 ms instead of ~250 ms at the default 12 (the checks themselves are the same).
    "MEWDEX_BCRYPT_ROUNDS": "4",
}

# Corpus files of the shared sample (paths below each source's ``images/``), ≤ 30 with the cases.
SAMPLE = {
    "vvquest": [
        "一个字我都不信.png",
        "不屑.png",
        "仅供大家参考.png",
        "中国人民从此站起来了.png",
        "他什么都敢说.png",
        "I don't care 我们不在乎.png",
        "一定要迎头痛击.png",
        "不值得同情的.png",
        "我根本不信这个东西.png",  # the same meaning as 一个字我都不信 in other words (issue 33)
    ],
    "memegen": [
        "cmm/default.png",
        "crow/default.jpg",
        "dragon/default.png",
        "drake/yes.jpg",
        "drake/no.jpg",
        "grumpycat/default.jpg",
        "aag/default.jpg",
        "ackbar/default.jpg",
    ],
    "chinesebqb": [
        "009_KumamotoBear/KumamotoBear00001.gif",
        "009_KumamotoBear/KumamotoBear00004.gif",
        "004_SmirkBoy/SmirkBoy00001.jpg",
        "nanian_natu/那年那兔那些事-不约.jpg",
        "nanian_natu/那年那兔那些事-瞧不起.png",
        "genshin/原神-我派蒙大字不识一个.png",  # shares 一, 个, 字 with 一个字我都不信, not its meaning
    ],
}
# Case files added to the sample (relative to the cases folder; placed under ``cases/`` in the import).
SAMPLE_CASES = ["img05_ocr_hello_transparent.png", "img06_animated_3frames.webp"]
# FN-01: ``Café.png`` twice (NFC and NFD names, different pixels), extracted from the case ZIP into ``cases/fn01/``.
FN01_ZIP = "fn01_nfc_nfd.zip"


def _reset_process_state() -> None:
    """Forget cached settings, the engine and the blob store (after an env change)."""
    from mewdex.config import get_settings
    from mewdex.db.engine import reset_engine
    from mewdex.storage import blob_store

    reset_engine()
    get_settings.cache_clear()
    blob_store.cache_clear()


@dataclass
class MewdexEnv:
    data_dir: Path
    env: dict[str, str]

    def cli(
        self,
        *args: str,
        scope: str | None = None,
        timeout: float = 300,
        check: bool = False,
        columns: int = 200,
        **kw,
    ) -> subprocess.CompletedProcess:
        """Run the real ``mewdex`` CLI on this session's data dir (and ``scope`` as its default scope)
        in a terminal ``columns`` wide."""
        env = {**os.environ, **self.env, "COLUMNS": str(columns), "NO_COLOR": "1"}
        if scope is not None:
            env["MEWDEX_DEFAULT_SCOPE"] = scope
        proc = subprocess.run([str(MEWDEX_BIN), *args], env=env, capture_output=True, text=True, timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise AssertionError(f"mewdex {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc


def _without_fsync(engine) -> None:
    """The session's PostgreSQL stops flushing its WAL to the disk at every commit (``fsync = off``, in
    its ``postgresql.auto.conf``, so also after a restart): a commit still writes its WAL to the kernel
    before it returns, so a killed server or backend (the crash and outage tests) loses nothing it
    committed; only a crash of the machine would. Waiting for the disk at each of the suite's commits
    (about 5 ms each on a busy disk, tens of commits a test) was a fifth of a typical test's time."""
    from sqlalchemy import text

    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("ALTER SYSTEM SET fsync = off"))
        connection.execute(text("SELECT pg_reload_conf()"))


def pytest_xdist_make_scheduler(config, log):
    """The test processes take whole files (``--dist loadfile``), the longest first by the seconds each
    took in a recorded run (``file_seconds.json``; refresh it with ``tests/file_seconds.py``; a file not
    there counts 1.5 s a test): a long file handed out last (the API fuzzer is one 90 s test) left the
    other process idle at the end of every run."""
    import json

    from xdist.scheduler import LoadFileScheduling

    recorded = json.loads((Path(__file__).with_name("file_seconds.json")).read_text())

    class LongestFirst(LoadFileScheduling):
        ordered = False

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # the first hand-out: the queue holds every file
                self.ordered = True
                files = sorted(self.workqueue.items(), key=lambda f: -recorded.get(f[0], 1.5 * len(f[1])))
                self.workqueue.clear()
                self.workqueue.update(files)
            super()._assign_work_unit(node)

    return LongestFirst(config, log)


@pytest.fixture(scope="session")
def mewdex_env() -> MewdexEnv:
    """A temp data dir with its own embedded PostgreSQL, migrated; stopped and removed at session end."""
    from mewdex.db.embedded import stop
    from mewdex.db.engine import get_engine
    from mewdex.db.migrate import upgrade

    data_dir = Path(tempfile.mkdtemp(prefix="mewdex-test-"))
    env = {"MEWDEX_DATA_DIR": str(data_dir), **TEST_ENV}
    saved = {k: os.environ.get(k) for k in [*env, "MEWDEX_DATABASE_URL", "MEWDEX_DEFAULT_SCOPE"]}
    os.environ.update(env)
    os.environ.pop("MEWDEX_DATABASE_URL", None)  # always the embedded server of this data dir
    os.environ.pop("MEWDEX_DEFAULT_SCOPE", None)
    _reset_process_state()
    try:
        upgrade(get_engine())
        _without_fsync(get_engine())
        from mewdex.runtime import load_plugins

        load_plugins()  # the tests run every kind of work in this process, as a worker does
        yield MewdexEnv(data_dir, env)
    finally:
        _reset_process_state()
        try:
            stop(data_dir.resolve() / "pgdata")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            _reset_process_state()
            shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def sessions(mewdex_env):
    from mewdex.db.engine import get_sessionmaker

    return get_sessionmaker()


@pytest.fixture(scope="session")
def store(mewdex_env):
    from mewdex.storage import blob_store

    return blob_store()


def new_scope(sessions, prefix: str = "t"):
    from mewdex.db.models import ScopeContext
    from mewdex.library.scopes import ensure_scope

    scope = ScopeContext(f"{prefix}-{uuid.uuid4().hex[:16]}")
    with sessions.begin() as session:
        ensure_scope(session, scope)
    return scope


@contextlib.contextmanager
def _backend_watched(sessions, session, what: str, after: float = 15.0, every: float = 5.0):
    """Run the body; when it takes longer than ``after`` seconds, sample what the database backend of
    ``session`` is doing every ``every`` seconds (its wait event, state, the locks it waits for) and
    warn with the samples at the end. A teardown's DELETE took 180–205 s in some suite runs and 1 s
    alone: this says where the time went next time."""
    import threading
    import warnings

    from sqlalchemy import text

    pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
    done, samples = threading.Event(), []
    # The server's log (pgdata/log) gets the plan of each statement of this transaction, nested ones
    # included (the cascades' and triggers'), that runs past 2 s: the samples above showed the backend
    # on the CPU, waiting for nothing, for the whole 205 s.
    log_from = None
    try:
        with session.begin_nested():
            session.execute(text("LOAD 'auto_explain'"))
            for name, value in (
                ("log_min_duration", "2s"),
                ("log_nested_statements", "on"),
                ("log_analyze", "on"),
                ("log_triggers", "on"),
            ):
                session.execute(text("SELECT set_config(:n, :v, true)"), {"n": f"auto_explain.{name}", "v": value})
            log_from = session.execute(text("SELECT size FROM pg_stat_file('log', true)")).scalar()
    except Exception:  # noqa: BLE001 - not a superuser, no such module: the samples alone
        log_from = None

    def watch() -> None:
        if done.wait(after):
            return
        while not done.is_set():
            try:
                with sessions.begin() as other:
                    row = other.execute(
                        text(
                            "SELECT wait_event_type, wait_event, state, "
                            "round(extract(epoch FROM now() - query_start)), "
                            "(SELECT count(*) FROM pg_locks WHERE pid = :p AND NOT granted), "
                            "(SELECT count(*) FROM pg_stat_activity WHERE state = 'active') "
                            "FROM pg_stat_activity WHERE pid = :p"
                        ),
                        {"p": pid},
                    ).first()
                samples.append(tuple(row) if row else None)
            except Exception as exc:  # noqa: BLE001 - a diagnostic never fails the teardown
                samples.append(repr(exc))
            done.wait(every)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(10)
        if samples:
            plans = ""
            if log_from is not None:
                try:
                    with sessions.begin() as other:
                        plans = other.execute(
                            text("SELECT pg_read_file('log', :o, 20000, true)"), {"o": log_from}
                        ).scalar()
                except Exception as exc:  # noqa: BLE001 - a diagnostic never fails the teardown
                    plans = repr(exc)
            shown = samples if len(samples) <= 6 else [*samples[:3], "…", *samples[-2:]]
            warnings.warn(
                f"{what}: (wait type, wait event, state, running for, locks awaited, active backends): {shown}"
                f"\nthe server's log meanwhile (auto_explain, statements past 2 s):\n{plans or '(nothing)'}",
                stacklevel=3,
            )


def drop_scope(sessions, scope) -> None:
    """Delete a test scope's rows (everything cascades from ``scopes``) so no other test's drain works on them."""
    import warnings

    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    delete = text("DELETE FROM scopes WHERE id = :s")
    try:
        with sessions.begin() as session:
            session.execute(text("SET LOCAL lock_timeout = '20s'"))
            with _backend_watched(sessions, session, f"drop_scope({scope.scope_id})"):
                session.execute(delete, {"s": scope.scope_id})
        return
    except OperationalError as exc:
        if "lock timeout" not in str(exc):
            raise
    # Something held a lock on the scope's rows for 20 s (a teardown once took 178 s): say what, then wait.
    with sessions.begin() as session:
        holders = session.execute(
            text(
                "SELECT pid, application_name, state, now() - xact_start AS age, left(query, 300) AS query "
                "FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND xact_start IS NOT NULL"
            )
        ).all()
    warnings.warn(f"drop_scope({scope.scope_id}) waited 20 s for locks; open transactions: {holders}", stacklevel=2)
    with sessions.begin() as session:
        session.execute(delete, {"s": scope.scope_id})


@pytest.fixture
def scope(sessions):
    """A fresh scope of this test (removed afterwards)."""
    s = new_scope(sessions)
    yield s
    drop_scope(sessions, s)


def poll_lanes() -> set[str]:
    """The lanes of the channels' scheduled polls (``telegram_poll``, …)."""
    from mewdex.channels import polling, registry

    registry.load()  # every channel's adapter, whether or not this process used it yet
    return {polling.lane_of(adapter.name) for adapter in polling.pollers()}


def pending_tasks(sessions, scopes=None) -> int:
    """Queued or running tasks of ``scopes`` (default: any), the channels' polls aside."""
    from sqlalchemy import func, select

    from mewdex.db.models import Task
    from mewdex.queue.registry import lane_names

    lanes = [lane for lane in lane_names() if lane not in poll_lanes()]
    with sessions.begin() as session:
        query = (
            select(func.count()).select_from(Task).where(Task.status.in_(("queued", "running")), Task.lane.in_(lanes))
        )
        if scopes is not None:
            query = query.where(Task.scope_id.in_([s.scope_id for s in scopes]))
        return session.execute(query).scalar_one()


def drain_queue(sessions, *scopes, timeout: float = 240.0) -> int:
    """Run a real :class:`Worker` in this thread until no image-stage task of ``scopes`` (default: any) is
    queued or running; returns how many tasks it processed."""
    from mewdex.queue.worker import Worker

    worker = Worker(sessions, name=f"pytest-{os.getpid()}")
    # Not the channels' long polls (queued by the schedulers of the apps tests start): with a test's bot
    # token each would wait its whole length (25 s) on the fake platform. Tests poll with poll_once.
    worker.lanes = [lane for lane in worker.lanes if lane not in poll_lanes()]
    deadline = time.monotonic() + timeout
    done = 0
    while True:
        if worker.run_once():
            done += 1
            continue
        if pending_tasks(sessions, scopes or None) == 0:
            return done
        if time.monotonic() > deadline:
            raise AssertionError(f"queue not drained after {timeout}s")
        time.sleep(0.05)


@pytest.fixture
def drain(sessions):
    """``drain(*scopes)``: process the queue to completion with a real worker."""
    return lambda *scopes, timeout=240.0: drain_queue(sessions, *scopes, timeout=timeout)


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.1, what="condition"):
    """Call ``predicate()`` every ``interval`` seconds until it returns something truthy, and return that.

    After ``timeout`` seconds raise ``AssertionError("timed out after …s waiting for <what> (last value: …)")``;
    ``what`` may be a function, called then (for the state worth reporting at that moment: logs, a row).
    An exception raised by ``predicate`` ends the wait at once (so a predicate may assert an invariant too).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {described} (last value: {value!r})")
        time.sleep(interval)


_probe_client = None


def http_ok(url: str, statuses: tuple[int, ...] = (200,), timeout: float = 5) -> bool:
    """Whether ``GET url`` answers with one of ``statuses`` (False while nothing listens, or on a
    timeout after ``timeout`` s): the probe to poll a starting server with (``wait_until(lambda:
    http_ok(url + "/health"), …)``). One httpx client per test process, since each ``httpx.get``
    builds its own client and TLS context (about 40 ms of CPU; ten polls a second add up)."""
    import httpx

    global _probe_client
    if _probe_client is None:
        _probe_client = httpx.Client()
    try:
        return _probe_client.get(url, timeout=timeout).status_code in statuses
    except httpx.HTTPError:
        return False


def app_for(scope=None, **create_app_kwargs):
    """The real app (``create_app``, no worker threads unless ``workers=`` says so) answering as ``scope``
    (its ``current_scope`` and ``streaming_scope`` dependencies overridden), or through its own sign-in
    when ``scope`` is None."""
    from mewdex.web.app import create_app
    from mewdex.web.deps import current_scope, streaming_scope

    app = create_app(**{"workers": 0, **create_app_kwargs})
    if scope is not None:
        app.dependency_overrides[current_scope] = lambda: scope
        app.dependency_overrides[streaming_scope] = lambda: scope
    return app


def client_for(scope=None, **create_app_kwargs):
    """A ``TestClient`` of :func:`app_for`; ``with client_for(scope) as c:`` also runs the app's start-up
    (migrations, recovery) and shut-down. It talks as a local browser (:data:`LOCAL_CLIENT`: a loopback
    peer and Host). A server error comes back as a 500 answer, not an exception."""
    from fastapi.testclient import TestClient

    return TestClient(app_for(scope, **create_app_kwargs), **LOCAL_CLIENT, raise_server_exceptions=False)


@pytest.fixture
def client(scope):
    """A started client of the real app answering as this test's ``scope``."""
    with client_for(scope) as c:
        yield c


def _warn_if_slow(what: str, started: float, limit: float = 15.0) -> None:
    """A teardown once took 180 s in the suite (test_search_filters): name the part that is slow."""
    import warnings

    if (took := time.monotonic() - started) > limit:
        warnings.warn(f"{what} took {took:.0f} s", stacklevel=2)


@contextlib.contextmanager
def _slow_teardown_warned(what: str):
    started = time.monotonic()
    yield
    _warn_if_slow(what, started)


def module_scope_fixtures(prefix: str):
    """``scope, client = module_scope_fixtures("clips")`` in a test module: the module-scoped versions of
    the ``scope`` (named ``<prefix>-…``, removed after the module) and ``client`` fixtures above, for a
    module whose tests share one library (one scope, one started app per module, not per test)."""

    @pytest.fixture(scope="module")
    def scope(sessions):
        s = new_scope(sessions, prefix)
        yield s
        with _slow_teardown_warned(f"{prefix}: drop_scope"):
            drop_scope(sessions, s)

    @pytest.fixture(scope="module")
    def client(scope):
        manager = client_for(scope)
        with manager as c:
            yield c
            started = time.monotonic()
        _warn_if_slow(f"{prefix}: the app's shut-down", started)

    return scope, client


def corpus_available() -> bool:
    return all((CORPUS / src / "images" / rel).is_file() for src, rels in SAMPLE.items() for rel in rels)


@dataclass
class Sample:
    scope: object
    root: Path
    summary: object
    ids: dict[str, str] = field(default_factory=dict)  # "<source>/<relative path>" -> meme id


@pytest.fixture(scope="session")
def sample(sessions, store, tmp_path_factory) -> Sample:
    """≤ 30 corpus images + a few case files imported (folder import, real files) into one scope and
    processed once for the whole session; shared by the search tests (read-only)."""
    if not corpus_available():
        pytest.skip(f"corpus not found at {CORPUS} (set MEWDEX_CORPUS)")
    from mewdex.library.importer import collect, import_paths

    root = tmp_path_factory.mktemp("sample")
    for source, rels in SAMPLE.items():
        for rel in rels:
            target = root / source / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(CORPUS / source / "images" / rel, target)
    for rel in SAMPLE_CASES:
        src = CASES / rel if (CASES / rel).exists() else SHARED_CASES / rel
        target = root / "cases" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
    extract_flat(case_file(FN01_ZIP), root / "cases" / "fn01")
    scope = new_scope(sessions, "t-sample")
    roots = [root / source for source in [*SAMPLE, "cases"]]
    items = collect(roots)
    ids: dict[str, str] = {}

    def record(item, result):
        ids[f"{item.root.name}/{item.relative_path}"] = result.meme_id

    summary = import_paths(sessions, store, scope, items, on_result=record)
    drain_queue(sessions, scope, timeout=600)
    return Sample(scope, root, summary, ids)


@pytest.fixture(autouse=True)
def _sample_keeps_no_lessons(request):
    """The shared sample is read-only for search: what a test taught it (feedback events — a ✓ mark,
    a send, an assistant's "another") is cleared after each test that used it, so a later test never
    meets another test's lessons (a rejected caption match dropped from its results)."""
    yield
    if "sample" not in request.fixturenames:
        return
    from mewdex.search import feedback

    try:
        sample = request.getfixturevalue("sample")
    except pytest.skip.Exception:  # no corpus: the sample was never made
        return
    with request.getfixturevalue("sessions").begin() as session:
        feedback.clear(session, sample.scope)


def extract_flat(zip_path: Path, target: Path) -> list[Path]:
    """Write each ZIP entry's bytes to ``target/<entry name>`` (the names are trusted case names)."""
    import zipfile

    target.mkdir(parents=True, exist_ok=True)
    out = []
    with zipfile.ZipFile(zip_path) as archive:
        for info in archive.infolist():
            path = target / info.filename
            path.write_bytes(archive.read(info))
            out.append(path)
    return out


def case_file(name: str) -> Path:
    """A case file from tests/cases (or the shared cases folder when not copied)."""
    path = CASES / name
    if path.exists():
        return path
    shared = SHARED_CASES / name
    if shared.exists():
        return shared
    pytest.skip(f"case file {name} not found")


@pytest.fixture
def settings_env(mewdex_env):
    """``settings_env(MEWDEX_X="1", ...)``: change settings for the rest of this test (restored after)."""
    from mewdex.config import get_settings

    saved: dict[str, str | None] = {}

    def apply(**env: str) -> None:
        for key, value in env.items():
            saved.setdefault(key, os.environ.get(key))
            os.environ[key] = value
        get_settings.cache_clear()

    yield apply
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    get_settings.cache_clear()
