"""``/mcp`` of ``mewdex serve`` is built at its first request (web.mcp_mount): the app starts without
importing the ``mcp`` SDK, the first request builds and serves it, the end of the lifespan stops it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import anyio
import httpx

from mewdex.web.mcp_mount import McpMount


def test_building_the_web_app_imports_no_mcp_sdk():
    code = textwrap.dedent(
        """
        import sys
        from mewdex.web.app import create_app
        create_app(workers=0)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("mcp", "mcp_types") or m == "mewdex.mcp_server")
        assert loaded == [], loaded
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=os.environ)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_first_request_builds_the_server_and_the_lifespan_end_stops_it():
    mount = McpMount("http://127.0.0.1:8275")

    async def post(client: httpx.AsyncClient) -> httpx.Response:
        return await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})

    async def run() -> list[int]:
        statuses = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=mount), base_url="http://127.0.0.1") as c:
            statuses.append((await post(c)).status_code)  # before the lifespan: not running
            async with mount.running():
                assert mount._app is None  # nothing built yet
                first, second = await post(c), await post(c)
                statuses += [first.status_code, second.status_code]  # the SDK's bearer check answers
                assert "Bearer" in first.headers.get("www-authenticate", "")
            statuses.append((await post(c)).status_code)  # after it: stopped
        return statuses

    assert anyio.run(run) == [503, 401, 401, 503]
