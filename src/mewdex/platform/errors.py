"""Platform service errors: a stable snake_case code and the HTTP status the API answers with."""

from __future__ import annotations

import unicodedata
from typing import Any


class PlatformError(Exception):
    """``status`` (401/403/404/409/413/422/429), ``code`` (``invalid_credentials``, ``quota_exceeded`` …)."""

    def __init__(self, status: int, code: str, message: str, details: Any = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.details, self.headers = status, code, message, details, headers


def clean_text(value: str, field: str, *, max_chars: int) -> str:
    """``value`` stripped of format characters (bidi overrides, zero-width …: the one name rule,
    :func:`mewdex.library.names.strip_format_characters`) and of outer whitespace; 422
    ``{field}_invalid`` for NUL/control characters or lone surrogates (PostgreSQL text cannot hold
    them) and for more than ``max_chars`` characters."""
    from mewdex.library.names import strip_format_characters

    if any(unicodedata.category(ch) == "Cs" for ch in value):
        raise PlatformError(422, f"{field}_invalid", f"{field} holds control characters or invalid Unicode")
    value = strip_format_characters(value).strip()
    if len(value) > max_chars:
        raise PlatformError(422, f"{field}_too_long", f"{field} is over {max_chars} characters")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in value):
        raise PlatformError(422, f"{field}_invalid", f"{field} holds control characters or invalid Unicode")
    return value
