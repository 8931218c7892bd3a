"""Issue 13 (Security): a default install that no web page, proxy or stranger can take over.

Real parts only: the real app over the embedded PostgreSQL, requests through the ASGI interface or
a real socket, a real local HTTP server for the egress guard.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import resource
import tempfile
import threading
import time

import pytest
from fastapi.testclient import TestClient

from accounts_helpers import PASSWORD, auth_app, bearer  # noqa: F401 (fixture)
from conftest import LOCAL_CLIENT

MiB = 1024 * 1024


def code(r) -> str:
    return r.json()["error"]["code"]


# ---------------------------------------------------------------- 1. Host allow-list (DNS rebinding)


@pytest.mark.parametrize("mode", ["none", "auto", "required"])
def test_a_foreign_host_gets_421_in_every_auth_mode(settings_env, mewdex_env, mode):
    from mewdex.web.app import create_app

    settings_env(MEWDEX_AUTH=mode)
    with TestClient(create_app(workers=0), base_url="http://rebind.example:8275",
                    client=("127.0.0.1", 50000), raise_server_exceptions=False) as c:
        same_origin = {"Origin": "http://rebind.example:8275"}
        for method, path in (("GET", "/api/v1/me"), ("GET", "/"), ("GET", "/health"),
                             ("POST", "/api/v1/auth/signup"), ("DELETE", "/api/v1/memes/x")):
            r = c.request(method, path, headers=same_origin, json={"email": "a@b.cd", "password": PASSWORD})
            assert r.status_code == 421 and code(r) == "host_not_allowed", (method, path, r.text)
    with TestClient(create_app(workers=0), **LOCAL_CLIENT) as c:  # the owner's own names still work
        for host in ("127.0.0.1:8275", "localhost:8275", "[::1]:8275", "LOCALHOST"):
            assert c.get("/health", headers={"Host": host}).status_code != 421, host
    settings_env(MEWDEX_ALLOWED_HOSTS='["memes.example.org"]')
    with TestClient(create_app(workers=0), base_url="https://memes.example.org", client=("127.0.0.1", 1)) as c:
        assert c.get("/health").status_code != 421


# ---------------------------------------------------------------- 2. a loopback bind is not a local user


@pytest.mark.parametrize("header", ["X-Forwarded-For", "Forwarded", "X-Real-IP", "X-Forwarded-Host"])
def test_forwarded_requests_never_get_no_login_mode(settings_env, mewdex_env, header):
    from mewdex.web.app import create_app

    settings_env(MEWDEX_AUTH="none")
    value = "for=203.0.113.9" if header == "Forwarded" else "203.0.113.9"
    with TestClient(create_app(workers=0), **LOCAL_CLIENT, raise_server_exceptions=False) as c:
        assert c.get("/api/v1/me").status_code == 200  # the owner, on this machine
        r = c.get("/api/v1/me", headers={header: value})
        assert r.status_code == 401 and code(r) == "auth_required"
        r = c.post("/api/v1/collections", json={"name": "x"}, headers={header: value})
        assert r.status_code == 401 and code(r) == "auth_required"
        assert c.get("/api/v1/admin/users", headers={header: value}).status_code == 401
    with TestClient(create_app(workers=0), base_url="http://127.0.0.1:8275", client=("192.168.1.20", 4000),
                    raise_server_exceptions=False) as other_machine:
        assert other_machine.get("/api/v1/me").status_code == 401


def test_web_sign_up_cannot_create_the_first_admin(settings_env, mewdex_env, sessions):
    from sqlalchemy import func, select

    from mewdex.db.models import User
    from mewdex.web.app import create_app

    settings_env(MEWDEX_AUTH="auto", MEWDEX_BCRYPT_ROUNDS="4")
    with sessions.begin() as s:
        before = s.execute(select(func.count()).select_from(User)).scalar_one()
    with TestClient(create_app(workers=0), **LOCAL_CLIENT, raise_server_exceptions=False) as c:
        for headers in ({}, {"X-Forwarded-For": "203.0.113.9"}):
            r = c.post("/api/v1/auth/signup", json={"email": "first-admin@example.com", "password": PASSWORD},
                       headers=headers)
            assert r.status_code in (401, 403), r.text
            assert code(r) in ("admin_required", "signup_disabled", "auth_required")
    with sessions.begin() as s:
        assert s.execute(select(func.count()).select_from(User)).scalar_one() == before


def test_serve_prints_a_one_time_setup_code_for_the_first_admin(sessions):
    from sqlalchemy import delete

    from mewdex.db.models import User
    from mewdex.platform.setup import consume_setup_code, issue_setup_code

    session = sessions()
    try:
        session.execute(delete(User))
        first, second = issue_setup_code(session), issue_setup_code(session)
        assert first and second and first != second
        assert not consume_setup_code(session, first)  # replaced by the newer one
        assert consume_setup_code(session, second) and not consume_setup_code(session, second)
    finally:
        session.rollback()
        session.close()


# ---------------------------------------------------------------- 3. bodies: auth first, bounded


def _drive(app, method: str, path: str, headers: dict[str, str], total: int, chunk: int = 256 * 1024,
           client=("203.0.113.7", 4000)) -> dict:
    """Send a ``total``-byte body (one reused zero chunk, so the test itself stays small) to the ASGI
    app; returns the status, code, bytes the app pulled and seconds to the answer."""
    zeros = b"\0" * chunk
    state = {"sent": 0, "status": None, "body": b""}

    async def receive():
        if state["status"] is not None or state["sent"] >= total:
            return {"type": "http.disconnect"}
        n = min(chunk, total - state["sent"])
        state["sent"] += n
        return {"type": "http.request", "body": zeros[:n], "more_body": state["sent"] < total}

    async def send(message):
        if message["type"] == "http.response.start":
            state["status"] = message["status"]
        elif message["type"] == "http.response.body":
            state["body"] += message.get("body", b"")

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(k.lower().encode(), v.encode()) for k, v in
                         {"host": "127.0.0.1:8275", **headers}.items()],
             "client": client, "server": ("127.0.0.1", 8275)}
    started = time.monotonic()
    asyncio.run(app(scope, receive, send))
    body = json.loads(state["body"] or b"null")
    return {"status": state["status"], "code": (body or {}).get("error", {}).get("code"),
            "received": state["sent"], "seconds": time.monotonic() - started}


def test_unauthenticated_100_mb_bodies_are_refused_within_a_second(settings_env, mewdex_env):
    from mewdex.web.app import create_app

    settings_env(MEWDEX_AUTH="required")
    app = create_app(workers=0)
    with TestClient(app, **LOCAL_CLIENT):  # lifespan: migrations done
        tmp = tempfile.gettempdir()
        files_before = set(os.listdir(tmp))
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        multipart = {"content-type": "multipart/form-data; boundary=b"}
        cases = [
            ("POST", "/api/v1/search/image", multipart, {401}),
            ("POST", "/ui/search/image", multipart, {401}),
            ("POST", "/api/v1/memes", multipart, {401}),
            ("POST", "/api/v1/collections/import", multipart, {401}),
            ("POST", "/api/v1/auth/login", {"content-type": "application/json"}, {413}),
            ("POST", "/api/v1/auth/signup", {"content-type": "application/json"}, {413}),
            ("POST", "/api/v1/search", {"content-type": "application/json"}, {401}),
            ("PATCH", "/api/v1/collections/00000000-0000-0000-0000-000000000000",
             {"content-type": "application/json"}, {401}),
        ]
        for method, path, headers, statuses in cases:
            for declared in (True, False):  # with a true Content-Length and streamed without one
                h = {**headers, **({"content-length": str(100 * MiB)} if declared else {})}
                r = _drive(app, method, path, h, 100 * MiB)
                assert r["status"] in statuses, (path, declared, r)
                assert r["seconds"] < 1.0, (path, declared, r)
                assert r["received"] <= 64 * 1024 + 256 * 1024, (path, declared, r)
        assert set(os.listdir(tmp)) - files_before == set()
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 64 * 1024  # KiB: < 64 MiB


def test_signed_in_json_bodies_are_bounded_too(auth_app):
    u = auth_app.new("big")
    r = _drive(auth_app.app, "POST", "/api/v1/search",
               {"content-type": "application/json", "authorization": f"Bearer {u.token}"}, 100 * MiB)
    assert r["status"] == 413 and r["code"] == "request_too_large" and r["received"] <= 64 * 1024 + 256 * 1024
    big = u.client.post("/api/v1/search", json={"query": "x" * (70 * 1024)}, headers=bearer(u.token))
    assert big.status_code == 413
    image = _drive(auth_app.app, "POST", "/api/v1/search/image",
                   {"content-type": "multipart/form-data; boundary=b", "authorization": f"Bearer {u.token}",
                    "content-length": str(100 * MiB)}, 100 * MiB)
    assert image["status"] == 413 and image["code"] == "upload_too_large" and image["received"] == 0


# ---------------------------------------------------------------- 9. hardening headers


def test_pages_and_media_carry_the_hardening_headers(settings_env, mewdex_env):
    from mewdex.web.app import create_app

    settings_env(MEWDEX_AUTH="none")
    with TestClient(create_app(workers=0), **LOCAL_CLIENT, raise_server_exceptions=False) as c:
        for path in ("/", "/library", "/login", "/api/v1/me", "/static/app.js"):
            r = c.get(path)
            assert r.headers["x-content-type-options"] == "nosniff", path
            assert "frame-ancestors 'none'" in r.headers["content-security-policy"], path
            assert "object-src 'none'" in r.headers["content-security-policy"]
            assert r.headers["referrer-policy"]
        page = c.get("/")
        assert '"allowEval": false' in page.text and '"allowScriptTags": false' in page.text
        assert "<script>" not in c.get("/login").text  # no inline script: the CSP would block it
        media = c.get("/media/00000000-0000-0000-0000-000000000000")
        assert media.headers["content-security-policy"] == "default-src 'none'; sandbox"
        assert media.headers["x-content-type-options"] == "nosniff"
        assert media.headers["cross-origin-resource-policy"] == "same-origin"


# ---------------------------------------------------------------- 14. egress guard


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", self.path.split("to=", 1)[1])
            self.end_headers()
            return
        body = b'{"ok": true}' if self.path != "/big" else b"x" * (2 * MiB)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def local_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_egress_refuses_private_addresses_and_redirects_to_them(settings_env, mewdex_env, local_server):
    from mewdex import egress

    port = local_server
    for url in (f"http://127.0.0.1:{port}/", "https://127.0.0.1/", "https://10.0.0.1/", "https://169.254.169.254/",
                "https://[::1]/", "https://[::ffff:127.0.0.1]/", "https://100.64.0.1/", "https://[fd00::1]/",
                "https://localhost/", "ftp://example.com/"):
        with pytest.raises(egress.EgressError) as refused:
            egress.fetch("GET", url)
        assert refused.value.code in ("egress_address_refused", "egress_scheme_refused"), url
    # The admin allows the local test server: http is then fine too …
    settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([f"127.0.0.1:{port}"]))
    ok = egress.fetch("GET", f"http://127.0.0.1:{port}/data", content_types=("application/json",))
    assert ok.status == 200 and ok.json() == {"ok": True}
    # … but a redirect from it to another private address is checked again and refused.
    with pytest.raises(egress.EgressError) as redirected:
        egress.fetch("GET", f"http://127.0.0.1:{port}/redirect?to=http://169.254.169.254/latest/meta-data/")
    assert redirected.value.code in ("egress_address_refused", "egress_scheme_refused")
    with pytest.raises(egress.EgressError) as too_many:
        egress.fetch("GET", f"http://127.0.0.1:{port}/redirect?to=/redirect?to=/redirect?to=/redirect?to=/data")
    assert too_many.value.code == "egress_too_many_redirects"
    with pytest.raises(egress.EgressError) as big:
        egress.fetch("GET", f"http://127.0.0.1:{port}/big", max_bytes=MiB)
    assert big.value.code == "egress_too_large"
    with pytest.raises(egress.EgressError) as kind:
        egress.fetch("GET", f"http://127.0.0.1:{port}/data", content_types=("image/",))
    assert kind.value.code == "egress_content_type"


def test_egress_refuses_a_name_that_resolves_to_a_private_address(settings_env, mewdex_env):
    from mewdex import egress

    # "localhost" is a name (resolved through the system resolver) that resolves to loopback.
    with pytest.raises(egress.EgressError) as refused:
        egress.check_url("https://localhost:8443/")
    assert refused.value.code == "egress_address_refused"
    assert egress.forbidden_address(__import__("ipaddress").ip_address("::ffff:10.0.0.1"))
    assert not egress.forbidden_address(__import__("ipaddress").ip_address("93.184.215.14"))


def test_only_the_egress_module_imports_an_http_client():
    import ast
    from pathlib import Path

    import mewdex

    root = Path(mewdex.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        if path == root / "egress.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] in ("httpx", "requests", "urllib3", "aiohttp") or n == "urllib.request"
                   for n in names):
                offenders.append(str(path.relative_to(root)))
    assert offenders == []
