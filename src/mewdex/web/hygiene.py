"""Input hygiene for JSON bodies, in one place every JSON route goes through (a pure ASGI middleware).

JSON may carry text that nothing downstream can store: a lone surrogate (``"\\ud800x"``: not
encodable as UTF-8) or a NUL (``"\\u0000"``: PostgreSQL text cannot hold it). Such a body is answered
``422 invalid_text`` (``details``: ``{"loc": [...]}``, the path of the first bad string or key)
before any route runs, instead of failing deep in a query as a 500.

Both can only arrive as ``\\u`` escapes (raw NUL and other control characters are already invalid
JSON, and raw bytes are UTF-8), so a body without a backslash-u is passed on untouched; only bodies
with one are decoded here once more to be checked. Malformed JSON is left for the route's own
validation to answer.
"""

from __future__ import annotations

import json
from typing import Any

from mewdex.web.errors import error_body

_JSON_TYPES = (b"application/json",)


def _is_json(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name.lower() == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return media in _JSON_TYPES or media.endswith(b"+json")
    return False


def unstorable(text: str) -> bool:
    """True when ``text`` holds a NUL or a lone surrogate (U+D800–U+DFFF)."""
    return "\x00" in text or any("\ud800" <= ch <= "\udfff" for ch in text)


def find_unstorable(value: Any, loc: tuple = ()) -> tuple | None:
    """The path (keys and indexes) of the first string or key in a decoded JSON value that
    :func:`unstorable` refuses; None when all text is storable."""
    stack = [(value, loc)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if unstorable(item):
                return path
        elif isinstance(item, dict):
            for key, child in item.items():
                if unstorable(key):
                    return (*path, key.encode("utf-8", "backslashreplace").decode())
                stack.append((child, (*path, key)))
        elif isinstance(item, list):
            stack.extend((child, (*path, i)) for i, child in enumerate(item))
    return None


class JsonTextGuard:
    """Refuses JSON bodies with unstorable text (see the module docstring)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not _is_json(scope.get("headers", [])):
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if b"\\u" in body:
            try:
                loc = find_unstorable(json.loads(body))
            except (ValueError, RecursionError):
                loc = None  # not valid JSON: the route's validation answers
            if loc is not None:
                return await _refuse(send, loc)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _refuse(send, loc: tuple) -> None:
    message = "a text value contains a NUL or a lone surrogate, which cannot be stored"
    body = json.dumps(error_body("invalid_text", message, {"loc": ["body", *loc]})).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 422,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
