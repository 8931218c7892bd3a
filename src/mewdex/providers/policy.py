"""A scope's analysis policy: which outside help its analysis may use.

``{"vision": bool, "reverse_image_search": "forbid" | "auto", "llm_enhance": bool, "llm_rerank": bool}``
(``llm_enhance``: searches rewrite the query with the chat model; ``llm_rerank``: the chat model
reorders the top 20 results; both metered, off by default). Without a
stored row: everything off, except ``vision`` for the default (local) scope when
``MEWDEX_VISION_MODEL`` is set. The pipeline freezes it into each new job's ``analysis_policy``
(:func:`mewdex.pipeline.jobs.create_job`), so changing it affects new and re-analysed memes only.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.models import ScopeAnalysisPolicy, ScopeContext, utcnow
from mewdex.providers.errors import ProviderError

FIELDS = ("vision", "reverse_image_search", "llm_enhance", "llm_rerank")


def defaults(scope_id: str) -> dict[str, Any]:
    settings = get_settings()
    return {
        "vision": bool(settings.vision_model) and scope_id == settings.default_scope,
        "reverse_image_search": "forbid",
        "llm_enhance": False,
        "llm_rerank": False,
    }


def for_scope(session: Session, scope_id: str) -> dict[str, Any]:
    """The scope's policy (module doc)."""
    row = session.get(ScopeAnalysisPolicy, scope_id)
    if row is None:
        return defaults(scope_id)
    return {key: getattr(row, key) for key in FIELDS}


def update(session: Session, scope: ScopeContext, **changes: Any) -> dict[str, Any]:
    """Change some fields of the scope's policy; 422 ``invalid_request`` for unknown fields/values."""
    current = for_scope(session, scope.scope_id)
    for key, value in changes.items():
        if key not in FIELDS:
            raise ProviderError("invalid_request", f"unknown policy field {key}")
        if key == "reverse_image_search" and value not in ("forbid", "auto"):
            raise ProviderError("invalid_request", "reverse_image_search must be forbid or auto")
        if key != "reverse_image_search" and not isinstance(value, bool):
            raise ProviderError("invalid_request", f"{key} must be true or false")
        current[key] = value
    row = session.get(ScopeAnalysisPolicy, scope.scope_id, with_for_update=True)
    if row is None:
        row = ScopeAnalysisPolicy(scope_id=scope.scope_id)
        session.add(row)
    for key in FIELDS:
        setattr(row, key, current[key])
    row.updated_at = utcnow()
    session.flush()
    return current
