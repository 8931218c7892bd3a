"""Platform service errors: a stable snake_case code (the web layer maps it to an HTTP status)."""

from __future__ import annotations

import unicodedata

from mewdex.dto.errors import _KEPT_FORMAT as _KEPT_FORMAT  # re-exported: library.names uses it
from mewdex.dto.errors import DomainError
from mewdex.dto.errors import strip_format_characters as strip_format_characters  # the one name rule


class PlatformError(DomainError):
    """A refused account/quota operation: ``code`` (``invalid_credentials``, ``quota_exceeded`` …),
    ``message``, ``details``, ``headers`` (``Retry-After``); the web layer maps the code to a status."""


def clean_text(value: str, field: str, *, max_chars: int) -> str:
    """``value`` stripped of format characters (bidi overrides, zero-width …: the one name rule,
    :func:`strip_format_characters`) and of outer whitespace; 422
    ``{field}_invalid`` for NUL/control characters or lone surrogates (PostgreSQL text cannot hold
    them) and for more than ``max_chars`` characters."""
    if any(unicodedata.category(ch) == "Cs" for ch in value):
        raise PlatformError(f"{field}_invalid", f"{field} holds control characters or invalid Unicode")
    value = strip_format_characters(value).strip()
    if len(value) > max_chars:
        raise PlatformError(f"{field}_too_long", f"{field} is over {max_chars} characters")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in value):
        raise PlatformError(f"{field}_invalid", f"{field} holds control characters or invalid Unicode")
    return value
