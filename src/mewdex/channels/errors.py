"""Errors of the channel services and the HTTP status of each framework code (:data:`STATUSES`; a
channel package declares its own in ``CHANNEL.errors``, see :mod:`mewdex.channels.registry`)."""

from __future__ import annotations

from mewdex.dto.errors import DomainError

#: The framework's channel codes → HTTP status (merged into the web layer's map by
#: :func:`mewdex.channels.registry.error_statuses`).
STATUSES: dict[str, int] = {
    "channel_unknown": 404,
    "channel_not_bound": 404,
    "bind_code_invalid": 404,
    "channel_webhook_secret_invalid": 401,
    "channel_request_expired": 401,
    "channel_request_replayed": 409,
    "channel_owner_disabled": 409,
    "channel_not_configured": 409,
    "channel_identity_taken": 409,
    "channel_window_closed": 409,
    "channel_platform_error": 502,
}


class ChannelError(DomainError):
    """``channel_unknown`` (404), ``channel_not_bound`` (404), ``channel_not_configured`` (409: the
    admin has not set the channel up, e.g. no ``MEWDEX_TELEGRAM_BOT_TOKEN``), ``bind_code_invalid``
    (404: unknown, used or expired), ``channel_identity_taken`` (409: that chat is bound to another
    account), ``channel_webhook_secret_invalid`` (401),
    ``channel_request_expired`` (401: a signed request outside the replay window),
    ``channel_request_replayed`` (409: a signed request received before), ``channel_config_invalid`` (422),
    ``channel_window_closed`` (409: a proactive send past the platform's window),
    ``channel_platform_error`` (502: the platform refused a call)."""

    code = "invalid_request"
