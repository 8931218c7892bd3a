"""The webhook channel: memes (and texts) POSTed to a URL the user gives, signed per Standard
Webhooks by :mod:`mewdex.providers.webhook` (its ``sign``/``send``; each call is audited there).

Binding: :func:`connect` checks the URL (http(s), no credentials, the egress guard), makes a
``whsec_`` secret (sealed in the binding's config; shown once, by the answer that made it) and binds
the scope. Outbound only: no identity, no inbound.

Events: ``channel.meme`` ``{"meme_id", "display_name", "sha256", "extension", "caption", "image_url",
"image_expires_at"}`` and ``channel.text`` ``{"text"}``; the body's ``timestamp`` is when the
delivery was queued (ISO 8601 UTC; the same on every retry). The image travels as a link, not in
the payload (Standard Webhooks advises small bodies): ``image_url`` is a signed, expiring
``{MEWDEX_PUBLIC_URL}/media/{id}?exp=…&sig=…`` (:mod:`mewdex.platform.media_urls`, valid
``MEWDEX_MEDIA_URL_TTL_SECONDS``, for the binding's owner; dies with a password change or a
disabled account). Without ``MEWDEX_PUBLIC_URL`` there is no address to link to: an image of at
most :data:`INLINE_IMAGE_BYTES` goes inline as ``image_base64``, a larger one is left out
(``image_omitted: "public_url_missing"``; ``meme_id`` and ``sha256`` still name it). A non-2xx
answer is a failed delivery with the status as the platform code (5xx and no answer are retried).
"""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar
from uuid import UUID

from sqlalchemy.orm import Session

from mewdex.channels import bindings
from mewdex.channels.base import Binding, DeliveryFailed, Inbound, MemeFile, Sent, current_delivery
from mewdex.channels.errors import ChannelError
from mewdex.channels.registry import Channel, register_adapter
from mewdex.config import get_settings
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import ChannelDelivery, User
from mewdex.egress import EgressError, check_url
from mewdex.platform import media_urls
from mewdex.providers import connectors
from mewdex.providers import webhook as signed
from mewdex.providers.connectors import Connection
from mewdex.providers.errors import ProviderError

NAME = "webhook"
#: the largest image sent inline (base64) when there is no public URL to link to
INLINE_IMAGE_BYTES = 256 * 1024


class WebhookAdapter:
    name: ClassVar[str] = NAME
    secret_fields: ClassVar[tuple[str, ...]] = ("secret",)
    min_send_interval: ClassVar[float] = 0.0
    command_prefixes: ClassVar[tuple[str, ...]] = ()
    outbound_only: ClassVar[bool] = True

    def target_of(self, binding: Binding) -> str:
        return str(binding.config["url"])

    def binding_config(self, message: Inbound) -> dict[str, Any]:
        raise ChannelError("invalid_request", "the webhook channel has no inbound messages")

    def bind_help(self, lang: str) -> str:
        return ""

    def fetch_image(self, ref: str) -> bytes:
        raise ChannelError("invalid_request", "the webhook channel has no inbound messages")

    def _post(self, binding: Binding | None, event: str, data: dict[str, Any]) -> Sent:
        if binding is None:
            raise DeliveryFailed("channel_not_bound", "a webhook delivery needs its binding")
        connection = Connection(
            definition_id=None,  # type: ignore[arg-type]  # a channel binding, not a connector definition
            provider=signed.PROVIDER,
            name=f"channel:{NAME}",
            revision=0,
            config={"url": binding.config["url"]},
            external_system_id=None,
            credentials={"secret": binding.config["secret"]},
            scope_id=binding.scope_id,
            user_id=UUID(binding.user_id) if binding.user_id else None,
        )
        # The same id and event time on every retry of one delivery: a receiver drops a repeat.
        delivery_id = current_delivery.get()
        message_id = f"msg_{(delivery_id or uuid.uuid4().hex).replace('-', '')}"
        occurred_at = None
        if delivery_id is not None:
            with get_sessionmaker().begin() as session:
                row = session.get(ChannelDelivery, UUID(delivery_id))
                occurred_at = row.created_at if row is not None else None
        try:
            signed.send(get_sessionmaker(), connection, event, data, message_id=message_id, occurred_at=occurred_at)
        except ProviderError as exc:
            raise DeliveryFailed(
                "channel_platform_error" if exc.code == "provider_failed" else "channel_unreachable",
                exc.message,
                platform_code=exc.status_code or exc.code,
                platform_error=exc.message,
                retry_after=(exc.details or {}).get("retry_after"),
                retryable=exc.retryable,
            ) from None
        return Sent(message_id)

    def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent:
        data: dict[str, Any] = {
            "meme_id": meme.meme_id,
            "display_name": meme.display_name,
            "sha256": meme.sha256,
            "extension": meme.extension,
            "caption": caption,
        }
        data.update(_image_fields(binding, meme))
        return self._post(binding, "channel.meme", data)

    def send_text(self, binding: Binding | None, target: str, text: str) -> Sent:
        return self._post(binding, "channel.text", {"text": text})


def _image_fields(binding: Binding | None, meme: MemeFile) -> dict[str, Any]:
    """``image_url`` + ``image_expires_at`` (a signed link under ``MEWDEX_PUBLIC_URL``), else
    ``image_base64`` (small images) or ``image_omitted`` (module doc)."""
    settings = get_settings()
    public = (settings.public_url or "").rstrip("/")
    if not public:
        if len(meme.data) <= INLINE_IMAGE_BYTES:
            return {"image_base64": base64.b64encode(meme.data).decode()}
        return {"image_omitted": "public_url_missing"}
    with get_sessionmaker().begin() as session:
        # signed for the binding's owner (their scope and auth epoch); no-login mode: no account
        user = session.get(User, UUID(binding.user_id)) if binding is not None and binding.user_id else None
        path, exp = media_urls.sign(user, f"/media/{meme.meme_id}", settings.media_url_ttl_seconds)
    return {"image_url": f"{public}{path}", "image_expires_at": signed.iso_time(datetime.fromtimestamp(exp, UTC))}


ADAPTER = register_adapter(WebhookAdapter())


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


CHANNEL = Channel(name=NAME, modules=(__name__,))
