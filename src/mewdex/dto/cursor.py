"""The one cursor codec of every paged listing: an opaque URL-safe string for a short list of
values (the sort keys of the last row). Anything that is not a cursor we wrote — NUL, bad base64,
not JSON, deeply nested JSON, the wrong number or types of values — raises :class:`CursorInvalid`
(422 ``invalid_cursor``), never anything else.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any
from uuid import UUID

from mewdex.dto.errors import DomainError

MAX_CURSOR_CHARS = 2048


class CursorInvalid(DomainError):
    """``invalid_cursor``: the cursor is malformed or belongs to another listing/sort."""

    code = "invalid_cursor"

    def __init__(self, message: str = "the cursor is not valid for this listing"):
        super().__init__("invalid_cursor", message)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    return value


def encode_cursor(values: list[Any]) -> str:
    """``values`` (JSON scalars, datetimes, UUIDs) → base64url of their JSON array, unpadded."""
    raw = json.dumps([_plain(v) for v in values], ensure_ascii=False, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _typed(value: Any, expected: type) -> Any:
    if expected is datetime:
        if not isinstance(value, str):
            raise ValueError
        return datetime.fromisoformat(value)
    if expected is UUID:
        if not isinstance(value, str):
            raise ValueError
        return UUID(value)
    if isinstance(value, bool) and expected is not bool:
        raise ValueError
    if not isinstance(value, expected) or (isinstance(value, str) and "\x00" in value):
        raise ValueError
    return value


def decode_cursor(cursor: str, types: tuple[type, ...]) -> list[Any]:
    """The values of ``cursor``: exactly ``len(types)`` values, each of its type (``str``, ``int``,
    ``float``, ``bool``; ``datetime`` / ``UUID`` parsed from their strings).

    Raises:
        CursorInvalid: for anything that is not such a cursor.
    """
    if not isinstance(cursor, str) or not cursor or len(cursor) > MAX_CURSOR_CHARS or not cursor.isascii():
        raise CursorInvalid()
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        values = json.loads(raw.decode("utf-8"))
        if not isinstance(values, list) or len(values) != len(types):
            raise ValueError
        return [_typed(v, t) for v, t in zip(values, types, strict=True)]
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, RecursionError, OverflowError):
        raise CursorInvalid() from None
