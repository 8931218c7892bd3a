"""Issue 46, item 2: mewdex behind the reverse proxies people run, with the configurations of
``docs/deploy/`` as they are (only the ports, the listen address and the proxies' own files and
directories changed for a test).

Real parts: two ``mewdex serve`` subprocesses (``MEWDEX_BASE_PATH=/memes`` and the root) on the
embedded PostgreSQL, Debian's ``nginx`` and ``caddy`` as foreground processes on free loopback
ports (``make proxies`` installs them; without them these tests are skipped with that reason), a
fake OpenAI-compatible model server for the chat's streamed answer, and a OneBot implementation's
reverse WebSocket. Through each proxy: the sub-path (every link, form, script, redirect, the cookie
path, the manifest and its share target), an upload at the size limit and one byte over (mewdex's
JSON 413, not the proxy's page), the OneBot WebSocket, the chat's answer arriving in pieces, and
the client address the proxy names (``MEWDEX_TRUSTED_PROXIES=127.0.0.1``; clients connect from
127.0.0.2 and 127.0.0.3, other loopback addresses)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
import uuid
import zlib
from contextlib import ExitStack
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy import select, text

from accounts_helpers import PASSWORD, delete_users, own_scope_users
from conftest import wait_until
from fakes.onebot_client import FakeNapCat
from fakes.openai_server import FakeOpenAI, Reply
from mewdex.db.models import ChannelBinding
from ui_helpers import UiServer, free_port, serve

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy"
UPSTREAM = "127.0.0.1:8275"  # the address of mewdex in the docs' configurations
SUB = "example.org"  # the sub-path variant's name (mewdex under /memes/)
ROOT = "memes.example.org"  # the root variant's name
MAX_UPLOAD = 256 * 1024  # MEWDEX_MAX_UPLOAD_BYTES of the servers here
CLIENT_IP = "127.0.0.2"  # where the test's "browser" connects from
OTHER_IP = "127.0.0.3"
BOT_QQ = 3889000222
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
CADDY = shutil.which("caddy")


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


# ------------------------------------------------------------------ mewdex serve, the model, the account


def _serve(mewdex_env, folder: Path, **settings: str) -> UiServer:
    """``mewdex serve`` (login required, no workers) with ``settings``, up; the caller stops it."""
    env = {**os.environ, **mewdex_env.env, "MEWDEX_AUTH": "required", "MEWDEX_BCRYPT_ROUNDS": "4", **settings}
    for name in ("FORWARDED_ALLOW_IPS", "MEWDEX_PUBLIC_URL", "MEWDEX_PROXY_CLIENT_HEADER"):
        env.pop(name, None)
    port = free_port()
    return serve(env, folder / f"serve-{port}.log", host=None, port=port)


class Gate:
    """The fake model's chat replies wait at the gate (``opened``) until the test opens it."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.opened = threading.Event()

    def __call__(self, body: dict) -> Reply:
        self.asked.set()
        self.opened.wait(30)
        return Reply.text("Here are the cats you asked for, in several pieces.", chunk_chars=12, chunk_delay=0.4)


@pytest.fixture(scope="module")
def deployment(mewdex_env, sessions, tmp_path_factory):
    """``(sub, root, gate, email)``: mewdex under /memes and at the root, both behind what the docs say
    to set (trusted proxy 127.0.0.1, the two names), a chat model whose replies wait at ``gate``,
    and an account's email (password ``PASSWORD``)."""
    if NGINX is None and CADDY is None:
        pytest.skip("neither nginx nor caddy is installed (`make proxies` installs them with apt)")
    from mewdex.providers import connectors

    folder = tmp_path_factory.mktemp("proxied")
    with ExitStack() as stack:
        model = stack.enter_context(FakeOpenAI())
        gate = Gate()
        model.handler = gate
        with sessions.begin() as session:
            definition = connectors.create_definition(
                session,
                provider="openai_compatible",
                name=f"proxied-{uuid.uuid4().hex[:6]}",
                visibility="all",
                credentials={"api_key": model.api_key},
                config={"base_url": model.base_url, "chat_model": "fake-chat"},
            )
            definition_id = definition.definition_id
            (user,), made = own_scope_users(session, ["proxied"], PASSWORD, role="user")
            email = user.email
        settings = {
            "MEWDEX_TRUSTED_PROXIES": "127.0.0.1",
            "MEWDEX_ALLOWED_HOSTS": f"{SUB},{ROOT}",
            "MEWDEX_MAX_UPLOAD_BYTES": str(MAX_UPLOAD),
            "MEWDEX_METRICS_ALLOW": CLIENT_IP,
            "MEWDEX_EGRESS_ALLOW_HOSTS": json.dumps([model.host_port]),
            "MEWDEX_PROVIDER_MAX_RETRIES": "0",
            "MEWDEX_ASSISTANT_LLM_TITLES": "false",
        }
        sub = _serve(mewdex_env, folder, MEWDEX_BASE_PATH="/memes", **settings)
        stack.callback(sub.stop)
        root = _serve(mewdex_env, folder, MEWDEX_BASE_PATH="", **settings)
        stack.callback(root.stop)
        try:
            yield sub, root, gate, email
        finally:
            gate.opened.set()
            delete_users(sessions, made)
            with sessions.begin() as session:
                for table in ("external_system_audits", "external_system_definitions"):
                    session.execute(text(f"DELETE FROM {table} WHERE definition_id = :d"), {"d": definition_id})


