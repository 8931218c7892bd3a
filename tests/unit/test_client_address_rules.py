"""The one decision of a request's client address (``web.security.client_address``), and the one way
uvicorn is started (its own proxy handling off), so nothing else can decide it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mewdex.config import get_settings
from mewdex.web.security import client_address, is_this_machine

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def proxies(monkeypatch):
    def apply(trusted: str, header: str | None = None) -> None:
        monkeypatch.setenv("MEWDEX_TRUSTED_PROXIES", trusted)
        if header is not None:
            monkeypatch.setenv("MEWDEX_PROXY_CLIENT_HEADER", header)
        get_settings.cache_clear()

    yield apply
    monkeypatch.delenv("MEWDEX_TRUSTED_PROXIES", raising=False)
    monkeypatch.delenv("MEWDEX_PROXY_CLIENT_HEADER", raising=False)
    get_settings.cache_clear()


def h(**headers: str) -> list[tuple[bytes, bytes]]:
    return [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in headers.items()]


def test_without_trusted_proxies_the_peer_is_the_client(proxies):
    proxies("")
    spoof = h(x_forwarded_for="203.0.113.9", forwarded="for=203.0.113.9", x_real_ip="203.0.113.9")
    assert client_address("127.0.0.1", spoof) == "127.0.0.1"
    assert client_address("::ffff:192.0.2.4", spoof) == "192.0.2.4"
    assert client_address("", spoof) == "unknown"
    assert is_this_machine("127.0.0.1", []) and is_this_machine("::1", [])
    assert not is_this_machine("127.0.0.1", spoof[:1]) and not is_this_machine("192.0.2.4", [])


@pytest.mark.parametrize(
    "header, value, client",
    [
        ("x-forwarded-for", "192.0.2.50", "192.0.2.50"),
        ("x-forwarded-for", "203.0.113.9, 192.0.2.50", "192.0.2.50"),  # the client's left part loses
        ("x-forwarded-for", "203.0.113.9, 192.0.2.50, 10.0.0.2", "192.0.2.50"),  # an inner trusted proxy is skipped
        ("x-forwarded-for", "10.0.0.3, 10.0.0.2", "10.0.0.3"),  # every hop trusted: the leftmost
        ("x-forwarded-for", "[2001:db8::1]:4711", "2001:db8::1"),
        ("x-forwarded-for", "not-an-address", "127.0.0.1"),  # malformed: the peer
        ("x-forwarded-for", "203.0.113.9, unknown", "127.0.0.1"),
        ("x-forwarded-for", "", "127.0.0.1"),
        ("forwarded", 'for=203.0.113.9, for="[2001:db8::7]:80";proto=https', "2001:db8::7"),
        ("forwarded", "for=203.0.113.9;by=10.0.0.2, For=192.0.2.8, for=10.0.0.2", "192.0.2.8"),
        ("forwarded", "for=_hidden", "127.0.0.1"),
        ("forwarded", 'for="192.0.2.8', "127.0.0.1"),  # an open quote
        ("forwarded", "proto=https", "127.0.0.1"),  # a hop without for=
        ("x-real-ip", "192.0.2.8", "192.0.2.8"),
        ("x-real-ip", "203.0.113.9, 192.0.2.8", "127.0.0.1"),  # one address or nothing
    ],
)
def test_from_a_trusted_proxy_the_rightmost_untrusted_hop_of_its_header(proxies, header, value, client):
    proxies("127.0.0.1,10.0.0.0/8", header)
    headers = [(header.encode(), value.encode())]
    assert client_address("127.0.0.1", headers) == client
    assert not is_this_machine("127.0.0.1", headers) and not is_this_machine("127.0.0.1", [])


def test_only_the_configured_header_counts_and_repeated_lines_join_in_order(proxies):
    proxies("127.0.0.1")
    spoofed_elsewhere = h(forwarded="for=203.0.113.9", x_real_ip="203.0.113.9", x_forwarded_for="192.0.2.50")
    assert client_address("127.0.0.1", spoofed_elsewhere) == "192.0.2.50"
    assert client_address("127.0.0.1", h(forwarded="for=203.0.113.9")) == "127.0.0.1"
    two_lines = [(b"x-forwarded-for", b"203.0.113.9"), (b"x-forwarded-for", b"192.0.2.50")]
    assert client_address("127.0.0.1", two_lines) == "192.0.2.50"


def test_a_trusted_proxy_list_with_a_typo_stops_the_settings(monkeypatch):
    from pydantic import ValidationError

    from mewdex.config import Settings

    monkeypatch.setenv("MEWDEX_TRUSTED_PROXIES", "127.0.0.1,10.0.0.0/33")
    with pytest.raises(ValidationError, match="MEWDEX_TRUSTED_PROXIES"):
        Settings(_env_file=None)
    monkeypatch.setenv("MEWDEX_TRUSTED_PROXIES", "127.0.0.1, [::1]")
    monkeypatch.setenv("MEWDEX_PROXY_CLIENT_HEADER", "X-Forwarded-For")
    settings = Settings(_env_file=None)
    assert settings.trusted_proxies == ["127.0.0.1", "::1"] and settings.proxy_client_header == "x-forwarded-for"


def test_every_uvicorn_start_turns_its_proxy_handling_off():
    """uvicorn's ProxyHeadersMiddleware (on by default, trusting 127.0.0.1) would rewrite the peer
    before the app sees it: every ``uvicorn.run``/``uvicorn.Config`` in the code and the tests'
    servers passes ``proxy_headers=False``."""
    calls = []
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("run", "Config")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "uvicorn"
            ):
                off = any(
                    k.arg == "proxy_headers" and isinstance(k.value, ast.Constant) and k.value.value is False
                    for k in node.keywords
                )
                calls.append((f"{path.relative_to(ROOT)}:{node.lineno}", off))
    assert any(where.startswith("src/mewdex/cli/server.py") for where, _ in calls)
    assert [where for where, off in calls if not off] == []


def test_an_ipv4_mapped_entry_names_the_ipv4_peer_it_is(proxies, monkeypatch):
    """A dual-stack server (``--host ::``) sees an IPv4 proxy as ``::ffff:a.b.c.d``, and that is how an
    operator copies it from a log: the entry must trust that proxy (and a mapped network its IPv4
    network), as the peer is compared in its IPv4 form. It was accepted and silently trusted no one
    (every client then looked like the proxy: one per-address sign-in limit for all of them);
    MEWDEX_METRICS_ALLOW's entries are read the same way."""
    from mewdex.web.metrics import _in_allow_list

    proxies("::ffff:192.0.2.10, ::ffff:10.1.0.0/112")
    forwarded = h(x_forwarded_for="203.0.113.9")
    for peer in ("192.0.2.10", "::ffff:192.0.2.10", "10.1.2.3", "::ffff:10.1.2.3"):
        assert client_address(peer, forwarded) == "203.0.113.9", peer
    assert client_address("10.2.0.1", forwarded) == "10.2.0.1"
    monkeypatch.setenv("MEWDEX_METRICS_ALLOW", "::ffff:198.51.100.0/120")
    get_settings.cache_clear()
    assert _in_allow_list("198.51.100.7", get_settings().metrics_allow)
    assert not _in_allow_list("198.51.101.7", get_settings().metrics_allow)
    monkeypatch.delenv("MEWDEX_METRICS_ALLOW")


def test_a_clients_open_quote_does_not_swallow_the_proxys_own_forwarded_line(proxies):
    """A proxy that adds its own ``Forwarded`` line after the client's: a quote the client left open
    ends with its line (RFC 7230: a quoted-string never spans header lines), so the proxy's element is
    still read and the client is named; joined first, the open quote ate the proxy's line and every
    such client was counted as the proxy itself (one shared per-address allowance)."""
    proxies("127.0.0.1", "forwarded")
    lines = [(b"forwarded", b'for="203.0.113.9'), (b"forwarded", b"for=192.0.2.8")]
    assert client_address("127.0.0.1", lines) == "192.0.2.8"
    lines = [(b"forwarded", b"for=192.0.2.8"), (b"forwarded", b'for="203.0.113.9')]
    assert client_address("127.0.0.1", lines) == "127.0.0.1"  # the proxy's own line is malformed: the peer
