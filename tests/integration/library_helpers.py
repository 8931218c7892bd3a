"""Helpers of the library-management tests: small real images, an app client, raw ASGI calls, and
the storage invariants every test checks (every meme has its blob, no blob without a row or an
open operation, no operation left open)."""

from __future__ import annotations

import asyncio
import io

import numpy as np
from PIL import Image
from sqlalchemy import select

from mewdex.db.models import DerivedImageThumbnail, Meme, Scope, StorageOperation


def png(seed: int, size=(48, 40)) -> bytes:
    """A small PNG whose pixels (and bytes) differ for every ``seed``."""
    rng = np.random.default_rng(seed)
    im = Image.fromarray(rng.integers(0, 255, size=(size[1], size[0], 3), dtype=np.uint8))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def noise_png(nbytes: int) -> bytes:
    """An incompressible PNG of about ``nbytes`` bytes (random RGB pixels, no compression)."""
    side = int((nbytes / 3) ** 0.5)
    im = Image.frombytes("RGB", (side, side), np.random.default_rng(7).bytes(side * side * 3))
    buf = io.BytesIO()
    im.save(buf, "PNG", compress_level=0)
    return buf.getvalue()


def multipart(
    files: list[tuple[str, bytes]], fields: dict[str, str] | None = None, boundary: str = "mewdexTestBoundary7MA4YWxk"
) -> tuple[bytes, str]:
    """A multipart/form-data body with ``files`` in field ``files``; returns (body, content type)."""
    out = io.BytesIO()
    for name, value in (fields or {}).items():
        out.write(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for filename, data in files:
        out.write(
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{filename}"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n".encode()
        )
        out.write(data)
        out.write(b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return out.getvalue(), f"multipart/form-data; boundary={boundary}"


def asgi_post(app, path: str, body: bytes, headers: dict[str, str], chunk: int = 64 * 1024) -> dict:
    """POST ``body`` to the ASGI ``app`` in ``chunk``-byte messages, exactly the headers given (no
    Content-Length unless given; ``Host: 127.0.0.1:8275`` unless given). Returns ``{"status", "json", "received"}``
    — ``received`` is how
    many body bytes the app pulled before answering."""
    import json

    state = {"sent": 0, "status": None, "body": b""}

    async def receive():
        if state["sent"] >= len(body):
            return (
                {"type": "http.disconnect"}
                if state["status"]
                else {"type": "http.request", "body": b"", "more_body": False}
            )
        piece = body[state["sent"] : state["sent"] + chunk]
        state["sent"] += len(piece)
        return {"type": "http.request", "body": piece, "more_body": state["sent"] < len(body)}

    async def send(message):
        if message["type"] == "http.response.start":
            state["status"] = message["status"]
        elif message["type"] == "http.response.body":
            state["body"] += message.get("body", b"")

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in {"host": "127.0.0.1:8275", **headers}.items()],
        "client": ("127.0.0.1", 1234),
        "server": ("testserver", 80),
    }
    asyncio.run(app(scope, receive, send))
    return {"status": state["status"], "json": json.loads(state["body"] or b"null"), "received": state["sent"]}


def check_storage_invariants(sessions, store, scope) -> None:
    """Every meme row has its blob; every blob belongs to a meme; every thumbnail blob to a thumbnail
    row and every available thumbnail row has its blob; no storage operation is left open."""
    from mewdex.library.thumbnails import thumbnail_namespace

    with sessions.begin() as session:
        namespace = str(session.get(Scope, scope.scope_id).storage_namespace)
        keys = set(session.execute(select(Meme.storage_key).where(Meme.scope_id == scope.scope_id)).scalars())
        thumbs = set(
            session.execute(
                select(DerivedImageThumbnail.output_key).where(
                    DerivedImageThumbnail.scope_id == scope.scope_id, DerivedImageThumbnail.status == "available"
                )
            ).scalars()
        )
        open_ops = session.execute(
            select(StorageOperation.operation_type, StorageOperation.status).where(
                StorageOperation.scope_id == scope.scope_id, StorageOperation.status.in_(("prepared", "file_applied"))
            )
        ).all()
    assert set(store.iter_keys(namespace)) == keys, "blobs and meme rows differ"
    assert set(store.iter_keys(thumbnail_namespace(namespace))) == thumbs, "thumbnail blobs and rows differ"
    assert open_ops == [], open_ops