# ------------------------------------------------------------------ the proxies, from docs/deploy


def _variants(config: str) -> tuple[str, str]:
    """The docs' configuration cut into (root variant, sub-path variant) at their ``== Variant`` lines."""
    head, rest = config.split("# == Variant 1", 1)
    root, sub = rest.split("# == Variant 2", 1)
    return head + "# == Variant 1" + root, "# == Variant 2" + sub


def nginx_config(folder: Path, port: int, sub: int, root: int) -> Path:
    """docs/deploy/nginx.conf in an nginx.conf of its own (temp paths and logs in ``folder``), each
    variant pointing at its mewdex, listening on 127.0.0.1:``port``."""
    root_part, sub_part = _variants((DEPLOY / "nginx.conf").read_text())
    site = root_part.replace(UPSTREAM, f"127.0.0.1:{root}") + sub_part.replace(UPSTREAM, f"127.0.0.1:{sub}")
    assert site.count("listen 80;") == 2
    (folder / "site.conf").write_text(site.replace("listen 80;", f"listen 127.0.0.1:{port};"))
    temp = "\n".join(
        f"  {kind}_temp_path {folder}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    main = folder / "nginx.conf"
    main.write_text(
        ("user root;\n" if os.geteuid() == 0 else "")
        + f"worker_processes 1;\nerror_log {folder}/error.log;\nevents {{ worker_connections 256; }}\n"
        f"http {{\n  access_log {folder}/access.log;\n{temp}\n  include {folder}/site.conf;\n}}\n"
    )
    return main


def caddy_config(folder: Path, port: int, sub: int, root: int) -> Path:
    """docs/deploy/Caddyfile with its sites on plain http at 127.0.0.1:``port`` (no certificates, no
    admin endpoint, storage in ``folder``), each variant pointing at its mewdex."""
    root_part, sub_part = _variants((DEPLOY / "Caddyfile").read_text())
    config = root_part.replace(UPSTREAM, f"127.0.0.1:{root}") + sub_part.replace(UPSTREAM, f"127.0.0.1:{sub}")
    for name in (ROOT, SUB):
        config, n = re.subn(
            rf"^{re.escape(name)} {{$", f"http://{name}:{port} {{\n\tbind 127.0.0.1", config, flags=re.M
        )
        assert n == 1, name
    options = f"{{\n\tadmin off\n\tstorage file_system {folder}/data\n}}\n"
    path = folder / "Caddyfile"
    path.write_text(options + config)
    return path


@dataclass
class Proxy:
    name: str
    port: int
    folder: Path

    def client(self, host: str, source: str = CLIENT_IP, **kw) -> httpx.Client:
        """A browser at ``source`` opening http://``host``/ through this proxy."""
        return httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}",
            headers={"Host": host},
            transport=httpx.HTTPTransport(local_address=source),
            timeout=30,
            **kw,
        )


