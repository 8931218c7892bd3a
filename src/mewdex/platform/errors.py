"""Platform service errors: a stable snake_case code (the web layer maps it to an HTTP status)."""

from __future__ import annotations

import unicodedata

from mewdex.dto.errors import DomainError


class PlatformError(DomainError):
    """A refused account/quota operation: ``code`` (``invalid_credentials``, ``quota_exceeded`` …),
    ``message``, ``details``, ``headers`` (``Retry-After``); the web layer maps the code to a status."""


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
