"""The assistant's tools are declared once (``assistant/catalogue.py``): the chat model's function
schemas and the MCP server's tools are both built from it — same names, same defaults and bounds,
and a change in an arguments model shows in both. No database: nothing here reaches a handler."""

from __future__ import annotations

import dataclasses

import anyio
from mcp import Client
from pydantic import Field

from mewdex import mcp_server
from mewdex.assistant import agent, catalogue
from mewdex.db.models import ScopeContext

READER = mcp_server.Caller(ScopeContext("00000000-0000-0000-0000-000000000000"), frozenset({"read"}))


def _mcp(calls):
    """Run ``calls(client)`` with the SDK's client connected in-process to a server for READER."""

    async def run():
        async with Client(mcp_server.build(lambda: READER)) as client:
            return await calls(client)

    return anyio.run(run)


def _mcp_tools() -> dict:
    async def listed(client):
        return {t.name: t for t in (await client.list_tools()).tools}

    return _mcp(listed)


def _agent_tools() -> dict:
    return {d["function"]["name"]: d["function"] for d in agent.tool_definitions(with_image=True)}


def _plain(spec: dict) -> dict:
    """A property's schema with an optional type (``anyOf [X, null]``) read as ``X``."""
    options = [o for o in spec.get("anyOf", ()) if o != {"type": "null"}]
    return {**spec, **options[0]} if len(options) == 1 else spec


def test_agent_and_mcp_offer_the_catalogues_tools_with_the_same_arguments():
    mcp, chat = _mcp_tools(), _agent_tools()
    assert set(chat) == {t.name for t in catalogue.CATALOGUE if "agent" in t.surfaces}
    assert set(mcp) == {t.name for t in catalogue.CATALOGUE if "mcp" in t.surfaces}
    assert set(chat) - set(mcp) == {"show_memes"}  # delivers cards in a chat; an MCP client shows memes itself
    for name in set(chat) & set(mcp):
        theirs, ours = mcp[name].input_schema, chat[name]["parameters"]
        assert mcp[name].description.startswith(chat[name]["description"])
        for arg, spec in ours["properties"].items():
            for key in ("type", "default", "minimum", "maximum", "minItems", "maxItems"):
                if key in spec:
                    assert _plain(theirs["properties"][arg]).get(key) == spec[key], (name, arg, key)
        assert set(ours["required"]) <= set(theirs.get("required", []))
        assert mcp[name].annotations.read_only_hint == (catalogue.BY_NAME[name].access == "read")
    assert mcp["add_to_collection"].annotations.destructive_hint is False
    assert chat["search_memes"]["parameters"]["properties"]["n"]["default"] == 8
    assert mcp["search_memes"].input_schema["properties"]["n"]["default"] == 8
    # Function calling gets plain JSON Schema: no titles, no $defs, optional arguments as their type,
    # and not the argument the chat fills with the attached image.
    assert "title" not in str(chat) and "$defs" not in str(chat) and "anyOf" not in str(chat)
    assert chat["search_memes"]["parameters"]["properties"]["animated"]["type"] == "boolean"
    assert "image_base64" not in chat["search_by_image"]["parameters"]["properties"]
    assert "image_base64" in mcp["search_by_image"].input_schema["required"]
    assert "search_by_image" not in {d["function"]["name"] for d in agent.tool_definitions(with_image=False)}
    # get_meme has a real output schema (structured content beside its image block).
    assert mcp["get_meme"].output_schema["properties"]["id"]["type"] == "string"


def test_a_change_in_an_arguments_model_shows_in_both(monkeypatch):
    class Narrower(catalogue.SearchMemesArgs):
        n: int = Field(3, ge=1, le=4, description="how many results")

    changed = tuple(
        dataclasses.replace(t, args=Narrower) if t.name == "search_memes" else t for t in catalogue.CATALOGUE
    )
    monkeypatch.setattr(catalogue, "CATALOGUE", changed)
    monkeypatch.setattr(catalogue, "BY_NAME", {t.name: t for t in changed})
    mcp_n = _mcp_tools()["search_memes"].input_schema["properties"]["n"]
    chat_n = _agent_tools()["search_memes"]["parameters"]["properties"]["n"]
    assert (mcp_n["default"], mcp_n["maximum"]) == (chat_n["default"], chat_n["maximum"]) == (3, 4)
    # ... and validates calls on both surfaces (before any handler runs).
    context = catalogue.ToolContext(None, READER.scope)  # type: ignore[arg-type] — never reached
    try:
        catalogue.call(catalogue.find("search_memes", "agent"), context, {"query": "cat", "n": 5})
    except catalogue.ToolFailure as exc:
        assert exc.code == "invalid_request" and "n:" in exc.message
    else:
        raise AssertionError("n=5 passed a model that allows at most 4")
    refused = _mcp(lambda client: client.call_tool("search_memes", {"query": "cat", "n": 5}))
    assert refused.is_error and "less than or equal to 4" in refused.content[0].text


def test_mcp_refuses_write_tools_without_the_write_scope_and_reports_tool_errors():
    async def calls(client):
        return (
            await client.call_tool("create_collection", {"name": "x"}),
            await client.call_tool("get_meme", {"meme_id": "m", "extra": 1}),
        )

    denied, unknown = _mcp(calls)
    assert denied.is_error and "insufficient_scope" in denied.content[0].text
    assert unknown.is_error and "extra" in unknown.content[0].text


def test_an_argument_sent_as_null_is_one_not_sent():
    # chat models send null for optional arguments they leave out; before the catalogue the agent took
    # its default (``args.get("n") or 8``), and MCP validates with the same model
    for model in (catalogue.SearchMemesArgs, mcp_server._arguments_model(catalogue.find("search_memes", "mcp"))):
        args = model.model_validate({"query": "cat", "n": None, "animated": None, "collection": None})
        assert (args.query, args.n, args.animated) == ("cat", catalogue.tools.DEFAULT_RESULTS, None)
    context = catalogue.ToolContext(None, READER.scope)  # type: ignore[arg-type] — never reached
    try:
        catalogue.call(catalogue.find("get_meme", "agent"), context, {"meme_id": None})
    except catalogue.ToolFailure as exc:
        assert exc.code == "invalid_request" and "meme_id: Field required" in exc.message
    else:
        raise AssertionError("get_meme ran without a meme id")