@pytest.fixture(scope="module", params=["nginx", "caddy"])
def proxy(request, deployment, tmp_path_factory):
    """The proxy (nginx, then caddy) in front of both mewdex servers, in the foreground."""
    name = request.param
    binary = NGINX if name == "nginx" else CADDY
    if binary is None:
        pytest.skip(f"{name} is not installed (`make proxies` installs it with apt)")
    sub, root, _gate, _email = deployment
    folder = tmp_path_factory.mktemp(name)
    port = free_port()
    env = {**os.environ, "HOME": str(folder), "XDG_DATA_HOME": str(folder), "XDG_CONFIG_HOME": str(folder)}
    if name == "nginx":
        conf = nginx_config(folder, port, sub.port, root.port)
        base = [binary, "-p", str(folder), "-e", f"{folder}/error.log", "-c", str(conf)]
        check = subprocess.run([*base, "-t"], capture_output=True, text=True, env=env)
        assert check.returncode == 0, check.stderr
        command = [*base, "-g", f"daemon off; pid {folder}/nginx.pid;"]
    else:
        conf = caddy_config(folder, port, sub.port, root.port)
        check = subprocess.run(
            [binary, "validate", "--config", str(conf), "--adapter", "caddyfile"],
            capture_output=True,
            text=True,
            env=env,
        )
        assert check.returncode == 0, check.stderr
        command = [binary, "run", "--config", str(conf), "--adapter", "caddyfile"]
    with (folder / "proxy.log").open("w") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=out)
    try:
        wait_until(
            lambda: process.poll() is None and _listening(port) or _exited(process, folder),
            30,
            0.1,
            f"{name} to listen",
        )
        yield Proxy(name, port, folder)
    finally:
        process.send_signal(signal.SIGTERM if name == "caddy" else signal.SIGQUIT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _exited(process: subprocess.Popen, folder: Path) -> bool:
    assert process.poll() is None, (folder / "proxy.log").read_text() + _read(folder / "error.log")
    return False


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def sign_in(browser: httpx.Client, email: str, base: str = "/memes") -> str:
    """Sign in through the login API under ``base``; returns the CSRF token the page scripts send."""
    r = browser.post(f"{base}/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    assert r.status_code == 200, r.text
    return next(c.value for c in browser.cookies.jar if c.name.endswith("mewdex_csrf"))


# ------------------------------------------------------------------ the sub-path


class Links(HTMLParser):
    """Every URL a page's markup names: href, src, action, HTMX gets, data-animated-src, and the
    manifest and scripts' base (``<html data-base>``)."""

    ATTRS = {"href", "src", "action", "hx-get", "hx-post", "data-animated-src", "formaction"}

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str, str]] = []
        self.base: str | None = None

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in self.ATTRS and value is not None:
                self.urls.append((tag, name, value))
            if tag == "html" and name == "data-base":
                self.base = value


def _links(html: str) -> Links:
    parser = Links()
    parser.feed(html)
    return parser


PAGES = [
    "/",
    "/?q=cat",
    "/library",
    "/upload",
    "/collections",
    "/chat",
    "/schedules",
    "/tasks",
    "/settings",
    "/settings/channels",
    "/connectors",
    "/login",
    "/no-such-page",
]


