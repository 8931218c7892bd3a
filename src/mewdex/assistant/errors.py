"""Errors of the assistant's services (codes mapped to HTTP statuses in ``web/errors.py``)."""

from __future__ import annotations

from mewdex.dto.errors import DomainError


class AssistantError(DomainError):
    """``not_found`` (404: missing, deleted or another scope's), ``conversation_not_deleted`` (409),
    ``message_empty`` / ``message_too_long`` (422), ``run_not_active`` (409)."""

    code = "invalid_request"
