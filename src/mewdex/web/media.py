"""Blob bytes as HTTP responses, whichever blob store holds them: Starlette's ``FileResponse``
(``Range`` with single and multiple ranges, ``If-Range``, ``HEAD``, 416) reading through the store's
seekable reader — a local file, or ranged ``GetObject`` requests on an object store."""

from __future__ import annotations

import os
import stat as stat_module
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
from starlette.responses import FileResponse
from starlette.types import Receive, Scope, Send

from mewdex.storage.blobs import BlobStat, BlobStore

PATHSEND = "http.response.pathsend"


class BlobResponse(FileResponse):
    """A ``FileResponse`` whose bytes come from ``store.open(namespace, key)`` (opened on a worker
    thread when the body is sent); ``blob`` gives the length and ``Last-Modified``."""

    def __init__(
        self,
        store: BlobStore,
        namespace: str | uuid.UUID,
        key: str,
        blob: BlobStat,
        *,
        media_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        fake_stat = os.stat_result(
            (stat_module.S_IFREG | 0o644, 0, 0, 1, 0, 0, blob.size, int(blob.mtime), int(blob.mtime), int(blob.mtime))
        )
        super().__init__(key, headers=headers, media_type=media_type, stat_result=fake_stat)
        self._store, self._namespace, self._key = store, namespace, key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if PATHSEND in (scope.get("extensions") or {}):  # there is no path to hand the server
            scope = {**scope, "extensions": {k: v for k, v in scope["extensions"].items() if k != PATHSEND}}
        await super().__call__(scope, receive, send)

    @asynccontextmanager
    async def _open_file(self) -> AsyncIterator[Any]:
        handle = await anyio.to_thread.run_sync(self._store.open, self._namespace, self._key)
        file = anyio.wrap_file(handle)
        try:
            yield file
        finally:
            with anyio.CancelScope(shield=True):  # closing must finish even when the transfer is cancelled
                await file.aclose()


def blob_response(
    store: BlobStore,
    namespace: str | uuid.UUID,
    key: str,
    *,
    media_type: str,
    headers: Mapping[str, str] | None = None,
) -> BlobResponse | None:
    """The response serving blob ``key`` of ``namespace`` (None when the store has no such blob)."""
    blob = store.stat(namespace, key)
    if blob is None:
        return None
    return BlobResponse(store, namespace, key, blob, media_type=media_type, headers=headers)