def test_under_a_sub_path_every_link_form_script_redirect_and_cookie_is_under_it(proxy, deployment):
    """MEWDEX_BASE_PATH=/memes behind the proxy's sub-path recipe (which strips the prefix): the
    sign-in redirect and its ``next``, the session and CSRF cookies (``Path=/memes``), every local
    URL of the main pages, the scripts' base, the manifest (start_url, scope, share target), the
    service worker, the API docs and the OpenAPI ``servers``, the language switch."""
    _sub, _root, _gate, email = deployment
    with proxy.client(SUB) as browser:
        r = browser.get("/memes")
        assert r.status_code in (301, 308) and urlsplit(r.headers["location"]).path == "/memes/", r.headers
        r = browser.get("/memes/library?view=grid", headers={"Accept": "text/html"})
        assert r.status_code == 303 and r.headers["location"] == "/memes/login?next=/library%3Fview%3Dgrid"

        login = browser.get("/memes/login?next=/library")
        assert login.status_code == 200 and 'data-next="/library"' in login.text
        r = browser.post("/memes/api/v1/auth/login", json={"email": email, "password": PASSWORD})
        assert r.status_code == 200, r.text
        cookies = r.headers.get_list("set-cookie")
        assert len(cookies) >= 2 and all("Path=/memes" in c and "Path=/;" not in c for c in cookies), cookies
        csrf = next(c.value for c in browser.cookies.jar if c.name.endswith("mewdex_csrf"))

        checked = set()
        for page in PAGES:
            r = browser.get("/memes" + page, headers={"Accept": "text/html"})
            assert r.status_code in (200, 404), (page, r.status_code)
            links = _links(r.text)
            assert links.base == "/memes", page
            for tag, attr, url in links.urls:
                parts = urlsplit(url)
                if parts.scheme or parts.netloc or url.startswith(("#", "data:", "mailto:")):
                    continue
                assert url.startswith("/memes/"), f"{page}: <{tag} {attr}={url!r}>"
                if tag in ("script", "link") and url not in checked:  # scripts, styles, icons, manifest
                    checked.add(url)
                    assert browser.get(url).status_code == 200, url
        assert {"/memes/static/app.js", "/memes/static/auth.js", "/memes/manifest.webmanifest"} <= checked

        manifest = browser.get("/memes/manifest.webmanifest").json()
        assert manifest["start_url"] == manifest["scope"] == "/memes/"
        assert manifest["share_target"]["action"] == "/memes/share-target"
        assert all(icon["src"].startswith("/memes/static/") for icon in manifest["icons"])
        assert browser.get("/memes/sw.js").status_code == 200
        r = browser.post("/memes/share-target", files={"files": ("a.png", b"x", "image/png")})
        assert r.status_code == 303 and r.headers["location"] == "/memes/upload?shared=unavailable"

        assert browser.get("/memes/openapi.json").json()["servers"] == [{"url": "/memes"}]
        docs = _links(browser.get("/memes/docs").text).urls
        assert docs and all(url.startswith("/memes/") for _t, _a, url in docs), docs
        assert 'data-openapi-url="/memes/openapi.json"' in browser.get("/memes/docs").text

        r = browser.get("/memes/lang/zh?next=/library")
        assert r.status_code == 303 and r.headers["location"] == "/memes/library"
        assert "Path=/memes" in r.headers["set-cookie"]
        assert browser.get("/memes/library").status_code == 200

        r = browser.post("/memes/api/v1/auth/logout", headers={"X-CSRF-Token": csrf})
        assert r.status_code in (200, 204) and all("Path=/memes" in c for c in r.headers.get_list("set-cookie"))


def test_at_the_root_recipe_links_stay_at_the_root(proxy, deployment):
    """The root variant (its own name, no MEWDEX_BASE_PATH): the same pages, links at /, cookies Path=/."""
    _sub, _root, _gate, email = deployment
    with proxy.client(ROOT) as browser:
        r = browser.get("/library", headers={"Accept": "text/html"})
        assert r.status_code == 303 and r.headers["location"] == "/login?next=/library"
        r = browser.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
        assert r.status_code == 200 and all("Path=/" in c for c in r.headers.get_list("set-cookie"))
        page = browser.get("/library", headers={"Accept": "text/html"})
        links = _links(page.text)
        assert page.status_code == 200 and links.base == ""
        local = [u for _t, _a, u in links.urls if u.startswith("/")]
        assert "/static/app.js" in local and "/settings" in local, local  # (/memes/<id> is a meme's page here)
        assert not [u for u in local if u.startswith(("//", "/memes/static/", "/memes/api/", "/memes/settings"))]
        assert browser.get("/manifest.webmanifest").json()["start_url"] == "/"


# ------------------------------------------------------------------ uploads, WebSocket, stream, address


