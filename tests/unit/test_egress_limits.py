"""egress.fetch against real local servers (issue 31, findings 4 and 5): an overall deadline per call
cuts a server that trickles a byte every 2 s (in its body or in its headers); 408/429 are retried
after their Retry-After; a redirect to another origin loses the credential headers, and a 307/308
there never re-sends the body."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mewdex import egress
from mewdex.config import get_settings


class _Server:
    """A local HTTP server recording each request ``(method, path, headers, body)``; ``route(handler)``
    answers by path."""

    def __init__(self, route):
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                try:
                    route(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = _any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _answer(handler, status: int, body: bytes = b"ok", headers: dict[str, str] | None = None):
    handler.send_response(status)
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture
def servers(monkeypatch):
    """``servers(route)`` starts a local server, allow-listed for egress (stopped after the test)."""
    started: list[_Server] = []

    def start(route):
        server = _Server(route)
        started.append(server)
        monkeypatch.setenv("MEWDEX_EGRESS_ALLOW_HOSTS", json.dumps([f"127.0.0.1:{s.port}" for s in started]))
        get_settings.cache_clear()
        return server

    yield start
    for server in started:
        server.close()
    get_settings.cache_clear()


def _trickle(handler, *, in_headers: bool):
    """One byte every 2 s, for a minute: in the body, or (``in_headers``) before the headers end."""
    handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
    if not in_headers:
        handler.wfile.write(b"Content-Length: 30\r\n\r\n")
    for _ in range(30):
        handler.wfile.write(b"X-Slow: 1\r\n" if in_headers else b"x")
        handler.wfile.flush()
        time.sleep(2)


@pytest.mark.parametrize("in_headers", [False, True], ids=["body", "headers"])
def test_a_trickling_server_is_cut_at_the_deadline(servers, in_headers):
    server = servers(lambda h: _trickle(h, in_headers=in_headers))
    started = time.monotonic()
    with pytest.raises(egress.EgressError) as err:
        egress.fetch("GET", server.url + "/slow", timeout=5.0, deadline=2.5)
    elapsed = time.monotonic() - started
    assert err.value.code == "egress_deadline" and err.value.retryable
    assert 2.4 <= elapsed < 3.5, elapsed  # each read waits ≤ 2 s: only the deadline ends it
    assert egress.DEFAULT_DEADLINE_SECONDS <= 60


def test_a_read_timeout_has_its_own_code_and_a_refused_connection_does_not(servers):
    def silent(handler):
        time.sleep(1.5)  # answers after the caller's read timeout
        _answer(handler, 200)

    server = servers(silent)
    with pytest.raises(egress.EgressError) as err:
        egress.fetch("GET", server.url + "/slow", timeout=0.3, deadline=10.0)
    assert err.value.code == "egress_timeout" and err.value.retryable
    assert err.value.code in egress.TIMEOUT_CODES and "did not answer in time" in err.value.message
    closed = servers(lambda h: _answer(h, 200))
    closed.close()  # nothing listens there any more
    with pytest.raises(egress.EgressError) as err:
        egress.fetch("GET", closed.url + "/gone", timeout=0.3, deadline=10.0)
    assert err.value.code == "egress_failed" and err.value.retryable
    assert err.value.code not in egress.TIMEOUT_CODES


def test_408_and_429_are_retried_after_retry_after(servers):
    answers = iter([(429, {"Retry-After": "1"}), (408, {}), (200, {})])
    busy = servers(lambda h: _answer(h, *(lambda a: (a[0], b"done", a[1]))(next(answers))))
    started = time.monotonic()
    result = egress.fetch("POST", busy.url + "/hook", json={"n": 1})
    assert result.status == 200 and result.content == b"done"
    assert [r[0] for r in busy.requests] == ["POST"] * 3 and all(r[3] == b'{"n":1}' for r in busy.requests)
    assert time.monotonic() - started >= 1.0 + 1.0  # Retry-After 1 s, then 1 s (a 408 without one)

    # a wait longer than the call may take is the caller's: the answer comes back with it
    later = servers(lambda h: _answer(h, 429, b"slow down", {"Retry-After": "120"}))
    started = time.monotonic()
    result = egress.fetch("POST", later.url + "/hook", json={}, deadline=20.0)
    assert result.status == 429 and result.retry_after == 120 and len(later.requests) == 1
    assert time.monotonic() - started < 2
    # a 429 without Retry-After is the caller's (Telegram puts retry_after in its body)
    bare = servers(lambda h: _answer(h, 429, b"{}"))
    assert egress.fetch("GET", bare.url + "/x").status == 429 and len(bare.requests) == 1
    assert egress.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


CREDENTIALS = {
    "Authorization": "Bearer onebot-token-1",
    "Api-Key": "Api-Key yandex-key-2",
    "Cookie": "session=abc",
    "X-Secret-Thing": "caller-declared-3",
}


def test_a_cross_origin_redirect_drops_credentials_and_never_resends_a_body(servers):
    other = servers(lambda h: _answer(h, 200, b"landed"))

    def route(h):
        target = h.path.split("to=", 1)[1] if "to=" in h.path else ""
        if h.path.startswith("/same"):
            _answer(h, 302, b"", {"Location": "/final"})
        elif h.path.startswith("/final"):
            _answer(h, 200, b"home")
        else:
            _answer(h, int(h.path[1:4]), b"", {"Location": target})

    first = servers(route)
    # same origin: the headers stay
    assert egress.fetch("GET", first.url + "/same", headers=CREDENTIALS).content == b"home"
    assert all(first.requests[-1][2][k.lower()] == v for k, v in CREDENTIALS.items())
    # another origin (another port): every credential header is gone, the rest stays
    standard = {k.lower() for k in CREDENTIALS} - {"x-secret-thing"}
    for status in (302, 307, 308):
        result = egress.fetch(
            "GET", f"{first.url}/{status}?to={other.url}/landing", headers={**CREDENTIALS, "Accept": "text/plain"}
        )
        assert result.content == b"landed" and result.url == f"{other.url}/landing"
        sent = other.requests[-1][2]
        assert not standard & set(sent), sent
        assert sent["accept"] == "text/plain" and sent["x-secret-thing"] == "caller-declared-3"
    # ... and the headers a caller declares secret
    egress.fetch(
        "GET", f"{first.url}/302?to={other.url}/landing", headers=CREDENTIALS, secret_headers=("x-secret-thing",)
    )
    assert not {k.lower() for k in CREDENTIALS} & set(other.requests[-1][2])
    # a 307/308 to another origin would re-send the body (and its signature): refused, nothing sent
    reached = len(other.requests)
    for status in (307, 308):
        with pytest.raises(egress.EgressError) as err:
            egress.fetch(
                "POST", f"{first.url}/{status}?to={other.url}/steal", headers=CREDENTIALS, json={"secret": "body"}
            )
        assert err.value.code == "egress_redirect_refused"
    assert len(other.requests) == reached
    # a 303 turns it into a GET without the body, and without the credentials
    result = egress.fetch(
        "POST",
        f"{first.url}/303?to={other.url}/after",
        headers=CREDENTIALS,
        json={"a": 1},
        secret_headers=("X-Secret-Thing",),
    )
    method, _path, sent, body = other.requests[-1]
    assert result.status == 200 and method == "GET" and body == b""
    assert not {k.lower() for k in CREDENTIALS} & set(sent)
