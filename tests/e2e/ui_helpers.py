"""End-to-end fixtures (test modules import them from here): a real ``mewdex serve`` subprocess on the session's
embedded PostgreSQL and a
real headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright; never a downloaded browser).

* ``browser``       one Chromium per test process, kept while browser tests follow one another (a live
                    Playwright loop would break asyncio.run: stopped before any other test).
* ``search_server`` ``mewdex serve`` on the shared corpus sample's scope (read-only, no workers).
* ``work_server``   ``mewdex serve`` on a fresh scope of its own (no workers: tests drain the queue
                    themselves with ``drain`` so they decide when processing happens).
* ``page``          a fresh 1280×900 page, Chinese clipboard permissions granted, with ``shot(name)``.

Screenshots go to ``tests/e2e/screenshots/`` (git-ignored) for a person to look at.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from conftest import MEWDEX_BIN, drop_scope, http_ok, new_scope, wait_until

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).parent / "screenshots"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}

# A stand-in for the phone's share sheet: records what the page hands to navigator.share.
FAKE_SHARE = """
window.__shared = null;
Object.defineProperty(navigator, "canShare", {value: (data) => !!(data && data.files), configurable: true});
Object.defineProperty(navigator, "share", {configurable: true, value: async (data) => {
  const f = data.files && data.files[0];
  window.__shared = f ? {name: f.name, type: f.type, size: f.size, title: data.title}
                      : {url: data.url, title: data.title};
}});
"""


def sharing_context(browser, origin: str, viewport=PHONE, locale: str = "en-US"):
    """A phone-like browser context (touch) that may use the clipboard on ``origin`` and whose share
    sheet records what the page hands it (:data:`FAKE_SHARE`, read back as ``window.__shared``)."""
    context = browser.new_context(viewport=viewport, locale=locale, has_touch=True)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=origin)
    context.add_init_script(FAKE_SHARE)
    return context


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class UiServer:
    url: str
    scope: object
    process: subprocess.Popen
    log: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def get(self, path: str, **kw) -> httpx.Response:
        return httpx.get(self.url + path, timeout=30, **kw)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(
    mewdex_env, scope, log: Path, *, workers: int = 0, timeout: float = 120, env: dict | None = None
) -> UiServer:
    """Start ``mewdex serve`` on a free port for ``scope``; wait until ``/health`` answers ok. ``env``: more
    settings (``MEWDEX_AUTH=required``, ``MEWDEX_WATCH_DIRS``…), over the others."""
    # The single-user local install (no login) unless the caller's environment says otherwise, whatever
    # accounts earlier tests created in this database (`auto` would then ask for a login).
    extra = env
    env = {"MEWDEX_AUTH": "none", **os.environ, **mewdex_env.env}
    env |= {"MEWDEX_DEFAULT_SCOPE": scope.scope_id, "NO_COLOR": "1", **(extra or {})}
    return serve(env, log, workers=workers, timeout=timeout, scope=scope)


def serve(
    env: dict[str, str],
    log: Path,
    *,
    host: str | None = "127.0.0.1",
    port: int | None = None,
    workers: int = 0,
    timeout: float = 120,
    scope=None,
    command: Sequence[str] = (str(MEWDEX_BIN),),
    cwd: Path | None = None,
    probe: str | None = None,
) -> UiServer:
    """Start ``<command> serve`` with exactly ``env`` (``host`` None: MEWDEX_HOST's) on ``port`` (default a
    free one), run in ``cwd``, its output in ``log``; return once ``probe`` answers 200 (polled every 0.1 s;
    default ``/readyz``, or ``/health`` when it starts workers: then they run too). Not ``/health`` without
    workers: it is rightly degraded (503) once work another test queued in the shared database has waited
    ``MEWDEX_QUEUE_STALL_SECONDS`` with no consumer, which late in a run kept such servers from coming up.
    Raises AssertionError with the log when it exits or is not up within ``timeout`` s (it is stopped then).
    The one start/poll/stop of a server subprocess for the tests that need one."""
    port = port or free_port()
    args = [*command, "serve", "--port", str(port), "--workers", str(workers)]
    if host is not None:
        args[len(command) + 1 : len(command) + 1] = ["--host", host]
    with log.open("w") as out:  # the child keeps its own copy of the file
        process = subprocess.Popen(args, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    server = UiServer(f"http://{host or '127.0.0.1'}:{port}", scope, process, log)
    probe = probe or ("/health" if workers else "/readyz")

    def healthy() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"mewdex serve exited with {process.returncode}")
        return http_ok(server.url + probe)

    try:
        wait_until(healthy, timeout, 0.1, "mewdex serve to come up")
    except AssertionError as error:
        server.stop()
        raise AssertionError(f"{error}:\n{log.read_text()}") from None
    return server


# One Playwright driver and Chromium per test process, shared by the browser tests that run one after
# another (a launch costs 1.5-2 s of CPU); stopped before the first test that does not use it, since
# its running event loop would break asyncio.run in that test.
_live: dict[str, object] = {}


def _shared_browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (make browser)")
    b = _live.get("browser")
    if b is not None and b.is_connected():
        return b
    stop_shared_browser()
    playwright = sync_api.sync_playwright().start()
    _live["playwright"] = playwright
    _live["browser"] = b = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    return b


def stop_shared_browser() -> None:
    """Close the shared Chromium and stop its Playwright driver (and event loop), if running."""
    b, playwright = _live.pop("browser", None), _live.pop("playwright", None)
    try:
        if b is not None and b.is_connected():
            b.close()
    finally:
        if playwright is not None:
            playwright.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if "browser" not in item.fixturenames:
        stop_shared_browser()


def pytest_sessionfinish(session):
    stop_shared_browser()


@pytest.fixture(scope="module")
def browser():
    """The process's Chromium (see :func:`_shared_browser`); contexts a module left open are closed after it."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    b = _shared_browser()
    yield b
    for context in list(b.contexts):
        context.close()


@pytest.fixture(scope="module")
def search_server(mewdex_env, sample, tmp_path_factory):
    server = start_server(mewdex_env, sample.scope, tmp_path_factory.mktemp("serve") / "search.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def work_server(mewdex_env, sessions, tmp_path_factory):
    scope = new_scope(sessions, "t-ui")
    server = start_server(mewdex_env, scope, tmp_path_factory.mktemp("serve") / "work.log")
    yield server
    server.stop()
    drop_scope(sessions, scope)


@pytest.fixture
def page(browser, request):
    context = browser.new_context(viewport=DESKTOP, locale="en-US", accept_downloads=True)
    context.set_default_timeout(15_000)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))

    def shot(name: str, *, full_page: bool = True) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        pg.screenshot(path=str(path), full_page=full_page)
        return path

    pg.shot = shot
    yield pg
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def corpus_file(sample, key: str) -> Path:
    """The sample's copy of a corpus file (``"<source>/<relative path>"``)."""
    return sample.root / key


def copy_to(tmp_path: Path, src: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copyfile(src, target)
    return target
