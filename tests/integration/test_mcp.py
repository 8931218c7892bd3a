"""MCP (issue 16) with the SDK's own client: over stdio (``mewdex mcp``) and over streamable HTTP
(``/mcp`` of a real ``mewdex serve``, bearer personal API tokens with scopes). A caption search
returns the expected meme; a token without ``write`` cannot add to a collection; every tool sees
only the caller's scope."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import socket
import subprocess
import uuid

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import select

from conftest import MEWDEX_BIN, http_ok, wait_until
from mewdex.db.models import Meme, MemeCollectionItem, ScopeContext
from mewdex.search import keyword


def _library(sessions, scope_id: str, captions: list[str]) -> list[str]:
    ids = []
    with sessions.begin() as session:
        for caption in captions:
            sha = hashlib.sha256(f"{scope_id}-{caption}".encode()).hexdigest()
            meme = Meme(
                scope_id=scope_id,
                storage_key=sha + ".png",
                display_name=caption,
                name_source="uploaded",
                extension=".png",
                size_bytes=10,
                sha256=sha,
                provenance={},
                extensions={"image": {}},
                meme_context={"ocr_text": caption},
            )
            session.add(meme)
            session.flush()
            keyword.index_document(
                session, scope_id, meme.id, "h", {"name": caption, "ocr": caption, "labels": "", "phrase": ""}
            )
            ids.append(str(meme.id))
    return ids


@pytest.fixture
def accounts(sessions):
    """Two users with memes; ``rw``/``ro`` tokens of the first, ``other`` of the second."""
    from accounts_helpers import delete_users, own_scope_users
    from mewdex.platform.tokens import create_token

    with sessions.begin() as session:
        (a, b), made = own_scope_users(session, ["mcp-a", "mcp-b"])
        rw = create_token(session, a, "rw", scopes=["read", "write"])[1]
        ro = create_token(session, a, "ro", scopes=["read"])[1]
        other = create_token(session, b, "other", scopes=["read", "write"])[1]
        scopes = (a.scope_id, b.scope_id)
    memes = _library(
        sessions, scopes[0], ["I don't believe a single word", "monday morning coffee", "cat knocks glass off table"]
    )
    secret = _library(sessions, scopes[1], ["the other user's secret meme"])
    yield {
        "rw": rw,
        "ro": ro,
        "other": other,
        "scope": scopes[0],
        "other_scope": scopes[1],
        "memes": memes,
        "secret": secret[0],
    }
    delete_users(sessions, made)  # their scopes too, and all that hangs on them


@pytest.fixture
def server(mewdex_env, accounts, tmp_path):
    """A real ``mewdex serve`` (no workers) on a free port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [str(MEWDEX_BIN), "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "0"],
        env={**os.environ, **mewdex_env.env},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def up():
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()
        return http_ok(url + "/readyz")  # /health: degraded once other tests' queued work waits unconsumed

    wait_until(up, 120, 0.3, "mewdex serve")
    yield url
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


def _payload(result) -> object:
    """A tool result's structured content (or its first text block as JSON)."""
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content) if isinstance(content, dict) else content
    return json.loads(result.content[0].text)


async def _http(url: str, token: str | None, calls):
    import httpx2

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
            return await calls(client)


def _give_picture(sessions, scope_id: str, meme_id: str) -> bytes:
    """Store a real PNG as the meme's original (what an upload leaves), so get_meme has a picture."""
    import io

    from PIL import Image as PILImage

    from mewdex.db.scopes import storage_namespace
    from mewdex.storage import blob_store

    buffer = io.BytesIO()
    PILImage.new("RGB", (8, 8), (200, 30, 30)).save(buffer, format="PNG")
    with sessions.begin() as session:
        meme = session.execute(select(Meme).where(Meme.id == uuid.UUID(meme_id))).scalar_one()
        meme.size_bytes = len(buffer.getvalue())
        meme.sha256 = hashlib.sha256(buffer.getvalue()).hexdigest()
        meme.storage_key = meme.sha256 + ".png"
        blob_store().put(storage_namespace(session, scope_id), meme.storage_key, buffer.getvalue())
    return buffer.getvalue()


