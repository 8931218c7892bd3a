"""Domain errors and the JSON error body.

Services raise a :class:`DomainError` (or a subclass) carrying only a stable snake_case ``code``, a
human ``message`` and optional ``details``; the web layer alone maps codes to HTTP statuses
(:data:`mewdex.web.errors.STATUS_BY_CODE`) and answers ``{"error": {"code", "message", "details"}}``.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from pydantic import BaseModel


class DomainError(Exception):
    """A refused operation: ``code`` (stable), ``message``, ``details`` (JSON-able or None) and
    ``headers`` the answer should carry (``Retry-After`` of a rate limit)."""

    code = "invalid_request"

    def __init__(
        self, code: str | None = None, message: str = "", details: Any = None, headers: dict[str, str] | None = None
    ):
        super().__init__(message or code or self.code)
        self.code = code or self.code
        self.message = message or str(self)
        self.details, self.headers = details, headers


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorBody(BaseModel):
    """The body of every error response: ``{"error": {"code", "message", "details"}}``."""

    error: ErrorDetail


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}


# Format characters (Cf) that may stay in a name: the joiners inside emoji and Indic/Persian text,
# and the tag characters of subdivision flags (🏴 + tags).
_KEPT_FORMAT = frozenset("\u200c\u200d" + "".join(chr(c) for c in range(0xE0020, 0xE0080)))


def strip_format_characters(value: str) -> str:
    """``value`` NFC without invisible format characters (Unicode category Cf: bidi overrides and
    isolates, zero-width spaces, BOM …) except the joiners ZWJ/ZWNJ and emoji tag characters. The one rule every
    user-visible name (meme, collection, user, token) passes through so no name can disguise itself."""
    return "".join(
        ch for ch in unicodedata.normalize("NFC", value) if ch in _KEPT_FORMAT or unicodedata.category(ch) != "Cf"
    )
