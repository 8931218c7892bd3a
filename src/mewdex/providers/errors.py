"""Provider errors: a stable code (the web layer maps it to a status); messages never hold secrets."""

from __future__ import annotations

from mewdex.dto.errors import DomainError


class ProviderError(DomainError):
    """A refused or failed outside call or connector operation. Codes: ``provider_unknown``,
    ``connector_config_invalid``, ``connector_not_granted``, ``connector_disabled``,
    ``connector_unavailable`` (no usable connection), ``connector_unverified`` (verify again: the
    definition's revision changed), ``provider_failed`` (the outside system answered an error or
    nothing), ``provider_rate_limited``, ``provider_invalid_output``, ``provider_refused``
    (the model refused), ``public_url_missing``, ``secret_undecryptable``."""

    def __init__(
        self, code: str, message: str, details=None, *, retryable: bool = False, status_code: int | None = None
    ):
        super().__init__(code, message, details)
        self.retryable = retryable
        self.status_code = status_code