def _png(size: int) -> bytes:
    """A valid PNG of exactly ``size`` bytes (a 1x1 image and a tEXt chunk of padding)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    head = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
    body = chunk(b"IDAT", zlib.compress(b"\x00" + os.urandom(3)))
    end = chunk(b"IEND", b"")
    pad = size - len(head) - len(body) - len(end) - 12 - len(b"pad\x00")
    return head + body + chunk(b"tEXt", b"pad\x00" + b"x" * pad) + end


def test_an_upload_at_the_limit_passes_and_one_byte_over_gets_mewdexs_413(proxy, deployment):
    _sub, _root, _gate, email = deployment
    with proxy.client(SUB) as browser:
        csrf = sign_in(browser, email)
        at_limit = _png(MAX_UPLOAD)
        assert len(at_limit) == MAX_UPLOAD
        r = browser.post(
            "/memes/api/v1/memes",
            files={"files": ("at-limit.png", at_limit, "image/png")},
            headers={"X-CSRF-Token": csrf},
        )
        assert r.status_code == 201, r.text
        assert r.json()["results"][0]["status"] == "created"
        over = _png(MAX_UPLOAD + 1)
        r = browser.post(
            "/memes/api/v1/memes", files={"files": ("over.png", over, "image/png")}, headers={"X-CSRF-Token": csrf}
        )
        assert r.status_code == 413 and r.headers["content-type"].startswith("application/json"), r.text[:300]
        assert r.json()["error"]["code"] == "upload_too_large"


def test_the_proxy_body_limit_is_mewdexs_largest_request():
    """The docs' proxy limit is mewdex's largest accepted body (a collection package), so every
    over-size request gets mewdex's own 413, never the proxy's page."""
    from mewdex.config import Settings
    from mewdex.web.security import UPLOAD_OVERHEAD_BYTES, UPLOAD_REQUEST_BYTES

    largest = max(Settings().zip_max_total_bytes, UPLOAD_REQUEST_BYTES, Settings().max_upload_bytes)
    mib = (largest + UPLOAD_OVERHEAD_BYTES) // (1024 * 1024)
    nginx = re.findall(r"^\s+client_max_body_size (\d+)m;$", (DEPLOY / "nginx.conf").read_text(), flags=re.M)
    caddy = re.findall(r"^\s+max_size (\d+)MiB$", (DEPLOY / "Caddyfile").read_text(), flags=re.M)
    assert nginx == [str(mib)] * 2 and caddy == [str(mib)] * 2, (mib, nginx, caddy)


def test_the_onebot_reverse_websocket_connects_through_the_proxy(proxy, deployment, sessions):
    """The WebSocket URL the channel card shows (under /memes, the proxy's host) upgrades through the
    proxy: mewdex asks the bot who it is over it (get_login_info), reads the answer, marks it connected."""
    _sub, _root, _gate, email = deployment
    with proxy.client(SUB) as browser:
        csrf = sign_in(browser, email)
        r = browser.post("/memes/api/v1/channels/onebot", json={"mode": "ws"}, headers={"X-CSRF-Token": csrf})
        assert r.status_code == 201, r.text
        bound = r.json()
    assert bound["ws_url"] == f"ws://{SUB}/memes/channels/onebot/ws"
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10, source_address=(CLIENT_IP, 0))
    url = bound["ws_url"].replace(f"ws://{SUB}/", f"ws://{SUB}:{proxy.port}/")
    with FakeNapCat(url, BOT_QQ, bound["access_token"], sock=sock) as napcat:
        scope_id = bound["binding"].get("scope_id")

        def connected() -> bool:
            with sessions.begin() as session:
                rows = session.execute(select(ChannelBinding).where(ChannelBinding.channel == "onebot")).scalars()
                return any(
                    row.identity == str(BOT_QQ) and row.config.get("connected")
                    for row in rows
                    if scope_id is None or str(row.scope_id) == scope_id
                )

        wait_until(connected, timeout=20, what="the bot to be asked and marked connected through the proxy")
        assert napcat.login_queries >= 1 and not napcat.closed.is_set()
        napcat.heartbeat()
        time.sleep(0.3)
        assert not napcat.closed.is_set()


def test_the_chats_answer_streams_through_the_proxy_in_pieces(proxy, deployment):
    """The first event (the stored message) reaches the browser while the model has not answered yet
    (it waits at the gate until then), and the answer's pieces, which the model sends 0.4 s apart,
    arrive 0.4 s apart: nothing between them holds the stream back."""
    _sub, _root, gate, email = deployment
    gate.asked.clear()
    gate.opened.clear()
    with proxy.client(SUB) as browser:
        csrf = sign_in(browser, email)
        r = browser.post("/memes/api/v1/conversations", json={}, headers={"X-CSRF-Token": csrf})
        assert r.status_code == 201, r.text
        cid = r.json()["id"]
        arrivals: list[tuple[str, float]] = []  # (event, when it arrived)
        seen_before_answer: list[str] = []
        try:
            with browser.stream(
                "POST",
                f"/memes/api/v1/conversations/{cid}/messages",
                json={"content": "cats please"},
                headers={"X-CSRF-Token": csrf, "Accept": "text/event-stream"},
            ) as stream:
                assert stream.status_code == 200
                assert stream.headers["content-type"].startswith("text/event-stream")
                text_so_far = ""
                for piece in stream.iter_text():
                    text_so_far += piece
                    events = re.findall(r"^event: (\w+)$", text_so_far, flags=re.M)
                    now = time.monotonic()
                    arrivals += [(name, now) for name in events[len(arrivals) :]]
                    if arrivals and not gate.opened.is_set():
                        assert gate.asked.wait(10), "the model was asked"
                        seen_before_answer = [name for name, _ in arrivals]
                        gate.opened.set()  # only now does the model answer
        finally:
            gate.opened.set()
    names = [name for name, _ in arrivals]
    assert seen_before_answer == ["message"], seen_before_answer
    deltas = [when for name, when in arrivals if name == "delta"]
    assert len(deltas) >= 4 and names[-1] == "done", names
    assert deltas[-1] - deltas[0] >= 0.8, f"the pieces arrived together: {[round(d - deltas[0], 2) for d in deltas]}"


def test_the_client_address_is_the_one_the_proxy_names(proxy, deployment):
    """MEWDEX_TRUSTED_PROXIES=127.0.0.1 and the metrics allow-list 127.0.0.2: a browser at 127.0.0.2
    reads /metrics through the proxy; one at 127.0.0.3 does not, whatever X-Forwarded-For it writes
    (the proxy sets the header to the address it saw)."""
    with proxy.client(SUB, CLIENT_IP) as allowed, proxy.client(SUB, OTHER_IP) as other:
        assert allowed.get("/memes/metrics").status_code == 200
        assert other.get("/memes/metrics").status_code == 404
        spoofed = other.get("/memes/metrics", headers={"X-Forwarded-For": CLIENT_IP, "Forwarded": f"for={CLIENT_IP}"})
        assert spoofed.status_code == 404


# ------------------------------------------------------------------ a real browser under the sub-path


def test_a_browser_under_the_sub_path_signs_in_uploads_chats_and_installs_the_worker(proxy, deployment):
    """Chromium (``example.org`` mapped to the proxy) opens /memes/chat: the sign-in form's script, the
    upload page's, the chat's stream and the service worker all use /memes/ (every request the page
    makes is under it and none is a 404); the worker's scope is /memes/."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from ui_helpers import CHROMIUM, CHROMIUM_ARGS

    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (make browser)")
    _sub, _root, gate, email = deployment
    gate.opened.set()  # the model answers at once here
    origin = f"http://{SUB}:{proxy.port}"
    args = [
        *CHROMIUM_ARGS,
        f"--host-resolver-rules=MAP {SUB} 127.0.0.1",
        f"--unsafely-treat-insecure-origin-as-secure={origin}",  # service workers need a secure context
    ]
    requests: list[tuple[str, int]] = []
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=args)
        try:
            pg = chromium.new_page()
            pg.on("response", lambda r: requests.append((r.url, r.status)))
            pg.goto(origin + "/memes/chat")
            pg.wait_for_url(f"{origin}/memes/login?next=/chat")
            pg.fill("input[name=email]", email)
            pg.fill("input[name=password]", PASSWORD)
            pg.click("#login-form button[value=login]")
            pg.wait_for_url(f"{origin}/memes/chat")
            scope = pg.evaluate("navigator.serviceWorker.ready.then((r) => r.scope)")
            assert scope == origin + "/memes/"

            pg.fill("#chat-input", "cats please")
            pg.press("#chat-input", "Enter")
            pg.wait_for_function(
                "() => [...document.querySelectorAll('.chat-text')].some((e) => e.textContent.includes('pieces'))"
            )
            assert "/memes/chat?c=" in pg.url

            pg.goto(origin + "/memes/upload")
            pg.set_input_files(
                "#upload-files", files=[{"name": "b.png", "mimeType": "image/png", "buffer": _png(4096)}]
            )
            link = pg.wait_for_selector(".upload-item[data-status=created] a")
            assert link.get_attribute("href").startswith("/memes/memes/")

            pg.click("[data-action=sign-out]")
            pg.wait_for_url(f"{origin}/memes/login")
        finally:
            chromium.close()
    local = [(url, status) for url, status in requests if url.startswith(origin)]
    assert local and all(urlsplit(url).path.startswith("/memes/") for url, _ in local), local
    assert not [(url, status) for url, status in local if status == 404], local
