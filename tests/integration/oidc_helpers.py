"""A real OpenID Connect provider for the single sign-on tests, and the browser's part of the flow.

The provider is ``oidc-provider-mock`` (Authlib's authorization server in a Flask app: discovery,
JWKS, RS256 ID tokens, authorization codes used once, userinfo) served by werkzeug on a loopback
port in a thread. Its users are set with ``PUT /users/<sub>`` (the claims), a client is registered
with ``POST /oauth2/clients`` (its secret and redirect URI are then checked), and its authorization
page is a form posted with ``sub=<subject>`` (sign in as them) or ``action=deny``.

:func:`sso_sign_in` plays the browser with httpx: mewdex's ``/auth/oidc/login`` → the provider's
authorization form → mewdex's callback, following each redirect by hand.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import httpx


@dataclass
class Provider:
    issuer: str

    def user(self, sub: str, **claims) -> None:
        """Set the claims the provider gives ``sub`` (replacing earlier ones)."""
        r = httpx.put(f"{self.issuer}/users/{sub}", json=claims, timeout=10)
        assert r.status_code == 204, r.text

    def register_client(self, redirect_uri: str) -> tuple[str, str]:
        """A client whose secret and redirect URI the provider checks: ``(client_id, client_secret)``."""
        r = httpx.post(f"{self.issuer}/oauth2/clients", json={"redirect_uris": [redirect_uri]}, timeout=10)
        assert r.status_code == 201, r.text
        return r.json()["client_id"], r.json()["client_secret"]


@contextmanager
def oidc_provider(*, register: bool = True) -> Iterator[Provider]:
    """The provider on ``http://127.0.0.1:<free port>`` (nonces required; ``register``: clients must
    register, their secret and redirect URI are checked; else any client id and secret do)."""
    import oidc_provider_mock
    import werkzeug.serving

    app = oidc_provider_mock.app(require_nonce=True, require_client_registration=register)
    server = werkzeug.serving.make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield Provider(f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass
class Approval:
    """One sign-in taken to the provider and back: the ``callback`` URL the provider sent the browser to."""

    callback: str

    @property
    def params(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(urlsplit(self.callback).query).items()}


def approve(client: httpx.Client, sub: str | None, *, next_path: str = "/settings") -> Approval:
    """Start a sign-in in ``client`` (the browser, with its cookies) and answer the provider's form
    as ``sub`` (None: deny); the provider's redirect back to mewdex, not yet followed."""
    r = client.get("/auth/oidc/login", params={"next": next_path})
    assert r.status_code == 303, r.text
    authorize = r.headers["location"]
    query = parse_qs(urlsplit(authorize).query)
    assert query["scope"] == ["openid email profile"] and query["code_challenge_method"] == ["S256"], query
    assert query["state"][0] and query["nonce"][0] and query["code_challenge"][0], query
    form = httpx.get(authorize, timeout=10)
    assert form.status_code == 200 and 'name="sub"' in form.text, form.text[:500]
    r = httpx.post(authorize, data={"sub": sub} if sub is not None else {"action": "deny"}, timeout=10)
    assert r.status_code == 302, r.text[:500]
    return Approval(r.headers["location"])


def sso_sign_in(client: httpx.Client, sub: str | None, *, next_path: str = "/settings") -> httpx.Response:
    """The whole flow in ``client``: mewdex's answer to the provider's callback (303 to ``next_path``
    when signed in, else the page saying why)."""
    return client.get(approve(client, sub, next_path=next_path).callback)
