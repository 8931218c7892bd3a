"""MEWDEX_BASE_PATH (issue 46, item 2): the setting's form, the public URL combined with it, and the
ASGI rule (``root_path`` = the base, ``path`` under it) that every URL mewdex builds comes from.
Behind real proxies: tests/integration/test_reverse_proxies.py."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from mewdex.config import Settings, get_settings
from mewdex.web.base_path import BasePath, cookie_path, prefix, route_path


@pytest.mark.parametrize(
    "given, expected", [("", ""), ("/", ""), ("/memes", "/memes"), ("memes/", "/memes"), (" /a/b/ ", "/a/b")]
)
def test_the_base_path_is_one_leading_slash_and_no_trailing_one(monkeypatch, given, expected):
    monkeypatch.setenv("MEWDEX_BASE_PATH", given)
    assert Settings(_env_file=None).base_path == expected


@pytest.mark.parametrize("given", ["/a/../b", "/memes?x=1", "/a//b", "/me mes", "/%2e%2e", '/"x'])
def test_a_base_path_that_is_not_a_plain_path_is_refused(monkeypatch, given):
    monkeypatch.setenv("MEWDEX_BASE_PATH", given)
    with pytest.raises(ValidationError, match="MEWDEX_BASE_PATH"):
        Settings(_env_file=None)


@pytest.mark.parametrize(
    "public, base, expected",
    [
        (None, "/memes", None),
        ("https://example.org", "", "https://example.org"),
        ("https://example.org/", "/memes", "https://example.org/memes"),
        ("https://example.org/memes/", "/memes", "https://example.org/memes"),
    ],
)
def test_absolute_links_are_the_public_url_with_the_base_path(monkeypatch, public, base, expected):
    if public:
        monkeypatch.setenv("MEWDEX_PUBLIC_URL", public)
    else:
        monkeypatch.delenv("MEWDEX_PUBLIC_URL", raising=False)
    monkeypatch.setenv("MEWDEX_BASE_PATH", base)
    assert Settings(_env_file=None).public_base() == expected


def _echo(request: Request) -> JSONResponse:
    return JSONResponse(
        {
            "url": str(request.url),
            "route": route_path(request.scope),
            "redirect": prefix(request, "/login?next=/x"),
            "cookie": cookie_path(request),
            "named": str(request.url_for("echo")),
        }
    )


@pytest.mark.parametrize("base", ["", "/memes"])
def test_a_request_the_proxy_stripped_is_served_under_the_base_path(monkeypatch, base):
    """The proxy sends ``/library``; the app sees ``/memes/library`` with root_path ``/memes``, routes
    it as ``/library``, and every URL it builds from the request is under /memes."""
    monkeypatch.setenv("MEWDEX_BASE_PATH", base)
    get_settings.cache_clear()
    try:
        app = BasePath(Starlette(routes=[Route("/library", _echo, name="echo")]))
        with TestClient(app, base_url="http://example.org") as client:
            seen = client.get("/library").json()
    finally:
        get_settings.cache_clear()
    assert seen == {
        "url": f"http://example.org{base}/library",
        "route": "/library",
        "redirect": f"{base}/login?next=/x",
        "cookie": base or "/",
        "named": f"http://example.org{base}/library",
    }


@pytest.mark.parametrize("base, prefix_", [("", "__Host-"), ("/memes", "__Secure-")])
def test_secure_cookies_under_a_sub_path_are_secure_prefixed_not_host_prefixed(monkeypatch, base, prefix_):
    """A ``__Host-`` cookie must have ``Path=/``, which a sub-path install's cookies do not: there they
    are ``__Secure-`` (still only kept when Secure), and the server reads that name back."""
    from mewdex.platform import sessions
    from mewdex.web.security import SESSION_COOKIES

    monkeypatch.setenv("MEWDEX_BASE_PATH", base)
    get_settings.cache_clear()
    try:
        assert sessions.cookie_names(True) == (prefix_ + "mewdex_session", prefix_ + "mewdex_csrf")
        assert sessions.cookie_names(False) == ("mewdex_session", "mewdex_csrf")
        assert prefix_ + "mewdex_session" in SESSION_COOKIES
    finally:
        get_settings.cache_clear()