def test_mcp_over_streamable_http_with_bearer_tokens_and_scopes(server, accounts, sessions):
    png = _give_picture(sessions, accounts["scope"], accounts["memes"][0])

    async def as_reader(client):
        names = {t.name for t in (await client.list_tools()).tools}
        assert names >= {
            "search_memes",
            "search_by_image",
            "more_like_this",
            "get_meme",
            "list_collections",
            "add_to_collection",
            "create_collection",
        }
        found = _payload(await client.call_tool("search_memes", {"query": "I don't believe a single word", "n": 3}))
        assert found[0]["id"] == accounts["memes"][0]
        meme = await client.call_tool("get_meme", {"meme_id": accounts["memes"][1]})
        assert json.loads(meme.content[0].text)["display_name"] == "monday morning coffee"
        # One's own meme with a picture, read token: the facts and the image (it was "Error executing
        # tool get_meme" while the tool's list[Any] result had an output schema).
        pictured = await client.call_tool("get_meme", {"meme_id": accounts["memes"][0]})
        assert not pictured.is_error, pictured.content[0].text
        assert json.loads(pictured.content[0].text)["id"] == accounts["memes"][0]
        assert pictured.content[1].type == "image"
        assert base64.b64decode(pictured.content[1].data) == png
        # ... and the facts as structured content too, under get_meme's output schema.
        assert pictured.structured_content["id"] == accounts["memes"][0]
        assert pictured.structured_content["display_name"] == "I don't believe a single word"
        denied = await client.call_tool("add_to_collection", {"collection": "faves", "meme_ids": [found[0]["id"]]})
        assert denied.is_error and "insufficient_scope" in denied.content[0].text
        refused = await client.call_tool("create_collection", {"name": "new one"})
        assert refused.is_error and "insufficient_scope" in refused.content[0].text
        hidden = await client.call_tool("get_meme", {"meme_id": accounts["secret"]})
        assert hidden.is_error and "not_found" in hidden.content[0].text
        secret = _payload(await client.call_tool("search_memes", {"query": "the other user's secret meme"}))
        assert accounts["secret"] not in [h["id"] for h in secret]
        return True

    async def as_writer(client):
        added = _payload(
            await client.call_tool("add_to_collection", {"collection": "faves", "meme_ids": [accounts["memes"][2]]})
        )
        assert added["added"] == 1
        created = _payload(await client.call_tool("create_collection", {"name": "empty one"}))
        assert created["name"] == "empty one"
        taken = await client.call_tool("create_collection", {"name": "faves"})
        assert taken.is_error and "collection_name_taken" in taken.content[0].text
        listed = _payload(await client.call_tool("list_collections", {}))
        assert [(c["name"], c["count"]) for c in listed] == [("empty one", 0), ("faves", 1)]
        other = await client.call_tool("add_to_collection", {"collection": "faves", "meme_ids": [accounts["secret"]]})
        assert other.is_error and "not_found" in other.content[0].text
        return True

    assert anyio.run(_http, server, accounts["ro"], as_reader)
    assert anyio.run(_http, server, accounts["rw"], as_writer)
    # No token, or a wrong one: 401 with the protected-resource metadata pointer.
    for token in (None, "mdx_not-a-token"):
        r = httpx.post(
            server + "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={
                **({"Authorization": f"Bearer {token}"} if token else {}),
                "Accept": "application/json, text/event-stream",
            },
        )
        assert r.status_code == 401 and "resource_metadata" in r.headers.get("www-authenticate", ""), r.text


def test_mcp_over_stdio_as_the_local_scope_and_with_a_token(mewdex_env, sessions, accounts):
    env = {**os.environ, **mewdex_env.env, "MEWDEX_DEFAULT_SCOPE": accounts["other_scope"]}
    env.pop("MEWDEX_TOKEN", None)

    async def local(client):
        found = _payload(await client.call_tool("search_memes", {"query": "the other user's secret meme"}))
        assert found[0]["id"] == accounts["secret"]
        added = _payload(
            await client.call_tool("add_to_collection", {"collection": "mine", "meme_ids": [accounts["secret"]]})
        )
        return added["added"]

    async def with_token(client):
        found = _payload(await client.call_tool("search_memes", {"query": "monday morning coffee", "n": 1}))
        assert [h["id"] for h in found] == [accounts["memes"][1]]
        denied = await client.call_tool("add_to_collection", {"collection": "x", "meme_ids": [found[0]["id"]]})
        return denied.is_error and "insufficient_scope" in denied.content[0].text

    async def run(params, calls):
        async with Client(params) as client:
            return await calls(client)

    assert anyio.run(run, StdioServerParameters(command=str(MEWDEX_BIN), args=["mcp"], env=env), local) == 1
    token_env = {**env, "MEWDEX_TOKEN": accounts["ro"]}
    assert anyio.run(
        run, StdioServerParameters(command=str(MEWDEX_BIN), args=["mcp", "--token"], env=token_env), with_token
    )
    with sessions.begin() as session:
        assert session.execute(
            select(MemeCollectionItem.meme_id).where(MemeCollectionItem.scope_id == accounts["other_scope"])
        ).scalars().all() == [uuid.UUID(accounts["secret"])]
    bad = subprocess.run(
        [str(MEWDEX_BIN), "mcp", "--token"],
        env={**env, "MEWDEX_TOKEN": "mdx_wrong"},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert bad.returncode == 2 and "token" in bad.stderr and bad.stdout == ""


def test_tools_only_see_the_callers_scope(sessions, accounts):
    from mewdex.assistant import tools
    from mewdex.assistant.errors import AssistantError

    mine, theirs = ScopeContext(accounts["scope"]), ScopeContext(accounts["other_scope"])
    assert accounts["secret"] not in [h["id"] for h in tools.search_memes(sessions, mine, "secret meme", 20)]
    for call in (
        lambda: tools.get_meme(sessions, mine, accounts["secret"]),
        lambda: tools.add_to_collection(sessions, mine, "x", [accounts["secret"]]),
        lambda: tools.search_memes(sessions, mine, "cat", 5, None, "their collection"),
        lambda: tools.more_like_this(sessions, mine, accounts["secret"]),
    ):
        with pytest.raises(Exception) as info:
            call()
        assert getattr(info.value, "code", None) == "not_found", info.value
    tools.add_to_collection(sessions, theirs, "their collection", [accounts["secret"]])
    assert [c["name"] for c in tools.list_collections(sessions, mine)] == []
    with pytest.raises(AssistantError):
        tools.search_memes(sessions, mine, "x", 0)
