"""``/mcp`` of ``mewdex serve``: the MCP server's streamable HTTP app (:func:`mewdex.mcp_server.http_app`),
built at the first request to its paths rather than at start-up.

Importing the ``mcp`` SDK and building the server takes about a second of CPU; a server that is never
asked for MCP (most of them) no longer pays it before ``/health`` answers. The SDK's session manager
still runs inside the host app's lifespan: :meth:`McpMount.running` holds a task group for the
lifespan's length, the first request starts the session manager in it, and the end of the lifespan
stops it (a fresh one per run of the app: the SDK's manager runs only once).
"""

from __future__ import annotations

import contextlib

import anyio
from anyio import to_thread

PATH = "/mcp"  # mewdex.mcp_server.PATH, checked when the app is built


class McpMount:
    """An ASGI endpoint for :data:`PATHS` serving a lazily built MCP app; 503 outside the lifespan."""

    PATHS = (PATH, "/.well-known/oauth-protected-resource" + PATH)

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._app = None
        self._group: anyio.abc.TaskGroup | None = None
        self._lock: anyio.Lock | None = None
        self._stop: anyio.Event | None = None

    @contextlib.asynccontextmanager
    async def running(self):
        """Enter in the host's lifespan: MCP requests are served while it is entered."""
        self._lock, self._stop = anyio.Lock(), anyio.Event()
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = self._app = None
                self._stop.set()

    async def _serve(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        from mewdex import mcp_server

        assert mcp_server.PATH == PATH
        # The import and the build are CPU work: off the event loop, which goes on answering.
        app, server = await to_thread.run_sync(mcp_server.http_app, self.base_url)
        stop = self._stop
        assert stop is not None
        async with server.session_manager.run():
            self._app = app
            task_status.started()
            await stop.wait()

    async def __call__(self, scope, receive, send) -> None:
        if self._app is None and self._group is not None and self._lock is not None:
            async with self._lock:
                if self._app is None and self._group is not None:
                    await self._group.start(self._serve)
        app = self._app
        if app is None:  # not started (or shutting down)
            await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"MCP is not running"})
            return
        await app(scope, receive, send)
