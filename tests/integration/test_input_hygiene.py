"""Input hygiene (issue 20 point 6): unstorable text in any JSON body is a 422 with a code, never a
500; an unexpected 500 is JSON and tells a keep-alive client that the connection closes."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest
import uvicorn

from conftest import client_for, wait_until

LONE_SURROGATE = '"\\ud800x"'
NUL = '"a\\u0000b"'


@pytest.fixture
def api(scope):
    with client_for(scope) as c:
        yield c


@pytest.mark.parametrize("text", [LONE_SURROGATE, NUL, '"\\udc00"'])
@pytest.mark.parametrize(
    "method, path, template",
    [
        ("POST", "/api/v1/search", '{"query": %s}'),
        ("POST", "/api/v1/collections", '{"name": %s}'),
        ("POST", "/api/v1/search", '{"query": "ok", "filters": {%s: 1}}'),
        ("POST", "/api/v1/collections", '{"name": "ok", "tags": [1, {"deep": [%s]}]}'),
    ],
)
def test_unstorable_json_text_is_422(api, method, path, template, text):
    r = api.request(method, path, content=template % text, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_text" and error["details"]["loc"][0] == "body"


def test_login_with_a_lone_surrogate_is_422_unauthenticated(mewdex_env):
    with client_for() as client:
        r = client.post(
            "/api/v1/auth/login",
            content='{"email": "\\ud800x@example.com", "password": "x"}',
            headers={"content-type": "application/json"},
        )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_text"


def test_escaped_text_that_can_be_stored_passes(api):
    r = api.post(
        "/api/v1/collections",
        content='{"name": "cat \\ud83d\\ude00 \\u732b"}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "cat 😀 猫"


def test_an_unexpected_500_is_json_and_closes_the_connection(mewdex_env):
    from mewdex.web.app import create_app

    app = create_app(workers=0)

    def boom():
        raise RuntimeError("a bug")

    app.add_api_route("/boom-for-test", boom)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", proxy_headers=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 60, 0.1, "the server to start")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            r = client.get("/boom-for-test")
            assert r.status_code == 500
            assert r.headers["content-type"].startswith("application/json")
            assert r.json()["error"]["code"] == "internal_error"
            assert r.headers["connection"] == "close"
            assert client.get("/health").status_code == 200  # the client reconnects: nothing dropped silently
    finally:
        server.should_exit = True
        thread.join(30)
