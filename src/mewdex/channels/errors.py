"""Errors of the channel services. The HTTP status of each framework code is declared with the
framework (``mewdex.channels.CAPABILITY.errors``); a channel package declares its own in
``CHANNEL.errors`` (see :mod:`mewdex.channels.registry`)."""

from __future__ import annotations

from mewdex.dto.errors import DomainError


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
