"""Binding the webhook channel: :func:`connect` (the URL, a new signing secret)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy.orm import Session

from mewdex.channels import bindings
from mewdex.channels.errors import ChannelError
from mewdex.channels.webhook import NAME
from mewdex.egress import EgressError, check_url
from mewdex.providers import connectors
from mewdex.providers import webhook as signed
from mewdex.providers.errors import ProviderError


def connect(session: Session, *, scope_id: str, user_id: UUID | None, url: str) -> tuple[Any, str]:
    """Bind the scope's webhook to ``url`` with a new secret; ``(binding row, secret)`` — the only
    time the secret is shown. Raises ``ChannelError`` ``channel_config_invalid`` (422) for a URL that
    is not http(s), has credentials, or that the egress guard refuses."""
    try:
        config = connectors.provider_spec(signed.PROVIDER).validate_config({"url": url})
        check_url(config["url"])
    except ProviderError as exc:
        raise ChannelError("channel_config_invalid", exc.message) from None
    except EgressError as exc:
        raise ChannelError("channel_config_invalid", exc.message, {"egress": exc.code}) from None
    secret = signed.new_secret()
    row = bindings.bind(
        session,
        scope_id=scope_id,
        user_id=user_id,
        channel=NAME,
        identity=None,
        config={"url": config["url"], "secret": secret},
    )
    return row, secret
