"""The scope (tenant) a service call acts in: a validated id, shared by every layer (standard library only).

:mod:`mewdex.db.models` re-exports it; the web layer takes it from here.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScopeContext:
    """The validated scope (tenant) a service call acts in; never built from request bodies.

    Raises ValueError("scope_required") for empty ids and ValueError("scope_invalid") for ids
    longer than 128 characters, path fragments or control characters.
    """

    scope_id: str

    def __post_init__(self) -> None:
        if not isinstance(self.scope_id, str) or not self.scope_id.strip():
            raise ValueError("scope_required")
        value = self.scope_id.strip()
        if (
            len(value) > 128
            or value in {".", ".."}
            or "/" in value
            or "\\" in value
            or any(unicodedata.category(ch) == "Cc" for ch in value)
        ):
            raise ValueError("scope_invalid")
        object.__setattr__(self, "scope_id", value)
