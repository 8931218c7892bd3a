"""The MCP server (issue 16), built with the official ``mcp`` SDK (v2: ``MCPServer``).

Tools: the MCP surface of :mod:`mewdex.assistant.catalogue` (``search_memes``, ``search_by_image``,
``more_like_this``, ``get_meme``, ``list_collections`` with token scope ``read``;
``create_collection`` and ``add_to_collection`` with ``write``), registered from the catalogue
(arguments model as input schema, output model as structured output; ``get_meme`` also returns the
picture as an image block), in the caller's scope only. Two transports:

* stdio: ``mewdex mcp`` — the local scope with read and write, or (``--token``) the scope and token
  scopes of a personal API token taken from ``MEWDEX_TOKEN`` or a hidden prompt;
* streamable HTTP at ``/mcp`` of ``mewdex serve`` — a personal API token as ``Authorization:
  Bearer mdx_…`` (401 without a valid one; 403 without ``read``).

Sits between the interfaces and ``runtime``: ``cli`` and ``web`` import it, it imports services.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import anyio.to_thread
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, create_model

from mewdex.assistant import service as assistant
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import ScopeContext
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


def _arguments_model(tool: assistant.Tool) -> type[ArgModelBase]:
    """The tool's arguments model as the SDK validates arguments (its ``ArgModelBase``)."""
    return cast("type[ArgModelBase]", type(tool.args.__name__, (tool.args, ArgModelBase), {}))


def _output_model(tool: assistant.Tool) -> tuple[Any, bool]:
    """The SDK's output model of ``tool.output`` and whether the result is wrapped in ``{"result"}``
    (structured content is an object; a list goes in ``result``)."""
    if isinstance(tool.output, type) and issubclass(tool.output, BaseModel):
        return tool.output, False
    return create_model(f"{tool.name}_output", result=(tool.output, ...)), True


def _register(tool: assistant.Tool, caller: Callable[[], Caller]) -> Tool:
    """The catalogue's ``tool`` as an SDK tool: ``insufficient_scope`` without the token scope it
    needs, the catalogue's errors as ``code: message`` tool errors."""

    def run(**arguments: Any) -> Any:
        who = caller()
        if tool.access not in who.scopes:
            raise ToolError(f"insufficient_scope: this token lacks the {tool.access!r} scope")
        try:
            result = assistant.call_tool(tool, assistant.ToolContext(get_sessionmaker(), who.scope), arguments)
        except assistant.ToolFailure as exc:
            raise ToolError(str(exc)) from None
        if isinstance(result, assistant.Pictured):
            content: list[Any] = [TextContent(text=json.dumps(result.value, ensure_ascii=False, default=str))]
            if result.data is not None:
                content.append(Image(data=result.data, format=result.format).to_image_content())
            return CallToolResult(content=content, structured_content=result.value)
        return result

    args = _arguments_model(tool)
    output, wrap = _output_model(tool)
    return Tool(
        fn=run,
        name=tool.name,
        description=tool.description + (" Needs a token with `write`." if tool.access == "write" else ""),
        parameters=args.model_json_schema(by_alias=True),
        fn_metadata=FuncMetadata(arg_model=args, output_model=output, wrap_output=wrap),
        is_async=False,
        # Write tools only create and add: nothing is removed or overwritten.
        annotations=ToolAnnotations(
            read_only_hint=tool.access == "read", destructive_hint=False if tool.access == "write" else None
        ),
    )


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
    return MCPServer(
        "mewdex",
        instructions=INSTRUCTIONS,
        token_verifier=verifier,
        auth=auth,
        tools=[_register(tool, caller) for tool in assistant.offered_tools("mcp")],
    )


def http_app(base_url: str = "http://127.0.0.1"):
    """The streamable HTTP transport as a Starlette app serving :data:`PATH`, and its server (whose
    ``session_manager.run()`` the host's lifespan must enter, once per server). Host checks are
    mewdex's own (``MEWDEX_ALLOWED_HOSTS``), so the SDK's DNS-rebinding check is off. ``mewdex serve``
    builds it at the first request to ``/mcp`` (:mod:`mewdex.web.mcp_mount`)."""
    server = build(http_caller, http=True, base_url=base_url)
    app = server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return app, server


def run_stdio(caller: Caller) -> None:
    """Serve the tools over stdio as ``caller`` until stdin closes."""
    build(lambda: caller).run("stdio")
