"""The MCP server (issue 16), built with the official ``mcp`` SDK (v2: ``MCPServer``).

Tools: ``search_memes``, ``search_by_image``, ``more_like_this``, ``get_meme``,
``list_collections`` (token scope ``read``), ``add_to_collection`` and ``create_collection``
(``write``), all through :mod:`mewdex.assistant.tools`, in the
caller's scope only. Two transports:

* stdio: ``mewdex mcp`` — the local scope with read and write, or (``--token``) the scope and token
  scopes of a personal API token taken from ``MEWDEX_TOKEN`` or a hidden prompt;
* streamable HTTP at ``/mcp`` of ``mewdex serve`` — a personal API token as ``Authorization:
  Bearer mdx_…`` (401 without a valid one; 403 without ``read``).

Sits between the interfaces and ``runtime``: ``cli`` and ``web`` import it, it imports services.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings

from mewdex.assistant import tools
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import ScopeContext
from mewdex.dto.errors import DomainError
from mewdex.inference.errors import BackendUnavailable
from mewdex.library.images import ImageError
from mewdex.platform import tokens

PATH = "/mcp"
INSTRUCTIONS = (
    "mewdex is the user's own meme library. Use search_memes with what the user wants to say "
    "(any language), get_meme to look at a candidate, and give the user the media_url of your pick."
)


@dataclass(frozen=True)
class Caller:
    """Who calls the tools: the scope they act in and their token scopes (``read``, ``write``)."""

    scope: ScopeContext
    scopes: frozenset[str]


def token_caller(token: str) -> Caller | None:
    """The caller a personal API token stands for (its user's scope and the token's scopes), or None."""
    with get_sessionmaker().begin() as session:
        found = tokens.resolve_token(session, token.strip())
        if found is None:
            return None
        row, user = found
        return Caller(ScopeContext(user.scope_id), frozenset(row.scopes or ()))


class ApiTokenVerifier:
    """The SDK's ``TokenVerifier`` over mewdex's personal API tokens (the token text is not kept)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        caller = await anyio.to_thread.run_sync(token_caller, token)
        if caller is None:
            return None
        return AccessToken(
            token="mdx_…",
            client_id="mewdex-personal-token",
            scopes=sorted(caller.scopes),
            subject=caller.scope.scope_id,
        )


def http_caller() -> Caller:
    access = get_access_token()
    if access is None or not access.subject:
        raise ToolError("authentication required")
    return Caller(ScopeContext(access.subject), frozenset(access.scopes))


def _run(caller: Callable[[], Caller], needed: str, fn: Callable[..., Any], *args: Any) -> Any:
    who = caller()
    if needed not in who.scopes:
        raise ToolError(f"insufficient_scope: this token lacks the {needed!r} scope")
    try:
        return fn(get_sessionmaker(), who.scope, *args)
    except (DomainError, ImageError) as exc:
        raise ToolError(f"{exc.code}: {exc.message}") from None
    except BackendUnavailable as exc:
        raise ToolError(f"backend_unavailable: {exc}") from None


def build(caller: Callable[[], Caller], *, http: bool = False, base_url: str = "http://127.0.0.1") -> MCPServer:
    """The server; ``caller()`` names who calls each tool (fixed for stdio, the bearer token's for HTTP)."""
    auth = verifier = None
    if http:
        verifier = ApiTokenVerifier()
        auth = AuthSettings(
            issuer_url=base_url,
            resource_server_url=base_url.rstrip("/") + PATH,
            required_scopes=["read"],
            validate_token_resource=False,
        )
    server = MCPServer("mewdex", instructions=INSTRUCTIONS, token_verifier=verifier, auth=auth)

    @server.tool()
    def search_memes(
        query: str, n: int = 5, animated: bool | None = None, collection: str | None = None
    ) -> list[dict[str, Any]]:
        """Find memes in the user's library for what they want to say ("I don't believe a word", "摸鱼").
        n: 1-20 results; animated: only GIFs/animations; collection: only that collection (name or id)."""
        return _run(caller, "read", tools.search_memes, query, n, animated, collection)

    @server.tool()
    def search_by_image(image_base64: str, n: int = 5) -> list[dict[str, Any]]:
        """Find the memes that look most like an image (base64-encoded PNG/JPEG/GIF/WEBP bytes)."""
        return _run(caller, "read", tools.search_by_image, image_base64, n)

    @server.tool()
    def more_like_this(meme_id: str, n: int = 5) -> list[dict[str, Any]]:
        """Find the memes that look most like one of the user's memes (visual neighbours)."""
        return _run(caller, "read", tools.more_like_this, meme_id, n)

    # Unstructured: a ``list[Any]`` output schema made the SDK serialise the Image object with
    # pydantic, which fails ("Error executing tool get_meme") whenever the meme has a picture.
    @server.tool(structured_output=False)
    def get_meme(meme_id: str) -> list[Any]:
        """One meme: its name, context (OCR text, description, tags), collections, and its picture."""
        facts, data, fmt = _run(caller, "read", tools.get_meme, meme_id)
        content: list[Any] = [json.dumps(facts, ensure_ascii=False)]
        if data is not None:
            content.append(Image(data=data, format=fmt))
        return content

    @server.tool()
    def list_collections() -> list[dict[str, Any]]:
        """The user's collections with their member counts."""
        return _run(caller, "read", tools.list_collections)

    @server.tool()
    def add_to_collection(collection: str, meme_ids: list[str]) -> dict[str, Any]:
        """Add memes to a collection (name or id; a new name creates it). Needs a token with `write`."""
        return _run(caller, "write", tools.add_to_collection, collection, meme_ids)

    @server.tool()
    def create_collection(name: str) -> dict[str, Any]:
        """Create an empty collection. Needs a token with `write`."""
        return _run(caller, "write", tools.create_collection, name)

    return server


def http_app(base_url: str = "http://127.0.0.1"):
    """The streamable HTTP transport as a Starlette app serving :data:`PATH`, and its server (whose
    ``session_manager.run()`` the host's lifespan must enter, once per server). Host checks are
    mewdex's own (``MEWDEX_ALLOWED_HOSTS``), so the SDK's DNS-rebinding check is off."""
    server = build(http_caller, http=True, base_url=base_url)
    app = server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return app, server


class HttpTransport:
    """An ASGI endpoint for :data:`PATHS` that serves a fresh :func:`http_app` per run of the host
    app (the SDK's session manager runs only once per server; tests start one app several times)."""

    PATHS = (PATH, "/.well-known/oauth-protected-resource" + PATH)

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._app = None

    @contextlib.asynccontextmanager
    async def running(self):
        app, server = http_app(self.base_url)
        async with server.session_manager.run():
            self._app = app
            try:
                yield
            finally:
                self._app = None

    async def __call__(self, scope, receive, send) -> None:
        if self._app is None:  # not started (or shutting down)
            await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"MCP is not running"})
            return
        await self._app(scope, receive, send)


def run_stdio(caller: Caller) -> None:
    """Serve the tools over stdio as ``caller`` until stdin closes."""
    build(lambda: caller).run("stdio")
